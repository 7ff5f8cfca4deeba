import {
  checkOptions,
  isFunction,
  isString,
  LIMITER_REDIS,
  type OptionChecks,
  wholeNumber,
} from '../options';
import type { ClientRateLimitInfo, IncrementResponse, Options, Store } from 'express-rate-limit';
import { ConfigurationError } from '../errors';
import { AdmissionStore, type CounterRequest, type LocalCounters } from './admission-store';
import { DEFAULT_PREFIX, type LimiterRedis, MAX_WINDOW_MS, MIN_WINDOW_MS } from './window';

/**
 * An express-rate-limit `Store` that decides through the kit's limit engine (`AdmissionStore`),
 * the one that counts `tollgate()`'s scopes: a refused request is not counted, so a client that
 * keeps knocking does not push its own window's count past the limit; one script call per request
 * while Redis is usable; the local count, multiplied by `expectedInstances`, while it is not; and
 * keys seen full are refused without asking Redis until their window resets. `createRateLimiter()`
 * is express-rate-limit over this store; an app that already uses express-rate-limit passes
 * `store: new TollgateStore({ redis, prefix })` to get the same counting.
 *
 * The engine decides at `increment()`, so it needs the limit then: express-rate-limit's `limit`
 * must be a number, not a function. As with every store, one instance per limiter
 * (`ERR_ERL_STORE_REUSE`), and one `prefix` per limiter sharing a Redis.
 */

export interface TollgateStoreOptions {
  /** Shared counters in Redis (`createLimiterRedis()`). Defaults to none: process memory. */
  readonly redis?: LimiterRedis | undefined;
  /** Put before every key in Redis. Defaults to `tollgate:rl:`; give each limiter its own. */
  readonly prefix?: string | undefined;
  /** Instances expected to share the limit, used while Redis is unusable. Defaults to 1. */
  readonly expectedInstances?: number | undefined;
  readonly now?: (() => number) | undefined;
}

/** The options of a counter that may be shared through Redis, as every limiter of the kit takes them. */
export const SHARED_COUNTER_OPTION_CHECKS: OptionChecks<TollgateStoreOptions> = {
  redis: LIMITER_REDIS,
  prefix: isString,
  expectedInstances: wholeNumber(1),
  now: isFunction,
};

/** The engine and the limiter's settings, known once express-rate-limit has called `init()`. */
interface Engine {
  readonly store: AdmissionStore;
  readonly counters: LocalCounters;
  readonly limit: number;
  /**
   * Refusals answered and not counted, by key, while express-rate-limit will take each back with a
   * `decrement()` (`skipFailedRequests`: a 429 is a failed request); `undefined` otherwise.
   */
  readonly uncounted: Map<string, Uncounted> | undefined;
}

interface Uncounted {
  count: number;
  resetAt: number;
}

/** Keys with uncounted refusals remembered at most; the oldest goes first. */
const MAX_UNCOUNTED_KEYS = 100_000;

export class TollgateStore implements Store {
  /** Counts may live in Redis, shared with other instances: express-rate-limit checks the prefix. */
  readonly localKeys = false;
  readonly prefix: string;
  private engine: Engine | undefined;
  private readonly now: () => number;

  constructor(private readonly options: TollgateStoreOptions = {}) {
    checkOptions('TollgateStore', options, SHARED_COUNTER_OPTION_CHECKS);
    this.prefix = options.prefix ?? DEFAULT_PREFIX;
    this.now = options.now ?? Date.now;
  }

  init(options: Options): void {
    if (typeof options.limit !== 'number') {
      throw new ConfigurationError(
        'TollgateStore: limit must be a number: the store decides when it counts, so it needs the limit then',
      );
    }
    const { windowMs } = options;
    if (!Number.isInteger(windowMs) || windowMs < MIN_WINDOW_MS || windowMs > MAX_WINDOW_MS) {
      throw new ConfigurationError(
        `TollgateStore: windowMs must be a whole number of milliseconds from ${MIN_WINDOW_MS} to ${MAX_WINDOW_MS}`,
      );
    }
    this.engine?.store.shutdown();
    const store = new AdmissionStore({
      windowMs: options.windowMs,
      redis: this.options.redis,
      expectedInstances: this.options.expectedInstances,
      now: this.options.now,
    });
    this.engine = {
      store,
      counters: store.countersFor(this.prefix),
      limit: options.limit,
      uncounted: options.skipFailedRequests ? new Map() : undefined,
    };
  }

  /** Admits one request of `key`, or refuses it counting nothing (hits above the limit). */
  async increment(key: string): Promise<IncrementResponse> {
    const engine = this.started();
    const request = this.request(engine, key);
    const { refusedAt, readings } = await engine.store.admit([request]);
    const reading = readings[0] ?? { count: request.limit + 1, resetAt: this.now() };
    if (refusedAt >= 0 && engine.uncounted !== undefined) {
      this.rememberUncounted(engine.uncounted, key, reading.resetAt);
    }
    return { totalHits: reading.count, resetTime: new Date(reading.resetAt) };
  }

  /** Takes back one admission of `key`; a refusal's own `decrement()` takes back nothing. */
  async decrement(key: string): Promise<void> {
    const engine = this.started();
    if (this.takeUncounted(engine, key)) return;
    await engine.store.decrement(engine.counters, key);
  }

  async resetKey(key: string): Promise<void> {
    const engine = this.started();
    engine.uncounted?.delete(key);
    await engine.store.reset(engine.counters, key);
  }

  /** The key's count and reset, read without counting; `undefined` when it has no count. */
  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const engine = this.started();
    const [reading] = await engine.store.read([this.request(engine, key)]);
    if (reading === undefined || reading.count === 0) return undefined;
    return { totalHits: reading.count, resetTime: new Date(reading.resetAt) };
  }

  /** Stops the engine's timers; counts kept in Redis stay. */
  shutdown(): void {
    this.engine?.store.shutdown();
    this.engine?.uncounted?.clear();
  }

  private started(): Engine {
    if (this.engine === undefined) {
      throw new ConfigurationError(
        'TollgateStore: not initialised: pass it to rateLimit({ store }) with a numeric limit',
      );
    }
    return this.engine;
  }

  private request(engine: Engine, key: string): CounterRequest {
    return { counter: engine.counters, key, limit: engine.limit, enforced: true };
  }

  private rememberUncounted(map: Map<string, Uncounted>, key: string, resetAt: number): void {
    const seen = map.get(key);
    if (seen !== undefined && seen.resetAt > this.now()) {
      seen.count += 1;
      return;
    }
    map.delete(key);
    if (map.size >= MAX_UNCOUNTED_KEYS) {
      const oldest = map.keys().next();
      if (oldest.done !== true) map.delete(oldest.value);
    }
    map.set(key, { count: 1, resetAt });
  }

  /** Whether a `decrement()` of `key` is a refusal's, which counted nothing to take back. */
  private takeUncounted(engine: Engine, key: string): boolean {
    const seen = engine.uncounted?.get(key);
    if (seen === undefined) return false;
    if (seen.resetAt <= this.now()) {
      engine.uncounted?.delete(key);
      return false;
    }
    seen.count -= 1;
    if (seen.count === 0) engine.uncounted?.delete(key);
    return true;
  }
}
