import { hash } from 'node:crypto';
import { ipKeyGenerator } from 'express-rate-limit';
import { ConfigurationError, RateLimitedError } from '../errors';
import {
  checkOptions,
  isFunction,
  isObject,
  isString,
  LIMITER_REDIS,
  objectWith,
  oneOf,
  type OptionChecks,
  required,
  wholeNumber,
} from '../options';
import {
  type LimiterRedis,
  MAX_LIMIT,
  MAX_WINDOW_MS,
  MIN_WINDOW_MS,
  rateLimitHeaderValues,
} from '../rate-limit/window';
import {
  AdmissionStore,
  type CounterRequest,
  type LocalCounters,
} from '../rate-limit/admission-store';
import type { CounterReading } from '../rate-limit/compact-memory-store';
import type { AuthContext } from '../model/auth-context';
import type { AccountLimits, ScopeKey } from '../model/key-record';

/**
 * The limit scopes of the decision core: rolling windows per account and fixed windows per client
 * IP, counted all-or-nothing in an `AdmissionStore` (one Redis script call per request while Redis is usable, process memory
 * otherwise), with the IETF draft-8 `RateLimit` headers and a `Retry-After` never earlier than
 * the real reset. Each request carries its own limit: the account's override, else the scope's.
 *
 * Keys: `account:{<account id>}` for a per-account scope and `ip:<address or /56>` for a per-IP
 * one; the per-IP cap on publishable keys counts per account and client IP,
 * `account:{<account id>}:ip:<address>`, under the account's Redis Cluster hash tag, so every key
 * of one request is in one slot and one script call checks them all.
 */

/** A limit scope: requests per window, counted per account or per client IP. */
export interface ScopeDefinition {
  /**
   * Requests admitted per window, from 1 to 1 000 000 (a rolling window keeps a time per
   * admission).
   */
  readonly limit: number;
  /**
   * The window in ms, from 1 000 (a second) to 86 400 000 (a day). Defaults to the gate's
   * `windowMs` (60 000). A per-account scope's window rolls: no span of this length ever admits
   * more than `limit`. A per-IP scope counts fixed windows, each starting at the address's first
   * request.
   */
  readonly window?: number;
  /** Defaults to `'account'`. */
  readonly per?: ScopeKey;
}

/**
 * What the key stores check an account's `limits` against (`limitScopes`): each scope's `per`, from
 * the same definitions `tollgate({ scopes })` takes.
 */
export function limitScopesOf(
  scopes: Readonly<Record<string, ScopeDefinition>>,
): Readonly<Record<string, ScopeKey>> {
  const per: Record<string, ScopeKey> = {};
  for (const [name, definition] of Object.entries(scopes)) per[name] = definition.per ?? 'account';
  return per;
}

export type HeaderPair = readonly [name: string, value: string];

/** One per-account scope as an account has used it in the last window. */
export interface ScopeUsage {
  readonly scope: string;
  /** The account's limit: its override, else the scope's. */
  readonly limit: number;
  readonly remaining: number;
  /**
   * Whole seconds, rounded up, until the oldest admission in the window leaves it (the count next
   * goes down); a whole window when there is none.
   */
  readonly resetSeconds: number;
}

export interface Admission {
  readonly admitted: boolean;
  readonly headers: readonly HeaderPair[];
  /** Set when not admitted. */
  readonly error?: RateLimitedError;
}

/** The rule of each field of a scope's definition. */
export const SCOPE_DEFINITION_CHECKS: OptionChecks<ScopeDefinition> = {
  limit: required(wholeNumber(1, MAX_LIMIT)),
  window: wholeNumber(MIN_WINDOW_MS, MAX_WINDOW_MS),
  per: oneOf(['account', 'ip']),
};

export const SCOPE_NAME_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,63}$/;

export interface ScopeCounterOptions {
  readonly name: string;
  readonly definition: ScopeDefinition;
  /** The window of a definition without its own. */
  readonly windowMs: number;
  readonly prefix: string;
  readonly redis: LimiterRedis | undefined;
  readonly expectedInstances: number | undefined;
  /**
   * The store shared by the scopes that one request may meet together, so that they are admitted
   * in one step. Defaults to a store of this scope's own (built from `redis`).
   */
  readonly store?: AdmissionStore | undefined;
  readonly now?: () => number;
}

