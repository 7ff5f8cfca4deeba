import { randomInt } from 'node:crypto';
import { ConfigurationError } from '../errors';
import { checkOptions, type OptionChecks, required, wholeNumber } from '../options';
import type { FailureLog } from './failure-log';
import { EMPTY_KIND, KEY_BYTES, KeyBytes, lock, unlock } from './shared-memory';
import { MAX_WINDOW_MS, MIN_WINDOW_MS } from './window';

/**
 * The failed-authentication budget's log in a SharedArrayBuffer, so that the worker threads of one
 * process count their failures together, as one instance would: each thread opens the same buffer
 * (`createFailureBudgetBuffer()`, handed to every thread in `workerData`) with a
 * `SharedFailureLog`, and reads and counts a key only while holding its bucket's lock.
 *
 * The buffer, in bytes:
 *
 * - a header of 64: a magic word and a version, then the limit, the window, `maxTrackedIps`, the
 *   bucket count, the ways per bucket, the key field's size, a way's size and the hash seed (each a
 *   Uint32), so that a thread opening it with another limit or window is refused;
 * - one Int32 lock per bucket (0 free, 1 held, 2 held with threads waiting);
 * - the table: `buckets` (a power of two) × `WAYS` ways, each way
 *   `[spentUntil: Float64][count: Int32][head: Int32][kind: Uint8][key: KEY_BYTES bytes]` (64
 *   bytes), then the ring of its failure times, `limit` Float64s, oldest at `head`.
 *
 * A key (`ipKeyGenerator()` output: dotted IPv4, an IPv6 network, 'unknown') is stored as its
 * bytes; one longer than the field, or not ASCII, as the SHA-256 digest of its UTF-8 text, marked
 * apart by its kind, so distinct keys stay distinct. Keys are found by comparing those bytes; the
 * seeded hash only picks the bucket.
 */

/** Ways per bucket: a key lives in one of the 8 ways of the bucket its hash picks. */
export const WAYS = 8;
const MAGIC = 0x54474642;
const VERSION = 1;
const HEADER_BYTES = 64;
/** Header words (Uint32). */
const H_MAGIC = 0;
const H_VERSION = 1;
const H_LIMIT = 2;
const H_WINDOW = 3;
const H_TRACKED = 4;
const H_BUCKETS = 5;
const H_WAYS = 6;
const H_KEY_BYTES = 7;
const H_WAY_BYTES = 8;
const H_SEED = 9;

/** Byte offsets inside a way. */
const W_SPENT = 0;
const W_COUNT = 8;
const W_HEAD = 12;
const W_KIND = 16;
const W_TIMES = 64;

/** The largest buffer made: a limit or `maxTrackedIps` that needs more is refused. */
const MAX_BUFFER_BYTES = 2 ** 32;
const DEFAULT_MAX_TRACKED_IPS = 100_000;

export { STALE_LOCK_MS } from './shared-memory';

export interface FailureBudgetBufferOptions {
  /** The failure budget's `limit`: failures allowed per IP per window. */
  limit: number;
  /** The failure budget's `windowMs`. */
  windowMs: number;
  /** IPs (or IPv6 networks) remembered at most, about. Defaults to 100 000. */
  maxTrackedIps?: number;
}

const BUFFER_OPTION_CHECKS: OptionChecks<FailureBudgetBufferOptions> = {
  limit: required(wholeNumber(1)),
  windowMs: required(wholeNumber(MIN_WINDOW_MS, MAX_WINDOW_MS)),
  maxTrackedIps: wholeNumber(1),
};

/** How a buffer is laid out, from its limit and capacity. */
interface Geometry {
  readonly buckets: number;
  readonly wayBytes: number;
  readonly locksAt: number;
  readonly waysAt: number;
  readonly byteLength: number;
}

function geometryOf(limit: number, maxTrackedIps: number): Geometry {
  let buckets = 1;
  while (buckets * WAYS < maxTrackedIps) buckets *= 2;
  const wayBytes = W_TIMES + 8 * limit;
  const locksAt = HEADER_BYTES;
  const waysAt = alignTo8(locksAt + 4 * buckets);
  return { buckets, wayBytes, locksAt, waysAt, byteLength: waysAt + buckets * WAYS * wayBytes };
}

