import {
  checkOptions,
  isNonEmptyString,
  isString,
  isStringList,
  type OptionChecks,
  wholeNumber,
} from '../options';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { ConfigurationError } from '../errors';
import { requireOptional } from '../optional-module';
import type { LimiterRedis } from './window';
import { CommandBatch } from './command-batch';
import { RedisHealth } from './redis-health';

/**
 * An ioredis client tuned for rate limiting, where a late answer is worse than none: no offline
 * queue (a command while disconnected fails at once), one attempt per command, no re-sending of
 * unfinished commands after a reconnect (an increment must never run twice or in a later window),
 * a short command timeout, and quick reconnection so shared counting resumes by itself.
 */

export interface LimiterRedisOptions {
  /** `redis://[:password@]host:port[/db]` or `rediss://…` for one server. */
  url?: string;
  /** `host:port` of cluster nodes (any subset of the masters is enough). */
  clusterNodes?: readonly string[];
  /** `host:port` of Sentinels, with `sentinelName`, the monitored master's name. */
  sentinels?: readonly string[];
  sentinelName?: string;
  /** Password for cluster nodes and the Sentinel-monitored master. */
  password?: string;
  /** Longest wait for one command, in ms. Defaults to 100. */
  commandTimeoutMs?: number;
  /** Longest wait to connect, in ms. Defaults to 1000. */
  connectTimeoutMs?: number;
  /** Longest pause between reconnection attempts, in ms. Defaults to 1000. */
  maxReconnectDelayMs?: number;
}

export interface LimiterRedisConnection extends LimiterRedis {
  /** Closes the connection; counters stay in Redis. */
  close(): Promise<void>;
}

const LIMITER_REDIS_OPTION_CHECKS: OptionChecks<LimiterRedisOptions> = {
  url: isNonEmptyString,
  clusterNodes: isStringList,
  sentinels: isStringList,
  sentinelName: isString,
  password: isString,
  commandTimeoutMs: wholeNumber(1),
  connectTimeoutMs: wholeNumber(1),
  maxReconnectDelayMs: wholeNumber(1),
};

export function createLimiterRedis(options: LimiterRedisOptions): LimiterRedisConnection {
  checkOptions('createLimiterRedis()', options, LIMITER_REDIS_OPTION_CHECKS);
  const ioredis = requireOptional('ioredis', 'createLimiterRedis()');
  const modes = [options.url, options.clusterNodes, options.sentinels].filter(
    (mode) => mode !== undefined,
  );
  if (modes.length !== 1) {
    throw new ConfigurationError(
      'createLimiterRedis(): give exactly one of url, clusterNodes or sentinels',
    );
  }
  const maxDelay = options.maxReconnectDelayMs ?? 1000;
  const retryStrategy = (attempt: number): number =>
    Math.min(50 * 2 ** Math.min(attempt, 10), maxDelay);
  const timeoutMs = options.commandTimeoutMs ?? 100;
  const common: RedisOptions = {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    // Auto-pipelining holds a command until the previous batch answers: `CommandBatch` writes
    // each turn's commands together instead, without waiting for the previous turn's answers.
    enableAutoPipelining: false,
    // Only a backstop that clears ioredis' queue: `CommandBatch` enforces `timeoutMs`.
    commandTimeout: 10 * timeoutMs,
    connectTimeout: options.connectTimeoutMs ?? 1000,
    protocol: 2,
    ...(options.password === undefined ? {} : { password: options.password }),
  };

  let client: Redis | Cluster;
  if (options.url !== undefined) {
    if (!/^rediss?:\/\//.test(options.url)) {
      throw new ConfigurationError(
        'createLimiterRedis(): url must start with redis:// or rediss://',
      );
    }
    client = new ioredis.Redis(options.url, { ...common, retryStrategy });
  } else if (options.clusterNodes !== undefined) {
    const { enableOfflineQueue: _offline, ...redisOptions } = common;
    client = new ioredis.Cluster(
      options.clusterNodes.map((node) => parseHostPort(node, 'clusterNodes')),
      {
        // Node connections open on first use; with `false`, every command sent while one is still
        // connecting fails. Commands only leave while the cluster is ready (redisCommandFn), and
        // the nodes' command timeout bounds the wait for a connecting node.
        enableOfflineQueue: true,
        enableAutoPipelining: false,
        clusterRetryStrategy: retryStrategy,
        // By default Cluster re-sends a command whose connection closed (it may have run) and
        // retries CLUSTERDOWN, each after 100 ms: a late, possibly double increment. Fail instead.
        retryDelayOnFailover: 0,
        retryDelayOnClusterDown: 0,
        slotsRefreshTimeout: options.connectTimeoutMs ?? 1000,
        redisOptions,
      },
    );
  } else {
    if (options.sentinelName === undefined || options.sentinelName === '') {
      throw new ConfigurationError('createLimiterRedis(): sentinels need sentinelName');
    }
    client = new ioredis.Redis({
      ...common,
      sentinels: (options.sentinels ?? []).map((node) => parseHostPort(node, 'sentinels')),
      name: options.sentinelName,
      retryStrategy,
      sentinelRetryStrategy: retryStrategy,
    });
  }
  const health = new RedisHealth(client);
  return {
    client: new CommandBatch(client, timeoutMs),
    health,
    close: async () => {
      client.disconnect();
      await Promise.resolve();
    },
  };
}

export function parseHostPort(value: string, where: string): { host: string; port: number } {
  const match = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(value);
  const port = Number(match?.[2]);
  if (match?.[1] === undefined || port < 1 || port > 65535) {
    throw new ConfigurationError(`${where}: ${JSON.stringify(value)} is not host:port`);
  }
  return { host: match[1].replace(/^\[|\]$/g, ''), port };
}
