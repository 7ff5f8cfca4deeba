import { createHash } from 'node:crypto';
import { ipKeyGenerator, type Options } from 'express-rate-limit';
import { ConfigurationError, RateLimitedError } from '../errors';
import type { LimiterRedis } from '../rate-limit/window';
import type { ResilientStore } from '../rate-limit/resilient-store';
import { createScopeStore } from '../rate-limit/scope-store';
import type { AuthContext } from '../types';

/**
 * The limit scopes of the decision core: fixed windows counted in a `ResilientStore` (Redis with
 * rate-limit-redis while it is healthy, express-rate-limit's memory store otherwise), with the
 * keys, the IETF draft-8 `RateLimit` headers and the `Retry-After` that express-rate-limit's own
 * middleware would give, so the store and the wire are the same whichever door counted.
 */

/** What a scope counts: the authenticated account, or the client IP (IPv6 by /56 network). */
export type ScopeKey = 'account' | 'ip';

export interface ScopeDefinition {
  /** Requests admitted per window. */
  readonly limit: number;
  /** Defaults to `'account'`. */
  readonly per?: ScopeKey;
}

export type HeaderPair = readonly [name: string, value: string];

export interface Admission {
  readonly admitted: boolean;
  readonly headers: readonly HeaderPair[];
  /** Set when not admitted. */
  readonly error?: RateLimitedError;
}

export const SCOPE_NAME_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,63}$/;

export interface ScopeCounterOptions {
  readonly name: string;
  readonly definition: ScopeDefinition;
  readonly windowMs: number;
  readonly prefix: string;
  readonly redis: LimiterRedis | undefined;
  readonly expectedInstances: number | undefined;
  readonly now?: () => number;
}

export class ScopeCounter {
  readonly name: string;
  readonly limit: number;
  readonly per: ScopeKey;
  readonly store: ResilientStore;
  private readonly windowMs: number;
  private readonly windowSeconds: number;
  private readonly now: () => number;

  constructor(options: ScopeCounterOptions) {
    const { name, definition, windowMs } = options;
    if (!SCOPE_NAME_PATTERN.test(name)) {
      throw new ConfigurationError(
        `scope ${JSON.stringify(name)}: name must match ${SCOPE_NAME_PATTERN}`,
      );
    }
    if (!Number.isInteger(definition.limit) || definition.limit < 1) {
      throw new ConfigurationError(`scope ${name}: limit must be a whole number of at least 1`);
    }
    const per: unknown = definition.per ?? 'account';
    if (per !== 'account' && per !== 'ip') {
      throw new ConfigurationError(`scope ${name}: per must be 'account' or 'ip'`);
    }
    this.name = name;
    this.limit = definition.limit;
    this.per = per;
    this.windowMs = windowMs;
    this.windowSeconds = Math.ceil(windowMs / 1000);
    this.now = options.now ?? Date.now;
    this.store = createScopeStore({
      prefix: `${options.prefix}${name}:`,
      limit: this.limit,
      redis: options.redis,
      expectedInstances: options.expectedInstances,
    });
    void this.store.init({ windowMs } as Options);
  }

  /** The counter key, as the kit's `createRateLimiter()` names it in Redis. */
  keyOf(auth: AuthContext | undefined, clientIp: string | undefined): string {
    if (this.per === 'account' && auth !== undefined) return `account:${auth.accountId}`;
    return `ip:${ipKeyGenerator(clientIp ?? 'unknown', 56)}`;
  }

  /** Counts one request; refuses it when the window's count is over the limit. */
  async admit(auth: AuthContext | undefined, clientIp: string | undefined): Promise<Admission> {
    const key = this.keyOf(auth, clientIp);
    const { totalHits, resetTime } = await this.store.increment(key);
    const now = this.now();
    const resetSeconds =
      resetTime === undefined
        ? this.windowSeconds
        : Math.max(0, Math.ceil((resetTime.getTime() - now) / 1000));
    const headers: HeaderPair[] = [
      ['RateLimit', `"${this.name}"; r=${Math.max(this.limit - totalHits, 0)}; t=${resetSeconds}`],
      [
        'RateLimit-Policy',
        `"${this.name}"; q=${this.limit}; w=${this.windowSeconds}; pk=:${partitionKey(key)}:`,
      ],
    ];
    if (totalHits <= this.limit) return { admitted: true, headers };
    const retryAfter = Math.max(
      1,
      Math.ceil(((resetTime?.getTime() ?? now + this.windowMs) - now) / 1000),
    );
    return {
      admitted: false,
      headers,
      error: new RateLimitedError(retryAfter, {}, this.name),
    };
  }
}

/** express-rate-limit's `pk`: a hash that tells counted keys apart without revealing them. */
function partitionKey(key: string): string {
  const hex = createHash('sha256').update(key).digest('hex').slice(0, 12);
  return Buffer.from(hex).toString('base64');
}
