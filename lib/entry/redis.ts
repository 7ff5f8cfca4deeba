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
export type { LimiterRedis } from '../rate-limit/window';
export type {
  RedisHealth,
  SharedStoreState,
  RedisHealthOptions,
  RedisHealthEvents,
  RedisStatusSource,
} from '../rate-limit/redis-health';
export { RedisUnavailableError, type RedisCommandClient } from '../rate-limit/redis-commands';
export { RedisTimeoutError } from '../rate-limit/command-batch';
