import type { RedisStore } from 'rate-limit-redis';
import { requireOptional } from '../optional-module';
import type { LimiterRedis } from './window';
import { redisCommandFn } from './redis-commands';
import { ResilientStore } from './resilient-store';

/**
 * The store of one limit scope: counters under `prefix` in Redis (rate-limit-redis over the
 * surviving command function) when `redis` is given, in process memory otherwise or while Redis
 * is unusable. Every scope gets its own store and prefix: sharing either double counts.
 */
export function createScopeStore(options: {
  prefix: string;
  limit: number;
  redis: LimiterRedis | undefined;
  expectedInstances: number | undefined;
  /** Keys that are this prefix and an IPv4 address are counted in memory as numbers. */
  ipv4KeyPrefix?: string;
}): ResilientStore {
  const { prefix, redis } = options;
  return new ResilientStore({
    limit: options.limit,
    prefix,
    expectedInstances: options.expectedInstances,
    ipv4KeyPrefix: options.ipv4KeyPrefix,
    shared:
      redis === undefined
        ? undefined
        : {
            store: new (redisStoreClass())({ sendCommand: redisCommandFn(redis.client), prefix }),
            health: redis.health,
          },
  });
}

function redisStoreClass(): typeof RedisStore {
  return requireOptional('rate-limit-redis', 'Redis-backed limits').RedisStore;
}