/**
 * The most IPs a buffer of at most `bytes` keeps for a budget of `limit`, up to `wanted`: each
 * way holds up to `limit` failure times, so a large limit leaves room for fewer IPs (never fewer
 * than one bucket's).
 */
export function trackedIpsWithin(limit: number, bytes: number, wanted: number): number {
  let tracked = wanted;
  while (tracked > WAYS && geometryOf(limit, tracked).byteLength > bytes) {
    tracked = Math.floor(tracked / 2);
  }
  return Math.max(WAYS, tracked);
}

function alignTo8(bytes: number): number {
  return Math.ceil(bytes / 8) * 8;
}

/**
 * A zeroed buffer for the failure budget of `limit` failures per `windowMs`, holding about
 * `maxTrackedIps` keys (`WAYS` per bucket, the buckets rounded up to a power of two), for
 * `createAuthFailureLimiter({ sharedFailures })` in every thread that shares it.
 */
export function createFailureBudgetBuffer(options: FailureBudgetBufferOptions): SharedArrayBuffer {
  const where = 'createFailureBudgetBuffer()';
  checkOptions(where, options, BUFFER_OPTION_CHECKS);
  const maxTrackedIps = options.maxTrackedIps ?? DEFAULT_MAX_TRACKED_IPS;
  const geometry = geometryOf(options.limit, maxTrackedIps);
  if (geometry.byteLength > MAX_BUFFER_BYTES) {
    throw new ConfigurationError(
      `${where}: a limit of ${options.limit} for ${maxTrackedIps} IPs needs ` +
        `${geometry.byteLength} bytes, more than ${MAX_BUFFER_BYTES}: lower limit or maxTrackedIps`,
    );
  }
  const buffer = new SharedArrayBuffer(geometry.byteLength);
  const header = new Uint32Array(buffer, 0, HEADER_BYTES / 4);
  header[H_MAGIC] = MAGIC;
  header[H_VERSION] = VERSION;
  header[H_LIMIT] = options.limit;
  header[H_WINDOW] = options.windowMs;
  header[H_TRACKED] = maxTrackedIps;
  header[H_BUCKETS] = geometry.buckets;
  header[H_WAYS] = WAYS;
  header[H_KEY_BYTES] = KEY_BYTES;
  header[H_WAY_BYTES] = geometry.wayBytes;
  // Unknown to clients, so that they cannot pick keys that all land in one bucket.
  header[H_SEED] = randomInt(2 ** 32 - 1);
  return buffer;
}

/** What a thread expects of the buffer it opens: the budget's own limit and window. */
export interface SharedFailureLogShape {
  readonly limit: number;
  readonly windowMs: number;
  /** When given, the buffer must have been made for it too. */
  readonly maxTrackedIps?: number | undefined;
}

/**
 * One thread's view of a shared buffer. Each thread (and each limiter) opens its own; a view is
 * used by its own thread only. Reading and counting take the key's bucket lock, unless the call
 * runs inside `exclusive()` for that key, which holds it already.
 */
export class SharedFailureLog implements FailureLog {
  private readonly bytes: Uint8Array;
  private readonly words: Int32Array;
  private readonly floats: Float64Array;
  private readonly limit: number;
  private readonly windowMs: number;
  private readonly bucketMask: number;
  private readonly locksAt: number;
  private readonly waysAt: number;
  private readonly wayBytes: number;
  /** The key last read or counted, in its stored form. */
  private readonly keys: KeyBytes;
  /** The bucket whose lock this view holds inside `exclusive()`, or -1. */
  private held = -1;

