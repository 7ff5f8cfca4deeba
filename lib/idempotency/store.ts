import { type RedisCommandFn, redisCommandFn, scriptSha1 } from '../rate-limit/redis-commands';
import type { LimiterRedis } from '../rate-limit/window';

/**
 * Where idempotency records live: a compare-and-set map of strings with a lifetime. The rule
 * (`lib/core/idempotency.ts`) decides what the strings mean; a store only guarantees that
 * `claim` is atomic across every instance that shares it, and that `settle` and `release` change
 * a record only while it still holds the caller's claim.
 *
 * - `RedisIdempotencyStore`: one script call per operation, shared by every instance; a failure
 *   or a Redis that cannot be used throws `IdempotencyStoreError` (the request is answered `503`,
 *   never decided by a per-instance fallback, which could forward a retry twice).
 * - `MemoryIdempotencyStore`: this process only, bounded, evicting only what has expired.
 */

export type IdempotencyStoreState = 'memory' | 'shared' | 'degraded';

export interface IdempotencyStore {
  /** Where records are kept now; `degraded` while the shared store cannot be used. */
  state(): IdempotencyStoreState;
  /**
   * Writes `claim` under `name` for `ttlMs` unless a record is there: `undefined` when written,
   * the record found otherwise.
   */
  claim(name: string, claim: string, ttlMs: number): Promise<string | undefined>;
  /** Replaces `claim` by `record` for `ttlMs`; `false` when `name` no longer holds `claim`. */
  settle(name: string, claim: string, record: string, ttlMs: number): Promise<boolean>;
  /** Removes `name` if it still holds `claim`. */
  release(name: string, claim: string): Promise<void>;
}

/** The store could not take the operation: Redis unusable or failing, or memory full. */
export class IdempotencyStoreError extends Error {
  override readonly name = 'IdempotencyStoreError';
  constructor(readonly reason: 'unavailable' | 'full') {
    super(
      reason === 'full'
        ? 'the idempotency store is full'
        : 'the idempotency store cannot be reached',
    );
  }
}

const CLAIM_SCRIPT = `
local found = redis.call('GET', KEYS[1])
if found then return found end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
`;

const SETTLE_SCRIPT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
`;

const RELEASE_SCRIPT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`;

export interface RedisIdempotencyStoreOptions {
  readonly redis: LimiterRedis;
  /** Prepended to every record's name, which carries its account's hash tag. */
  readonly prefix: string;
}

export class RedisIdempotencyStore implements IdempotencyStore {
  private readonly send: RedisCommandFn;
  private readonly scripts: { claim: string; settle: string; release: string };

  constructor(private readonly options: RedisIdempotencyStoreOptions) {
    this.send = redisCommandFn(options.redis.client);
    this.scripts = {
      claim: this.load(CLAIM_SCRIPT),
      settle: this.load(SETTLE_SCRIPT),
      release: this.load(RELEASE_SCRIPT),
    };
  }

  state(): IdempotencyStoreState {
    return this.options.redis.health.state;
  }

  async claim(name: string, claim: string, ttlMs: number): Promise<string | undefined> {
    const found = await this.call(this.scripts.claim, name, claim, String(ttlMs));
    if (typeof found !== 'string') throw new IdempotencyStoreError('unavailable');
    return found === '' ? undefined : found;
  }

  async settle(name: string, claim: string, record: string, ttlMs: number): Promise<boolean> {
    return Number(await this.call(this.scripts.settle, name, claim, record, String(ttlMs))) === 1;
  }

  async release(name: string, claim: string): Promise<void> {
    await this.call(this.scripts.release, name, claim);
  }

  private async call(sha: string, name: string, ...args: string[]): Promise<unknown> {
    const { health } = this.options.redis;
    if (!health.usable) throw new IdempotencyStoreError('unavailable');
    try {
      const reply = await this.send('EVALSHA', sha, '1', this.options.prefix + name, ...args);
      health.succeeded();
      return reply;
    } catch (error) {
      health.failed(error);
      throw new IdempotencyStoreError('unavailable');
    }
  }

  /** `SCRIPT LOAD` is answered locally (`redisCommandFn`); Redis learns it on a `NOSCRIPT`. */
  private load(script: string): string {
    void this.send('SCRIPT', 'LOAD', script);
    return scriptSha1(script);
  }
}