const SCOPE_COUNTER_OPTION_CHECKS: OptionChecks<ScopeCounterOptions> = {
  name: required(isString),
  definition: required(isObject),
  windowMs: required(wholeNumber(MIN_WINDOW_MS, MAX_WINDOW_MS)),
  prefix: required(isString),
  redis: LIMITER_REDIS,
  expectedInstances: wholeNumber(1),
  store: objectWith('an AdmissionStore', ['countersFor']),
  now: isFunction,
};

export class ScopeCounter {
  readonly name: string;
  readonly limit: number;
  readonly per: ScopeKey;
  readonly store: AdmissionStore;
  /** @internal This scope's counters in this process. */
  readonly counters: LocalCounters;
  readonly windowSeconds: number;
  private readonly now: () => number;

  constructor(options: ScopeCounterOptions) {
    checkOptions('ScopeCounter', options, SCOPE_COUNTER_OPTION_CHECKS);
    const { name, definition } = options;
    if (!SCOPE_NAME_PATTERN.test(name)) {
      throw new ConfigurationError(
        `scope ${JSON.stringify(name)}: name must match ${SCOPE_NAME_PATTERN}`,
      );
    }
    checkOptions(`scope ${name}`, definition, SCOPE_DEFINITION_CHECKS);
    const per = definition.per ?? 'account';
    const windowMs = definition.window ?? options.windowMs;
    this.name = name;
    this.limit = definition.limit;
    this.per = per;
    this.windowSeconds = Math.ceil(windowMs / 1000);
    this.now = options.now ?? Date.now;
    this.store =
      options.store ??
      new AdmissionStore({
        windowMs,
        redis: options.redis,
        expectedInstances: options.expectedInstances,
        now: options.now,
      });
    this.counters = this.store.countersFor(`${options.prefix}${name}:`, {
      windowMs,
      rolling: per === 'account',
    });
  }

  /** The limit of this scope for this request: the account's own, else the scope's. */
  limitFor(auth: Pick<AuthContext, 'limits'> | undefined): number {
    return auth?.limits?.[this.name] ?? this.limit;
  }

  /**
   * The counter key: `account:{id}` or `ip:<address>`; with `perAccountIp` (the cap on
   * publishable keys), `account:{id}:ip:<address>`, in the account's hash slot.
   */
  keyOf(auth: AuthContext | undefined, clientIp: string | undefined, perAccountIp = false): string {
    if (auth !== undefined && (this.per === 'account' || perAccountIp)) {
      const account = accountKey(auth.accountId);
      return this.per === 'account' ? account : `${account}:${ipKey(clientIp)}`;
    }
    return ipKey(clientIp);
  }

  /** The request for this scope's counter, with the request's own limit. */
  request(
    auth: AuthContext | undefined,
    clientIp: string | undefined,
    perAccountIp = false,
    enforced = true,
  ): CounterRequest {
    return {
      counter: this.counters,
      key: this.keyOf(auth, clientIp, perAccountIp),
      limit: this.limitFor(auth),
      enforced,
    };
  }

  /** The `RateLimit` and `RateLimit-Policy` headers of a reading, appended to `headers`. */
  appendHeaders(headers: HeaderPair[], request: CounterRequest, reading: CounterReading): void {
    const { rateLimit, policy } = rateLimitHeaderValues({
      name: this.name,
      limit: request.limit,
      windowSeconds: this.windowSeconds,
      remaining: request.limit - reading.count,
      resetSeconds: this.secondsUntil(reading.resetAt, 0),
      partitionKey: partitionKey(request.key),
    });
    headers.push(['RateLimit', rateLimit], ['RateLimit-Policy', policy]);
  }

  /** The refusal of a request this scope had no room for: `Retry-After` rounded up, at least 1. */
  refusal(reading: CounterReading): RateLimitedError {
    return new RateLimitedError(this.secondsUntil(reading.resetAt, 1), {}, this.name);
  }

  /** Counts one request in this scope alone; refuses it, counting nothing, when it has no room. */
  async admit(auth: AuthContext | undefined, clientIp: string | undefined): Promise<Admission> {
    const request = this.request(auth, clientIp);
    const { refusedAt, readings } = await this.store.admit([request]);
    const reading = readings[0] ?? { count: request.limit + 1, resetAt: this.now() };
    const headers: HeaderPair[] = [];
    this.appendHeaders(headers, request, reading);
    if (refusedAt < 0) return { admitted: true, headers };
    return { admitted: false, headers, error: this.refusal(reading) };
  }

