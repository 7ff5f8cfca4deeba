import type { RedisCommandClient } from './redis-commands';
import type { RedisHealth } from './redis-health';

/** Windows, prefixes and the Redis connection shared by every limit of the kit. */

export const DEFAULT_WINDOW_MS = 60_000;
/** The shortest window: `Retry-After` and the `RateLimit` headers count whole seconds. */
export const MIN_WINDOW_MS = 1000;
/** The highest limit of a counter, per window: a rolling window keeps a time per admission. */
export const MAX_LIMIT = 1_000_000;
/** The longest window: a day (rolling windows keep admission times modulo 2^32 ms). */
export const MAX_WINDOW_MS = 86_400_000;
export const DEFAULT_PREFIX = 'tollgate:rl:';

/** A shared Redis connection for limiters: the client and the health tracker built on it. */
export interface LimiterRedis {
  client: RedisCommandClient;
  health: RedisHealth;
}

/** Whole seconds until `resetTime`, rounded up and at least 1: never earlier than the real reset. */
export function retryAfterSeconds(
  resetTime: Date | number | undefined,
  windowMs: number,
  now = Date.now(),
): number {
  const reset = resetTime === undefined ? now + windowMs : Number(resetTime);
  return Math.max(1, Math.ceil((reset - now) / 1000));
}

/** What the IETF `RateLimit` and `RateLimit-Policy` headers say of one policy. */
export interface RateLimitHeaderParts {
  /** The policy's name, quoted in both headers. */
  readonly name: string;
  /** Requests per window (`q`). */
  readonly limit: number;
  /** The window, in seconds (`w`). */
  readonly windowSeconds: number;
  /** Requests left (`r`). */
  readonly remaining: number;
  /** Seconds until there is room again (`t`). */
  readonly resetSeconds: number;
  /** `pk`: an opaque name of what is counted, when one policy counts several things. */
  readonly partitionKey?: string;
}

/** The `RateLimit` and `RateLimit-Policy` header values, the one place they are written. */
export function rateLimitHeaderValues(parts: RateLimitHeaderParts): {
  readonly rateLimit: string;
  readonly policy: string;
} {
  const name = `"${parts.name}"`;
  const partition = parts.partitionKey === undefined ? '' : `; pk=:${parts.partitionKey}:`;
  return {
    rateLimit: `${name}; r=${Math.max(parts.remaining, 0)}; t=${parts.resetSeconds}`,
    policy: `${name}; q=${parts.limit}; w=${parts.windowSeconds}${partition}`,
  };
}