export interface MemoryIdempotencyStoreOptions {
  /** Records kept at most. Defaults to 100 000. */
  readonly maxRecords?: number | undefined;
  /** Characters of records kept at most (answers count by their sealed size). Defaults to 64 MiB. */
  readonly maxCharacters?: number | undefined;
  /** Milliseconds of a clock that never steps back. Defaults to `performance.now()`. */
  readonly now?: (() => number) | undefined;
}

export const DEFAULT_MEMORY_RECORDS = 100_000;
export const DEFAULT_MEMORY_CHARACTERS = 64 * 1024 * 1024;

interface MemoryRecord {
  readonly value: string;
  readonly expiresAt: number;
}

/**
 * Records in this process's memory. Every record of a store has the same lifetime, counted from
 * its last write, and a write moves it to the end of the map: the map is in order of expiry, so
 * what has expired is always at its front and is dropped in time proportional to it. When the
 * bounds are reached and nothing has expired, a new claim is refused (`full`): a record that may
 * still be replayed is never evicted.
 */
export class MemoryIdempotencyStore implements IdempotencyStore {
  private readonly records = new Map<string, MemoryRecord>();
  private characters = 0;
  private readonly maxRecords: number;
  private readonly maxCharacters: number;
  private readonly now: () => number;

  constructor(options: MemoryIdempotencyStoreOptions = {}) {
    this.maxRecords = options.maxRecords ?? DEFAULT_MEMORY_RECORDS;
    this.maxCharacters = options.maxCharacters ?? DEFAULT_MEMORY_CHARACTERS;
    this.now = options.now ?? (() => performance.now());
  }

  state(): IdempotencyStoreState {
    return 'memory';
  }

  /** Records held now, expired ones not yet dropped included. */
  get size(): number {
    return this.records.size;
  }

  claim(name: string, claim: string, ttlMs: number): Promise<string | undefined> {
    // A throw in the executor rejects the promise: the same error, the same turn.
    return new Promise((resolve) => {
      resolve(this.claimNow(name, claim, ttlMs));
    });
  }

  settle(name: string, claim: string, record: string, ttlMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      resolve(this.settleNow(name, claim, record, ttlMs));
    });
  }

  release(name: string, claim: string): Promise<void> {
    this.releaseNow(name, claim);
    return Promise.resolve();
  }

  /**
   * `claim()` in one synchronous step, for a caller that must answer before it returns (the
   * host thread of a process's workers): throws `IdempotencyStoreError('full')` where `claim()`
   * rejects with it.
   */
  claimNow(name: string, claim: string, ttlMs: number): string | undefined {
    const now = this.now();
    this.dropExpired(now);
    const found = this.records.get(name);
    if (found !== undefined) return found.value;
    if (
      this.records.size >= this.maxRecords ||
      this.characters + claim.length > this.maxCharacters
    ) {
      throw new IdempotencyStoreError('full');
    }
    this.write(name, claim, now + ttlMs);
    return undefined;
  }

  /** `settle()` in one synchronous step; throws where it rejects. */
  settleNow(name: string, claim: string, record: string, ttlMs: number): boolean {
    const now = this.now();
    this.dropExpired(now);
    if (this.records.get(name)?.value !== claim) return false;
    this.remove(name);
    if (this.characters + record.length > this.maxCharacters) {
      // The claim stays: its retries are refused as of unknown outcome, never forwarded again.
      this.write(name, claim, now + ttlMs);
      throw new IdempotencyStoreError('full');
    }
    this.write(name, record, now + ttlMs);
    return true;
  }

  /** `release()` in one synchronous step. */
  releaseNow(name: string, claim: string): void {
    if (this.records.get(name)?.value === claim) this.remove(name);
  }

  private write(name: string, value: string, expiresAt: number): void {
    this.records.set(name, { value, expiresAt });
    this.characters += value.length;
  }

  private remove(name: string): void {
    const found = this.records.get(name);
    if (found === undefined) return;
    this.records.delete(name);
    this.characters -= found.value.length;
  }

  private dropExpired(now: number): void {
    for (const [name, record] of this.records) {
      if (record.expiresAt > now) return;
      this.records.delete(name);
      this.characters -= record.value.length;
    }
  }
}