  /** Whole seconds from now until `resetAt`, rounded up: never earlier than the reset. */
  secondsUntil(resetAt: number, atLeast: number): number {
    return Math.max(atLeast, Math.ceil((resetAt - this.now()) / 1000));
  }
}

/** The key of an account's counters: `account:{id}`, the id being its Redis Cluster hash tag. */
export function accountKey(accountId: string): string {
  return `account:{${accountId}}`;
}

function ipKey(clientIp: string | undefined): string {
  return `ip:${ipKeyGenerator(clientIp ?? 'unknown', 56)}`;
}

/** express-rate-limit's `pk`: a hash that tells counted keys apart without revealing them. */
function partitionKey(key: string): string {
  const hex = hash('sha256', key, 'hex').slice(0, 12);
  return Buffer.from(hex).toString('base64');
}

/** One limit a request meets, compiled once per route policy. */
export interface LimitUse {
  readonly scope: ScopeCounter;
  /** Counted per account and client IP: the per-IP cap on publishable keys. */
  readonly perAccountIp: boolean;
  /** `false` for a scope in shadow mode: counted as if enforced, its refusal refuses nothing. */
  readonly enforced: boolean;
}

/** A scope in shadow mode that would have refused a request. */
export interface LimitFinding {
  readonly rule: 'limit';
  readonly scope: string;
  readonly error: RateLimitedError;
}

/**
 * Admits a request against every limit it meets, all or nothing, in one call of `store`: it
 * counts in every limit only if each enforced one has room, and in none otherwise, so a request
 * refused by one limit spends none of the others.
 * Admitted: the headers of every enforced limit are appended, and each shadow limit without room
 * is added to `findings`. Refused: the refusal of the first limit without room, and its headers alone.
 */
export async function admitAll(
  store: AdmissionStore,
  uses: readonly LimitUse[],
  auth: AuthContext | undefined,
  clientIp: string | undefined,
  headers: HeaderPair[],
  findings: { push(finding: LimitFinding): unknown },
): Promise<RateLimitedError | undefined> {
  const requests = uses.map((use) =>
    use.scope.request(auth, clientIp, use.perAccountIp, use.enforced),
  );
  const { refusedAt, readings } = await store.admit(requests);
  const refused = uses[refusedAt];
  const refusedRequest = requests[refusedAt];
  const refusedReading = readings[refusedAt];
  if (refused !== undefined && refusedRequest !== undefined && refusedReading !== undefined) {
    refused.scope.appendHeaders(headers, refusedRequest, refusedReading);
    return refused.scope.refusal(refusedReading);
  }
  for (let i = 0; i < uses.length; i++) {
    const use = uses[i];
    const request = requests[i];
    const reading = readings[i];
    if (use === undefined || request === undefined || reading === undefined) continue;
    if (use.enforced) use.scope.appendHeaders(headers, request, reading);
    else if (reading.count > request.limit) {
      findings.push({ rule: 'limit', scope: use.scope.name, error: use.scope.refusal(reading) });
    }
  }
  return undefined;
}

/**
 * An account's use of `scopes` (per-account scopes) in the last window, at its own limits,
 * read in one call of `store` without counting.
 */
export async function readUsage(
  store: AdmissionStore,
  scopes: readonly ScopeCounter[],
  accountId: string,
  limits: AccountLimits | undefined,
): Promise<ScopeUsage[]> {
  const owner = { limits };
  const key = accountKey(accountId);
  const requests: CounterRequest[] = scopes.map((scope) => ({
    counter: scope.counters,
    key,
    limit: scope.limitFor(owner),
    enforced: true,
  }));
  const readings = await store.read(requests);
  return scopes.map((scope, index) => {
    const limit = requests[index]?.limit ?? scope.limit;
    const reading = readings[index] ?? { count: 0, resetAt: 0 };
    return {
      scope: scope.name,
      limit,
      remaining: Math.max(limit - reading.count, 0),
      resetSeconds: scope.secondsUntil(reading.resetAt, 0),
    };
  });
}
