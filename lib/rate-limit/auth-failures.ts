import { checkOptions, FAILURE_BUDGET_BUFFER, type OptionChecks, wholeNumber } from '../options';
import { ipKeyGenerator } from 'express-rate-limit';
import { TollgateError, RateLimitedError } from '../errors';
import {
  DEFAULT_PREFIX,
  DEFAULT_WINDOW_MS,
  type LimiterRedis,
  MAX_WINDOW_MS,
  MIN_WINDOW_MS,
  retryAfterSeconds,
  rateLimitHeaderValues,
} from './window';
import { AdmissionStore, type LocalCounters } from './admission-store';
import { SHARED_COUNTER_OPTION_CHECKS } from './tollgate-store';
import { type FailureLog, LocalFailureLog } from './failure-log';
import { SharedFailureLog } from './shared-failure-log';

/**
 * Throttles credential guessing: wrong keys, pairs and tokens (401) and whitelist
 * refusals (403 `ip_not_whitelisted`) are counted per client IP, and an IP whose budget is spent is
 * refused with 429 on every authentication attempt, right or wrong, until enough of its failures
 * have left the rolling window: no span of one window holds more than `limit` counted failures.
 *
 * The budget is checked and a failure counted in one synchronous step, at the moment a credential
 * is compared (`attempt()`), in this instance's memory: requests that arrive together (held-back
 * bodies, pipelining) cannot all pass the check before any of them is counted. With
 * `sharedFailures`, the worker threads of one process keep that memory in one SharedArrayBuffer
 * and hold the IP's lock for that step, so they count as one instance. A success costs nothing.
 * With a shared Redis each failure is told to Redis afterwards, so the failures of every
 * instance count together, and until Redis has answered, the IP's next attempt on this instance
 * waits (`queueAttempt()`): an instance compares a credential only knowing every failure it told
 * Redis before, so N instances compare at most N - 1 more than the limit per IP and window. Redis
 * counts a failure compared over the limit too (an instance compared it before it knew the budget
 * spent): it was compared, so it must fill every span of one window that holds it.
 *
 * Mount `guard` before the body is read (a cheap early refusal), pass the limiter to
 * `authenticate()` / `authenticateKeyPair()` (option `authFailures`), and mount `recordFailure` as
 * an error handler after the route, for the refusals that come after the comparison (whitelist).
 */

export interface AuthFailureLimiterOptions {
  /** Failed attempts allowed per IP per window. Defaults to 20. */
  limit?: number;
  /** Defaults to 60 000 ms. */
  windowMs?: number;
  redis?: LimiterRedis | undefined;
  /** Defaults to `tollgate:rl:`; `auth-failures:` is appended. */
  prefix?: string;
  expectedInstances?: number;
  /**
   * Client IPs remembered at most, each for IPs with budget left and for IPs whose budget is spent:
   * expired windows go first, then the oldest. Defaults to 100 000.
   */
  maxTrackedIps?: number;
  /**
   * The failure budget the worker threads of this process share: the `failures` of a
   * `ThreadShare` link (made with this `limit` as its `authFailureLimit`, and this `windowMs`).
   * Their failures count together, as one instance's do; its own capacity replaces
   * `maxTrackedIps`. Without it, this thread counts alone.
   */
  sharedFailures?: SharedArrayBuffer | undefined;
  now?: () => number;
}

export interface AuthFailureLimiter {
  /** Refuses (429) a request from an IP whose budget is spent, before anything is read. */
  readonly guard: BudgetMiddleware;
  /**
   * The refusal `guard` would pass on for this client now (`429 rate_limited`, a `TollgateError`),
   * or `undefined`.
   */
  refusalFor(req: BudgetClient): TollgateError | undefined;
  /**
   * Runs `compare`, a synchronous credential check, under the request's IP budget: refuses with
   * `RateLimitedError` without calling it when the budget is spent, and counts a failure when it
   * throws a wrong-credential error. Check, comparison and count happen in one synchronous step.
   */
  attempt<T>(req: BudgetClient, compare: () => T): T;
  /**
   * `attempt()`, run once no failure of the request's IP is still being told to Redis (at once in
   * memory, and when none is), then `done` with its error or result. Middlewares use this one.
   */
  queueAttempt<T>(req: BudgetClient, compare: () => T, done: AttemptCallback<T>): void;
  /**
   * Counts `error` when it is a failure that `attempt()` did not count (a whitelist refusal);
   * returns whether it counted.
   */
  record(req: BudgetClient, error: unknown): boolean;
  /** Error handler calling `record()`, for the individual middlewares. */
  readonly recordFailure: BudgetErrorHandler;
  /**
   * Stops the timers of the limit engine `createAuthFailureLimiter()` made for it; counts kept in
   * Redis stay. The budget of a gate shares the gate's engine, which `close()` stops: there this
   * does nothing.
   */
  shutdown(): void;
}

