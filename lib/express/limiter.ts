import type { Request, RequestHandler } from 'express';
import { ipKeyGenerator, rateLimit } from 'express-rate-limit';
import { MisconfigurationError, RateLimitedError } from '../errors';
import {
  check,
  checkOptions,
  isString,
  LIMITER_REDIS,
  objectWith,
  type OptionChecks,
  required,
  wholeNumber,
} from '../options';
import {
  DEFAULT_PREFIX,
  DEFAULT_WINDOW_MS,
  type LimiterRedis,
  MAX_WINDOW_MS,
  MIN_WINDOW_MS,
  retryAfterSeconds,
} from '../rate-limit/window';
import { TollgateStore } from '../rate-limit/tollgate-store';

/**
 * A fixed-window limiter for one scope: express-rate-limit over a `TollgateStore`, so it counts
 * through the same engine as `tollgate()`'s scopes. With `redis`, counts live in Redis (one
 * script call per request) and fall back to process memory while Redis is unusable; without it,
 * they live in memory. A refused request is not counted, and goes to `next()` as a
 * `RateLimitedError` (429 with `Retry-After`); every counted response carries the IETF
 * `RateLimit` and `RateLimit-Policy` headers.
 */

export type LimitKey = 'account' | 'ip' | ((req: Request) => string);

export interface RateLimiterOptions {
  /** The scope's name: in the `RateLimit` headers and the Redis key prefix. */
  name: string;
  /** Requests admitted per window. */
  limit: number;
  /** Window length in milliseconds. Defaults to 60 000. */
  windowMs?: number;
  /**
   * What is counted: `'account'` (the authenticated account: mount the limiter after
   * `authenticate()`, else the request fails closed), `'ip'` (the client IP, IPv6 by /56 network)
   * or a function. Defaults to `'account'`.
   */
  key?: LimitKey;
  /** Shared counters in Redis. Defaults to none: in-memory counters. */
  redis?: LimiterRedis | undefined;
  /** Prefix of every Redis key. Defaults to `tollgate:rl:`; the scope name is appended. */
  prefix?: string;
  /** Gateway instances expected to share the limit, used while Redis is unusable. Defaults to 1. */
  expectedInstances?: number;
  /** Where express-rate-limit reports misconfiguration. Defaults to the console. */
  logger?: {
    warn: (error: unknown, message?: string) => void;
    error: (error: unknown, message?: string) => void;
  };
}

export interface RateLimiter {
  readonly middleware: RequestHandler;
  readonly store: TollgateStore;
}

const NAME_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,63}$/;

const RATE_LIMITER_OPTION_CHECKS: OptionChecks<RateLimiterOptions> = {
  name: required(
    check(
      `a name matching ${NAME_PATTERN}`,
      (value) => isString.test(value) && NAME_PATTERN.test(value as string),
    ),
  ),
  limit: required(wholeNumber(1)),
  windowMs: wholeNumber(MIN_WINDOW_MS, MAX_WINDOW_MS),
  key: check(
    "'account', 'ip' or a function of the request",
    (value) => value === 'account' || value === 'ip' || typeof value === 'function',
  ),
  redis: LIMITER_REDIS,
  prefix: isString,
  expectedInstances: wholeNumber(1),
  logger: objectWith('a logger with warn and error', ['warn', 'error']),
};

export function createRateLimiter(options: RateLimiterOptions): RateLimiter {
  checkOptions('createRateLimiter()', options, RATE_LIMITER_OPTION_CHECKS);
  const { name, limit } = options;
  const windowMs = options.windowMs ?? DEFAULT_WINDOW_MS;
  const prefix = `${options.prefix ?? DEFAULT_PREFIX}${name}:`;
  const store = new TollgateStore({
    prefix,
    redis: options.redis,
    expectedInstances: options.expectedInstances,
  });
  const key = options.key ?? 'account';
  const keyOf = limitKeyFunction(key);
  const limiter = rateLimit({
    windowMs,
    limit,
    store,
    identifier: name,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    keyGenerator: keyOf,
    handler: (req, _res, next) => {
      const resetTime = (req as Request & { rateLimit?: { resetTime?: Date } }).rateLimit
        ?.resetTime;
      next(new RateLimitedError(retryAfterSeconds(resetTime, windowMs), {}, name));
    },
    validate: { trustProxy: false, xForwardedForHeader: false, forwardedHeader: false, ip: false },
    ...(options.logger === undefined ? {} : { logger: options.logger }),
  });
  const middleware: RequestHandler = function rateLimitMiddleware(req, res, next) {
    const misconfiguration = misplaced(req, key, prefix, name);
    if (misconfiguration !== undefined) {
      next(misconfiguration);
      return;
    }
    // express-rate-limit's middleware is async: settle its promise here, for Express 4.
    Promise.resolve(limiter(req, res, next)).catch(next);
  };
  return { middleware, store };
}

/** The scopes (by prefix) each request has been counted in, to refuse counting one twice. */
const countedScopes = new WeakMap<Request, Set<string>>();

/**
 * Why this limiter must not count this request, if it must not: a per-account limiter before
 * `authenticate()` (it would count per IP, sharing one bucket between accounts), or a second
 * limiter of the same name and prefix on one request (it would count it twice).
 */
function misplaced(
  req: Request,
  key: LimitKey,
  scope: string,
  name: string,
): MisconfigurationError | undefined {
  if (key === 'account' && req.auth === undefined) {
    return new MisconfigurationError(
      'account_limiter_before_authenticate',
      `createRateLimiter(${name}) counts per account but ran before authenticate()`,
    );
  }
  const scopes = countedScopes.get(req) ?? new Set<string>();
  if (scopes.has(scope)) {
    return new MisconfigurationError(
      'limiter_counted_twice',
      `two limiters named ${name} counted the same request`,
    );
  }
  scopes.add(scope);
  countedScopes.set(req, scopes);
  return undefined;
}

function limitKeyFunction(key: LimitKey): (req: Request) => string {
  if (typeof key === 'function') return key;
  const byIp = (req: Request): string =>
    `ip:${ipKeyGenerator(req.clientIp ?? req.ip ?? 'unknown', 56)}`;
  if (key === 'ip') return byIp;
  // Only reached with `req.auth` set: `misplaced()` refuses a request `authenticate()` has not seen.
  return (req) => (req.auth === undefined ? byIp(req) : `account:${req.auth.accountId}`);
}