  /** Throws a `ConfigurationError` unless `buffer` was made for `shape`'s limit and window. */
  constructor(buffer: SharedArrayBuffer, shape: SharedFailureLogShape) {
    const header = headerOf(buffer);
    const made = { limit: header[H_LIMIT] ?? 0, windowMs: header[H_WINDOW] ?? 0 };
    const tracked = header[H_TRACKED] ?? 0;
    if (made.limit !== shape.limit || made.windowMs !== shape.windowMs) {
      throw new ConfigurationError(
        `sharedFailures: the buffer was made for limit ${made.limit} and windowMs ` +
          `${made.windowMs}, and this budget counts limit ${shape.limit} in windowMs ` +
          `${shape.windowMs}: make the ThreadShare with the same authFailureLimit and windowMs`,
      );
    }
    if (shape.maxTrackedIps !== undefined && shape.maxTrackedIps !== tracked) {
      throw new ConfigurationError(
        `sharedFailures: the buffer was made for maxTrackedIps ${tracked}, not ` +
          `${shape.maxTrackedIps}: give the same maxTrackedIps to both, or leave it to the buffer`,
      );
    }
    const geometry = geometryOf(made.limit, tracked);
    if (
      header[H_BUCKETS] !== geometry.buckets ||
      header[H_WAYS] !== WAYS ||
      header[H_KEY_BYTES] !== KEY_BYTES ||
      header[H_WAY_BYTES] !== geometry.wayBytes ||
      buffer.byteLength !== geometry.byteLength
    ) {
      throw new ConfigurationError(
        'sharedFailures: the buffer is not laid out as a ThreadShare of this version lays it ' +
          'out: make it with this version',
      );
    }
    this.bytes = new Uint8Array(buffer);
    this.words = new Int32Array(buffer);
    this.floats = new Float64Array(buffer);
    this.limit = made.limit;
    this.windowMs = made.windowMs;
    this.bucketMask = geometry.buckets - 1;
    this.keys = new KeyBytes(header[H_SEED] ?? 0);
    this.locksAt = geometry.locksAt;
    this.waysAt = geometry.waysAt;
    this.wayBytes = geometry.wayBytes;
  }

  spentUntil(key: string, at: number): number | undefined {
    const bucket = this.bucketOf(key);
    if (this.held === bucket) return this.readSpent(bucket, at);
    this.enter(bucket);
    try {
      return this.readSpent(bucket, at);
    } finally {
      this.leave(bucket);
    }
  }

  count(key: string, at: number): void {
    const bucket = this.bucketOf(key);
    if (this.held === bucket) {
      this.countIn(bucket, at);
      return;
    }
    this.enter(bucket);
    try {
      this.countIn(bucket, at);
    } finally {
      this.leave(bucket);
    }
  }

  exclusive<T>(key: string, run: () => T): T {
    const bucket = this.bucketOf(key);
    if (this.held === bucket) return run();
    this.enter(bucket);
    try {
      return run();
    } finally {
      this.leave(bucket);
    }
  }

  /** Takes the bucket's lock for this view; one at a time, so no two threads wait on each other. */
  private enter(bucket: number): void {
    if (this.held !== -1) {
      throw new Error('SharedFailureLog: a key was read or counted inside exclusive() of another');
    }
    lock(this.words, (this.locksAt >> 2) + bucket);
    this.held = bucket;
  }

  private leave(bucket: number): void {
    this.held = -1;
    unlock(this.words, (this.locksAt >> 2) + bucket);
  }

  /** When the scratch key's budget next has room, read (and an expired one cleared) under lock. */
  private readSpent(bucket: number, at: number): number | undefined {
    const way = this.find(bucket);
    if (way === -1) return undefined;
    const index = (way + W_SPENT) >> 3;
    const until = this.floats[index] ?? 0;
    if (until === 0) return undefined;
    if (until <= at) {
      this.floats[index] = 0;
      return undefined;
    }
    return until;
  }

  /** Counts one failure of the scratch key at `at`, under lock. */
  private countIn(bucket: number, at: number): void {
    const found = this.find(bucket);
    const way = found === -1 ? this.claim(bucket, at) : found;
    const { limit, windowMs, floats, words } = this;
    const timesAt = (way + W_TIMES) >> 3;
    const countAt = (way + W_COUNT) >> 2;
    const headAt = (way + W_HEAD) >> 2;
    let count = words[countAt] ?? 0;
    let head = words[headAt] ?? 0;
    // Failures that have left the window at `at` go, oldest first.
    while (count > 0 && (floats[timesAt + head] ?? 0) + windowMs <= at) {
      head = head + 1 === limit ? 0 : head + 1;
      count--;
    }
    const newest = count === 0 ? at : (floats[timesAt + ((head + count - 1) % limit)] ?? at);
    // Never before the newest, so a clock that steps back cannot reorder them.
    const time = Math.max(at, newest);
    if (count < limit) {
      floats[timesAt + ((head + count) % limit)] = time;
      count++;
    } else {
      // Full: the newest takes the oldest's place.
      floats[timesAt + head] = time;
      head = head + 1 === limit ? 0 : head + 1;
    }
    words[countAt] = count;
    words[headAt] = head;
    if (count >= limit) {
      // Room again when the oldest of the last `limit` failures leaves the window.
      floats[(way + W_SPENT) >> 3] = (floats[timesAt + head] ?? at) + windowMs;
    }
  }