/** Whose budget: the canonical client address (`clientIp()`), else Express's `req.ip`. */
export interface BudgetClient {
  readonly clientIp?: string | undefined;
  readonly ip?: string | undefined;
}

/** `next` of a middleware. */
export type BudgetNext = (error?: unknown) => void;
/** An Express (4 or 5) middleware, typed without Express: the core never imports it. */
export type BudgetMiddleware = (req: BudgetClient, res: unknown, next: BudgetNext) => void;
/** An Express error handler, typed without Express. */
export type BudgetErrorHandler = (
  error: unknown,
  req: BudgetClient,
  res: unknown,
  next: BudgetNext,
) => void;

export type AttemptCallback<T> = (error: unknown, value: T | undefined) => void;

export const DEFAULT_AUTH_FAILURE_LIMIT = 20;
const DEFAULT_MAX_TRACKED_IPS = 100_000;
const NAME = 'auth-failures';

const AUTH_FAILURE_LIMITER_OPTION_CHECKS: OptionChecks<AuthFailureLimiterOptions> = {
  ...SHARED_COUNTER_OPTION_CHECKS,
  limit: wholeNumber(1),
  windowMs: wholeNumber(MIN_WINDOW_MS, MAX_WINDOW_MS),
  maxTrackedIps: wholeNumber(1),
  sharedFailures: FAILURE_BUDGET_BUFFER,
};

export function createAuthFailureLimiter(
  options: AuthFailureLimiterOptions = {},
): AuthFailureLimiter {
  checkOptions('createAuthFailureLimiter()', options, AUTH_FAILURE_LIMITER_OPTION_CHECKS);
  const store = new AdmissionStore({
    windowMs: options.windowMs ?? DEFAULT_WINDOW_MS,
    redis: options.redis,
    expectedInstances: options.expectedInstances,
    now: options.now,
  });
  const shutdown = (): void => {
    store.shutdown();
  };
  return { ...authFailureLimiterOn(store, options), shutdown };
}

/**
 * The budget told to `store`, the limit engine of the scopes it sits beside (`tollgate()` hands
 * in its own), whose window must be `options.windowMs`: one fallback and one health for both.
 */
