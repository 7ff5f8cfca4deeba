/**
 * `tollgate/redis`: the Redis connection that shares limit counters across instances. Give
 * `createLimiterRedis()`'s connection to `tollgate({ redis })` (or to `createRateLimiter()`); while
 * Redis is unreachable every counter goes on in memory and `rateLimitState()` says `'degraded'`.
 * Needs the optional peer `ioredis`, loaded only when a connection is made.
 */
export {
  createLimiterRedis,
  type LimiterRedisOptions,
  type LimiterRedisConnection,
} from '../rate-limit/redis-client';
export { DEFAULT_PREFIX, DEFAULT_WINDOW_MS, type LimiterRedis } from '../rate-limit/window';
export {
  RedisHealth,
  type SharedStoreState,
  type RateLimitState,
  type RedisHealthOptions,
  type RedisHealthEvents,
  type RedisStatusSource,
} from '../rate-limit/redis-health';
export { RedisUnavailableError, type RedisCommandClient } from '../rate-limit/redis-commands';
export { RedisTimeoutError } from '../rate-limit/command-batch';
