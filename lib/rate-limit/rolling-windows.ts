import type { CounterReading } from './compact-memory-store';

/**
 * Exact rolling windows in this process's memory, the engine's local counts for the scopes that
 * roll (the same rule as the Redis script): a key keeps the times of its admissions still inside
 * the window, oldest first, in a ring that grows by doubling; a request has room when fewer than
 * its limit are younger than the window. A time is never before the key's newest, so a clock that
 * steps back cannot reorder the ring.
 *
 * Keys live in the order of their newest admission, so the ones whose every admission has left
 * the window are at the front and go first, a few on each admission; past `maxKeys` the key
 * admitted longest ago goes too.
 */

export interface LocalWindows {
  /** The key's count now and when it next has room under a limit of count + 1, counting nothing. */
  peek(key: string, into: CounterReading): void;
  /**
   * Counts one admission and writes the count after it, as `peek()` would. `limit`, the most the
   * key may hold, bounds what is kept for it.
   */
  hit(key: string, into: CounterReading, limit?: number): void;
  /** When the key's count is down to `keep` or fewer: now when it already is. */
  freeAt(key: string, keep: number): number;
  /** Takes back the newest admission, never below zero. */
  decrement(key: string): void;
  resetKey(key: string): void;
  shutdown(): void;
}

interface Ring {
  times: Float64Array;
  start: number;
  n: number;
}

export interface RollingWindowsOptions {
  readonly windowMs: number;
  readonly now: () => number;
  /** Keys kept at most. Defaults to 1 000 000. */
  readonly maxKeys?: number | undefined;
}

const DEFAULT_MAX_KEYS = 1_000_000;
const FIRST_CAPACITY = 4;
/** Keys whose window is over, dropped from the front on each admission at most. */
const SWEEP_PER_HIT = 4;

export class RollingWindows implements LocalWindows {
  private readonly rings = new Map<string, Ring>();
  private readonly windowMs: number;
  private readonly now: () => number;
  private readonly maxKeys: number;

  constructor(options: RollingWindowsOptions) {
    this.windowMs = options.windowMs;
    this.now = options.now;
    this.maxKeys = options.maxKeys ?? DEFAULT_MAX_KEYS;
  }

  peek(key: string, into: CounterReading): void {
    const now = this.now();
    this.readInto(this.live(key, now), now, into);
  }

  hit(key: string, into: CounterReading, limit = Number.MAX_SAFE_INTEGER): void {
    const now = this.now();
    let ring = this.live(key, now);
    if (ring === undefined) {
      ring = { times: new Float64Array(Math.min(FIRST_CAPACITY, limit)), start: 0, n: 0 };
    } else {
      this.rings.delete(key);
    }
    push(ring, ring.n > 0 ? Math.max(now, newest(ring)) : now, limit);
    this.sweep(now);
    this.rings.set(key, ring);
    this.readInto(ring, now, into);
  }

  freeAt(key: string, keep: number): number {
    const now = this.now();
    // No count is down to a negative keep: a whole window, as the fixed windows answer.
    if (keep < 0) return now + this.windowMs;
    const ring = this.live(key, now);
    if (ring === undefined || ring.n <= keep) return now;
    return at(ring, ring.n - keep - 1) + this.windowMs;
  }

  decrement(key: string): void {
    const ring = this.rings.get(key);
    if (ring !== undefined && ring.n > 0) ring.n -= 1;
  }

  resetKey(key: string): void {
    this.rings.delete(key);
  }

  shutdown(): void {
    this.rings.clear();
  }

  /** Keys kept, for tests and diagnostics. */
  get size(): number {
    return this.rings.size;
  }

  /** The key's ring with the admissions that left the window dropped; none when it is empty. */
  private live(key: string, now: number): Ring | undefined {
    const ring = this.rings.get(key);
    if (ring === undefined) return undefined;
    const cutoff = now - this.windowMs;
    while (ring.n > 0 && at(ring, 0) <= cutoff) {
      ring.start = (ring.start + 1) % ring.times.length;
      ring.n -= 1;
    }
    if (ring.n > 0) return ring;
    this.rings.delete(key);
    return undefined;
  }

  private readInto(ring: Ring | undefined, now: number, into: CounterReading): void {
    into.count = ring?.n ?? 0;
    into.resetAt = ring === undefined ? now + this.windowMs : at(ring, 0) + this.windowMs;
  }

  /** Drops keys whose every admission left the window, and the oldest past `maxKeys`. */
  private sweep(now: number): void {
    const cutoff = now - this.windowMs;
    let budget = SWEEP_PER_HIT;
    for (const [key, ring] of this.rings) {
      const live = ring.n > 0 && newest(ring) > cutoff;
      if (this.rings.size < this.maxKeys && (budget-- <= 0 || live)) break;
      this.rings.delete(key);
    }
  }
}

function at(ring: Ring, index: number): number {
  return ring.times[(ring.start + index) % ring.times.length] ?? 0;
}

function newest(ring: Ring): number {
  return at(ring, ring.n - 1);
}

/** Appends `time`, doubling the ring when it is full, never past `limit` slots (nor below n + 1). */
function push(ring: Ring, time: number, limit: number): void {
  const capacity = ring.times.length;
  if (ring.n === capacity) {
    const times = new Float64Array(Math.max(Math.min(capacity * 2, limit), ring.n + 1));
    for (let i = 0; i < ring.n; i++) times[i] = at(ring, i);
    ring.times = times;
    ring.start = 0;
  }
  ring.times[(ring.start + ring.n) % ring.times.length] = time;
  ring.n += 1;
}