export function authFailureLimiterOn(
  store: AdmissionStore,
  options: AuthFailureLimiterOptions,
): AuthFailureLimiter {
  const limit = options.limit ?? DEFAULT_AUTH_FAILURE_LIMIT;
  const windowMs = options.windowMs ?? DEFAULT_WINDOW_MS;
  const now = options.now ?? Date.now;
  // Every instance's failures, in Redis: admitted up to the limit, so the engine knows the key full
  // (and `fullUntil()` answers) as soon as the limit-th failure is counted. Its keys are bare
  // addresses (`keyOf()`).
  const fleet: LocalCounters | undefined =
    options.redis === undefined
      ? undefined
      : store.countersFor(`${options.prefix ?? DEFAULT_PREFIX}${NAME}:`, {
          ipv4KeyPrefix: '',
          windowMs,
          rolling: true,
        });
  // This instance's own count, by IP: in this thread's memory, or shared by the worker threads
  // of this process.
  const log = failureLogOf(options, limit, windowMs);
  // Failures told to Redis and not yet answered, by IP: the IP's next attempt waits for them.
  const pending = new Map<string, Promise<void>>();
  // Errors `attempt()` has counted, so that `recordFailure` does not count them again.
  const counted = new WeakSet<TollgateError>();

  /** When the IP's budget is spent: the time it resets; `undefined` while some is left. */
  const spentUntil = (key: string): number | undefined => {
    const local = log.spentUntil(key, now());
    const everywhere = fleet?.fullUntil(key, limit);
    if (local === undefined) return everywhere;
    return everywhere === undefined ? local : Math.max(local, everywhere);
  };

  const refusal = (until: number): RateLimitedError => {
    const seconds = retryAfterSeconds(until, windowMs, now());
    const { rateLimit, policy } = rateLimitHeaderValues({
      name: NAME,
      limit,
      windowSeconds: Math.ceil(windowMs / 1000),
      remaining: 0,
      resetSeconds: seconds,
    });
    return new RateLimitedError(
      seconds,
      { 'RateLimit-Policy': policy, RateLimit: rateLimit },
      NAME,
    );
  };

  const tellFleet = (counters: LocalCounters, key: string): void => {
    // A failure to tell is the engine's to degrade (it counts locally then); the wait ends either
    // way (the command timeout of the kit's Redis client bounds it).
    // The failure was compared: Redis records it even when the budget is already spent there.
    const told = store
      .admit([{ counter: counters, key, limit, enforced: true, countWhenFull: true }])
      .then(
        () => undefined,
        () => undefined,
      );
    pending.set(key, told);
    void told.then(() => {
      if (pending.get(key) === told) pending.delete(key);
    });
  };

  const count = (key: string): void => {
    log.count(key, now());
    if (fleet !== undefined) tellFleet(fleet, key);
  };

  const refusalFor = (req: BudgetClient): RateLimitedError | undefined => {
    const until = spentUntil(keyOf(req));
    return until === undefined ? undefined : refusal(until);
  };

  const guard: BudgetMiddleware = function authFailureGuard(req, _res, next) {
    next(refusalFor(req));
  };

  const attempt = <T>(req: BudgetClient, compare: () => T): T => {
    const key = keyOf(req);
    // No other thread checks or counts this IP between this check and this count.
    return log.exclusive(key, () => {
      const until = spentUntil(key);
      if (until !== undefined) throw refusal(until);
      try {
        return compare();
      } catch (error) {
        if (countsAsFailure(error)) {
          counted.add(error);
          count(key);
        }
        throw error;
      }
    });
  };

  const queueAttempt = <T>(req: BudgetClient, compare: () => T, done: AttemptCallback<T>): void => {
    const waiting = pending.get(keyOf(req));
    if (waiting !== undefined) {
      void waiting.then(() => {
        queueAttempt(req, compare, done);
      });
      return;
    }
    let value: T;
    try {
      value = attempt(req, compare);
    } catch (error) {
      done(error, undefined);
      return;
    }
    done(undefined, value);
  };

  const record = (req: BudgetClient, error: unknown): boolean => {
    if (!countsAsFailure(error) || counted.has(error)) return false;
    counted.add(error);
    count(keyOf(req));
    return true;
  };

  const recordFailure: BudgetErrorHandler = function recordAuthFailure(error, req, _res, next) {
    record(req, error);
    next(error);
  };

  // The engine is the caller's (the gate's, shared with its scopes): the caller stops it.
  const shutdown = (): void => undefined;

  return { guard, refusalFor, attempt, queueAttempt, record, recordFailure, shutdown };
}

/** The shared log when the options give its buffer, else one in this thread's memory. */
function failureLogOf(
  options: AuthFailureLimiterOptions,
  limit: number,
  windowMs: number,
): FailureLog {
  if (options.sharedFailures !== undefined) {
    return new SharedFailureLog(options.sharedFailures, {
      limit,
      windowMs,
      maxTrackedIps: options.maxTrackedIps,
    });
  }
  return new LocalFailureLog({
    limit,
    windowMs,
    maxTrackedIps: options.maxTrackedIps ?? DEFAULT_MAX_TRACKED_IPS,
  });
}

function keyOf(req: BudgetClient): string {
  return ipKeyGenerator(req.clientIp ?? req.ip ?? 'unknown', 56);
}

/** Wrong or forged credentials, and whitelist refusals; not a missing or expired credential. */
const COUNTED_CODES: ReadonlySet<string> = new Set([
  'invalid_api_key',
  'invalid_credentials',
  'invalid_token',
  'ip_not_whitelisted',
]);

function countsAsFailure(error: unknown): error is TollgateError {
  return error instanceof TollgateError && COUNTED_CODES.has(error.code);
}