  /** The way holding the scratch key in `bucket`, as a byte offset, or -1. */
  private find(bucket: number): number {
    let way = this.waysAt + bucket * WAYS * this.wayBytes;
    for (let slot = 0; slot < WAYS; slot++, way += this.wayBytes) {
      if (this.keys.storedAt(this.bytes, way + W_KIND)) return way;
    }
    return -1;
  }

  /** A way of `bucket` emptied for the scratch key (`wayToReuse()`), as a byte offset. */
  private claim(bucket: number, at: number): number {
    const { floats, words } = this;
    const way = this.wayToReuse(bucket, at);
    floats[(way + W_SPENT) >> 3] = 0;
    words[(way + W_COUNT) >> 2] = 0;
    words[(way + W_HEAD) >> 2] = 0;
    this.keys.storeAt(this.bytes, way + W_KIND);
    return way;
  }

  /**
   * The way of `bucket` a new key takes: an empty one; else one whose newest failure has left the
   * window at `at`; else, among the budgets not spent, the one whose newest failure is the oldest,
   * so that a flood of single failures from other keys cannot evict a spent budget; and when
   * every way holds a spent budget, the one whose newest failure is the oldest.
   */
  private wayToReuse(bucket: number, at: number): number {
    let chosen = -1;
    let chosenSpent = true;
    let chosenNewest = Infinity;
    // An empty way anywhere in the bucket comes before an expired one: a key is kept as long as
    // there is room, as in memory, so a clock that then steps back still finds it.
    let expired = -1;
    let way = this.waysAt + bucket * WAYS * this.wayBytes;
    for (let slot = 0; slot < WAYS; slot++, way += this.wayBytes) {
      if (this.bytes[way + W_KIND] === EMPTY_KIND) return way;
      if (expired !== -1) continue;
      const newest = this.newestOf(way);
      if (newest + this.windowMs <= at) {
        expired = way;
        continue;
      }
      const spent = (this.floats[(way + W_SPENT) >> 3] ?? 0) > at;
      const older = spent === chosenSpent ? newest < chosenNewest : chosenSpent;
      if (chosen === -1 || older) {
        chosen = way;
        chosenSpent = spent;
        chosenNewest = newest;
      }
    }
    return expired === -1 ? chosen : expired;
  }

  /** The time of the way's newest failure; -Infinity when it holds none. */
  private newestOf(way: number): number {
    const count = this.words[(way + W_COUNT) >> 2] ?? 0;
    if (count === 0) return -Infinity;
    const head = this.words[(way + W_HEAD) >> 2] ?? 0;
    return this.floats[((way + W_TIMES) >> 3) + ((head + count - 1) % this.limit)] ?? -Infinity;
  }

  /** Encodes `key` as the scratch key and returns its bucket. */
  private bucketOf(key: string): number {
    return this.keys.hash(key) & this.bucketMask;
  }
}

/** The header of a buffer made by `createFailureBudgetBuffer()`; a `ConfigurationError` if not. */
function headerOf(buffer: unknown): Uint32Array {
  if (Object.prototype.toString.call(buffer) !== '[object SharedArrayBuffer]') {
    throw new ConfigurationError('sharedFailures: expected the failures of a ThreadShare link');
  }
  const shared = buffer as SharedArrayBuffer;
  const header =
    shared.byteLength >= HEADER_BYTES ? new Uint32Array(shared, 0, HEADER_BYTES / 4) : undefined;
  if (header?.[H_MAGIC] !== MAGIC || header[H_VERSION] !== VERSION) {
    throw new ConfigurationError(
      'sharedFailures: the buffer was not made by a ThreadShare of this version',
    );
  }
  return header;
}
