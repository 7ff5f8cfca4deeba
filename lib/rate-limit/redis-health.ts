import { checkOptions, isFunction, type OptionChecks, wholeNumber } from '../options';
import { EventEmitter } from 'node:events';
import { faultName } from '../errors';

/**
 * Whether the shared (Redis) counters can be used right now. Limiters ask `usable` before each
 * command; a failed command opens a short cool-down so that, while Redis hangs, one request per
 * cool-down pays the command timeout instead of every request. State changes are reported once
 * per outage, not per request.
 */

export type SharedStoreState = 'shared' | 'degraded';

/** Where rate-limit counters are kept: in memory by choice, in Redis, or in memory while Redis is down. */
export type RateLimitState = 'memory' | SharedStoreState;

export interface RedisHealthEvents {
  change: [state: SharedStoreState, reason: string | undefined];
}

/** The part of an ioredis client that tells its connection state. */
export interface RedisStatusSource {
  readonly status: string;
  on(event: 'ready' | 'error' | 'end' | 'close', listener: (error?: unknown) => void): unknown;
}

export interface RedisHealthOptions {
  /** How long to skip Redis after a failed command. Defaults to 1000 ms. */
  coolDownMs?: number;
  now?: () => number;
}

const REDIS_HEALTH_OPTION_CHECKS: OptionChecks<RedisHealthOptions> = {
  coolDownMs: wholeNumber(0),
  now: isFunction,
};

export class RedisHealth extends EventEmitter<RedisHealthEvents> {
  private degradedSince: number | undefined;
  private coolDownUntil = 0;
  private readonly coolDownMs: number;
  private readonly now: () => number;

  constructor(
    private readonly client: RedisStatusSource,
    options: RedisHealthOptions = {},
  ) {
    super();
    checkOptions('RedisHealth', options, REDIS_HEALTH_OPTION_CHECKS);
    this.coolDownMs = options.coolDownMs ?? 1000;
    this.now = options.now ?? Date.now;
    // ioredis emits 'error' on every failed connection attempt; an unheard 'error' would crash.
    client.on('error', (error) => {
      this.failed(error);
    });
    client.on('close', () => {
      this.failed(undefined, 'connection closed');
    });
    client.on('ready', () => {
      this.coolDownUntil = 0;
      this.succeeded();
    });
    // Not yet connected is not an outage: `state` reports it as degraded, and the first failed
    // connection attempt ('error'/'close', after the caller has subscribed) opens the outage.
  }

  get state(): SharedStoreState {
    return this.degradedSince === undefined && this.client.status === 'ready'
      ? 'shared'
      : 'degraded';
  }

  /** Since when the shared store has been unusable (ms since epoch), or `undefined`. */
  get degradedAt(): number | undefined {
    return this.degradedSince;
  }

  /** True when a command may be sent: connected, and not cooling down after a failure. */
  get usable(): boolean {
    return this.client.status === 'ready' && this.now() >= this.coolDownUntil;
  }

  failed(error: unknown, reason: string = faultName(error)): void {
    this.coolDownUntil = this.now() + this.coolDownMs;
    if (this.degradedSince !== undefined) return;
    this.degradedSince = this.now();
    this.emit('change', 'degraded', reason);
  }

  succeeded(): void {
    if (this.degradedSince === undefined) return;
    this.degradedSince = undefined;
    this.emit('change', 'shared', undefined);
  }
}
