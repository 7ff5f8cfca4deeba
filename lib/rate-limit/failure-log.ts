/**
 * Where the failed-authentication budget keeps its count of one instance's failures, by key (a
 * client IP or IPv6 network): the times of each key's failures still inside the rolling window,
 * at most `limit`, and for a key whose budget is spent, when it next has room.
 *
 * Two logs answer alike: `LocalFailureLog`, in this thread's memory, and the log of
 * `shared-failure-log.ts`, in a SharedArrayBuffer that the worker threads of one process share.
 */
export interface FailureLog {
  /**
   * When the key's budget next has room, if it is spent at `at` (a time after `at`); `undefined`
   * while some is left.
   */
  spentUntil(key: string, at: number): number | undefined;
  /** Counts one failure of the key at `at` (never before its newest one). */
  count(key: string, at: number): void;
  /**
   * Runs `run` with no other thread reading or counting the key until it returns or throws, and
   * returns its result. Inside it, `spentUntil()` and `count()` may be called for that key only.
   */
  exclusive<T>(key: string, run: () => T): T;
}

/** The limit and window a log counts with, and how many keys it remembers at most. */
export interface FailureLogShape {
  readonly limit: number;
  readonly windowMs: number;
  readonly maxTrackedIps: number;
}

/**
 * The log in this thread's memory: two Maps, each of at most `maxTrackedIps` keys. `failures`
 * holds each key's failure times (oldest first), in the order of each key's newest failure;
 * `spent`, kept apart so that a flood of single failures from other keys cannot evict it, holds
 * when a spent budget next has room, in about that order. A full Map makes room by dropping
 * expired entries first, then the oldest.
 */
export class LocalFailureLog implements FailureLog {
  private readonly failures = new Map<string, number[]>();
  private readonly spent = new Map<string, number>();

  constructor(private readonly shape: FailureLogShape) {}

  spentUntil(key: string, at: number): number | undefined {
    const until = this.spent.get(key);
    if (until === undefined) return undefined;
    if (until <= at) {
      this.spent.delete(key);
      return undefined;
    }
    return until;
  }

  count(key: string, at: number): void {
    const { limit, windowMs } = this.shape;
    const times = this.recentFailures(key, at);
    // Never before the newest, so a clock that steps back cannot reorder them.
    times.push(Math.max(at, times[times.length - 1] ?? at));
    if (times.length > limit) times.shift();
    if (times.length >= limit) {
      // Room again when the oldest of the last `limit` failures leaves the window.
      this.remember(this.spent, key, (times[0] ?? at) + windowMs, at, (until) => until);
    }
    this.remember(
      this.failures,
      key,
      times,
      at,
      (entry) => (entry[entry.length - 1] ?? 0) + windowMs,
    );
  }

  /** One thread reads and counts here: nothing else can come between. */
  exclusive<T>(_key: string, run: () => T): T {
    return run();
  }

  /** The key's failures still inside the window at `at`, oldest first, taken out of the Map. */
  private recentFailures(key: string, at: number): number[] {
    const times = this.failures.get(key);
    if (times === undefined) return [];
    this.failures.delete(key);
    while (times.length > 0 && (times[0] ?? 0) + this.shape.windowMs <= at) times.shift();
    return times;
  }

  /** Sets `key` in `map`, making room first: expired entries, then the oldest if still full. */
  private remember<V>(
    map: Map<string, V>,
    key: string,
    value: V,
    at: number,
    resetOf: (value: V) => number,
  ): void {
    const { maxTrackedIps } = this.shape;
    for (const [oldest, entry] of map) {
      if (map.size < maxTrackedIps || resetOf(entry) > at) break;
      map.delete(oldest);
    }
    if (map.size >= maxTrackedIps) {
      const oldest = map.keys().next();
      if (oldest.done !== true) map.delete(oldest.value);
    }
    map.set(key, value);
  }
}
