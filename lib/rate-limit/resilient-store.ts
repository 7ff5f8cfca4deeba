import type { IncrementResponse, Options, Store } from 'express-rate-limit';
import { type CompactKey, CompactMemoryStore, compactKey } from './compact-memory-store';
import type { RedisHealth } from './redis-health';

/**
 * An express-rate-limit `Store` that counts in a shared store (Redis) while it is healthy and in
 * process memory when it is not, so a Redis outage never becomes a payments outage:
 *
 * - no shared store configured: memory only, exact per process (a `CompactMemoryStore`: what
 *   express-rate-limit's `MemoryStore` counts, in a number per key);
 * - shared store down or failing: memory, the local count multiplied by `expectedInstances` so a
 *   fleet of N gateways still admits about the limit in total;
 * - a key found over its limit is remembered until its window resets and refused without asking
 *   Redis again, which keeps a flood off Redis and makes `blockedUntil()` possible. The limit can
 *   come with each `increment()` (an account's own limit): a key remembered over a
 *   lower limit than the one it comes with now is counted again.
 */

export interface ResilientStoreOptions {
  /** The limit the limiter applies, unless `increment()` is given one; to know when a key is over it. */
  limit: number;
  /** The shared store (a rate-limit-redis `RedisStore`), with the health of its connection. */
  shared?: { store: Store; health: RedisHealth } | undefined;
  /** Gateway instances expected to share the limit, used while degraded. Defaults to 1. */
  expectedInstances?: number;
  /** Keys remembered as over their limit, at most; the oldest goes first. Defaults to 100 000. */
  maxBlockedKeys?: number;
  /** Key prefix, for express-rate-limit's double-count check (`ERR_ERL_DOUBLE_COUNT`). */
  prefix?: string;
  /**
   * Keys that are this prefix and an IPv4 address are counted in memory as numbers (see
   * `CompactMemoryStore`). Defaults to `ip:`, the kit's per-IP keys.
   */
  ipv4KeyPrefix?: string;
  now?: () => number;
}

const DEFAULT_MAX_BLOCKED_KEYS = 100_000;

export class ResilientStore implements Store {
  readonly localKeys = false;
  readonly prefix: string | undefined;
  private readonly local: CompactMemoryStore;
  /** Reset times of keys over their limit, by `compactKey()`: an IPv4 client is a number. */
  private readonly blocked = new Map<CompactKey, number>();
  /** The limit a key of `blocked` was over, when not the default `limit`. */
  private readonly blockedOver = new Map<CompactKey, number>();
  private readonly ipv4KeyPrefix: string;
  private readonly limit: number;
  private readonly expectedInstances: number;
  private readonly maxBlockedKeys: number;
  private readonly now: () => number;

  constructor(private readonly options: ResilientStoreOptions) {
    this.limit = options.limit;
    this.expectedInstances = options.expectedInstances ?? 1;
    this.maxBlockedKeys = options.maxBlockedKeys ?? DEFAULT_MAX_BLOCKED_KEYS;
    this.prefix = options.prefix;
    this.now = options.now ?? Date.now;
    this.ipv4KeyPrefix = options.ipv4KeyPrefix ?? 'ip:';
    this.local = new CompactMemoryStore({ ipv4KeyPrefix: this.ipv4KeyPrefix });
  }

  async init(options: Options): Promise<void> {
    this.local.init(options);
    await this.options.shared?.store.init?.(options);
  }

  /** When `key` is known to be over its limit: the time its window resets (ms since epoch). */
  blockedUntil(key: string): number | undefined {
    const compact = compactKey(key, this.ipv4KeyPrefix);
    const until = this.blocked.get(compact);
    if (until === undefined) return undefined;
    if (until > this.now()) return until;
    this.blocked.delete(compact);
    this.blockedOver.delete(compact);
    return undefined;
  }

  /** Counts one hit of `key`, over `limit` (defaults to the store's `limit`). */
  async increment(key: string, limit = this.limit): Promise<IncrementResponse> {
    const until = this.blockedUntil(key);
    if (until !== undefined && limit <= this.blockedLimit(key)) {
      return { totalHits: limit + 1, resetTime: new Date(until) };
    }
    const result = (await this.incrementShared(key)) ?? this.incrementLocal(key);
    if (result.totalHits > limit && result.resetTime !== undefined) {
      this.block(key, result.resetTime.getTime(), limit);
    }
    return result;
  }

  private blockedLimit(key: string): number {
    if (this.blockedOver.size === 0) return this.limit;
    return this.blockedOver.get(compactKey(key, this.ipv4KeyPrefix)) ?? this.limit;
  }

  /** Undoes one count in the store counting now (the shared one when usable, else memory). */
  async decrement(key: string): Promise<void> {
    const done = await this.withShared(async (store) => {
      await store.decrement(key);
      return true;
    });
    if (done !== true) this.local.decrement(key);
  }

  async resetKey(key: string): Promise<void> {
    this.blocked.delete(compactKey(key, this.ipv4KeyPrefix));
    this.blockedOver.delete(compactKey(key, this.ipv4KeyPrefix));
    this.local.resetKey(key);
    await this.withShared((store) => store.resetKey(key));
  }

  shutdown(): void {
    this.local.shutdown();
    this.blocked.clear();
    this.blockedOver.clear();
  }

  private async incrementShared(key: string): Promise<IncrementResponse | undefined> {
    return this.withShared((store) => store.increment(key));
  }

  private incrementLocal(key: string): IncrementResponse {
    const result = this.local.increment(key);
    const scale = this.options.shared === undefined ? 1 : this.expectedInstances;
    return { totalHits: result.totalHits * scale, resetTime: result.resetTime };
  }

  private async withShared<T>(command: (store: Store) => T | Promise<T>): Promise<T | undefined> {
    const shared = this.options.shared;
    if (!shared?.health.usable) return undefined;
    try {
      const result = await command(shared.store);
      shared.health.succeeded();
      return result;
    } catch (error) {
      shared.health.failed(error);
      return undefined;
    }
  }

  /** Full: the oldest entry goes (with fixed windows, insertion order is about expiry order). */
  private block(key: string, until: number, limit: number): void {
    const compact = compactKey(key, this.ipv4KeyPrefix);
    this.blocked.delete(compact);
    if (this.blocked.size >= this.maxBlockedKeys) {
      const oldest = this.blocked.keys().next();
      if (oldest.done !== true) {
        this.blocked.delete(oldest.value);
        this.blockedOver.delete(oldest.value);
      }
    }
    this.blocked.set(compact, until);
    if (limit === this.limit) this.blockedOver.delete(compact);
    else this.blockedOver.set(compact, limit);
  }
}
