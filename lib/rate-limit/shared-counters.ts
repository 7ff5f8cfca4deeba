import { createHash, randomInt } from 'node:crypto';
import { ConfigurationError } from '../errors';
import { checkOptions, type OptionChecks, wholeNumber } from '../options';
import type { CounterReading } from './compact-memory-store';
import type { LocalWindows } from './rolling-windows';
import { KeyBytes, lock, unlock } from './shared-memory';

/**
 * The in-memory limits of one process in a SharedArrayBuffer, so that each of its worker threads
 * decides its own admissions and the threads still count as one instance: the buffer is made once
 * (`createSharedCountersBuffer()`, in every `ThreadShare` link), each thread opens it with a
 * `SharedCounters`, and an admission reads and counts every counter it meets while holding the
 * buffer's one lock (`enter()`/`leave()`, around `admitLocal()`): a step of about a microsecond,
 * so a thread seldom waits, and nothing crosses between threads but the lock's cache line.
 *
 * Each scope's counters (`windows()`) follow the rules of their single-thread counterparts:
 * a rolling window (`RollingWindows`) keeps the times of the key's admissions still inside it,
 * oldest first, never a time before the key's newest; a fixed window (`CompactMemoryStore`) keeps
 * a count and when the key's window started, at its first hit. Keys are kept per scope in the
 * order of their last admission: a few whose window is over go on each admission, and when the
 * keys or the times run out the key admitted longest ago goes first (its count is forgotten).
 *
 * The buffer, in bytes (index fields hold an index + 1, so zeroed memory is empty):
 *
 * - a header of 64: Int32 words, see `H_*`: the shape it was made with, the lock, the free
 *   lists and the high-water marks of the keys and the chunks, the scopes named;
 * - the scopes, `MAX_SCOPES` of `SCOPE_BYTES`: the digest of the scope's description, the ends
 *   of its keys' list in order of last admission, its window and whether it rolls;
 * - the hash buckets, an Int32 per bucket: the first key of its chain;
 * - the keys, `maxKeys` of `ENTRY_BYTES`, see `E_*`;
 * - the chunks' links, an Int32 per chunk, then the chunks: `CHUNK_TIMES` Float64 admission
 *   times each, a rolling key's times in a chain of chunks from its oldest.
 */

/** Scopes one buffer counts, at most: far more than a gateway declares. */
const MAX_SCOPES = 256;
/** Admission times per chunk: a key's times live in a chain of these, taken from one pool. */
const CHUNK_TIMES = 16;
const CHUNK_SHIFT = 4;
const CHUNK_MASK = CHUNK_TIMES - 1;

const MAGIC = 0x54474c43;
const VERSION = 1;
const HEADER_BYTES = 64;
/** Header words (Int32). */
const H_MAGIC = 0;
const H_VERSION = 1;
const H_MAX_KEYS = 2;
const H_BUCKETS = 3;
const H_CHUNKS = 4;
const H_SEED = 5;
const H_LOCK = 6;
const H_FREE_KEY = 7;
const H_USED_KEYS = 8;
const H_FREE_CHUNK = 9;
const H_USED_CHUNKS = 10;
const H_SCOPES = 11;

const SCOPE_BYTES = 48;
const DIGEST_BYTES = 32;
/** Scope words, after the digest. */
const S_FIRST = 8;
const S_LAST = 9;
const S_WINDOW = 10;
const S_ROLLING = 11;
const SCOPE_WORDS = SCOPE_BYTES / 4;

const ENTRY_BYTES = 112;
const ENTRY_WORDS = ENTRY_BYTES / 4;
/** Key words (Int32). */
const E_SCOPE = 0;
/** The next key in the same bucket. */
const E_NEXT = 1;
/** The neighbours in the scope's list, in order of last admission. */
const E_OLDER = 2;
const E_NEWER = 3;
/** A rolling key's first and last chunk, the index of its oldest time in the first, its count. */
const E_HEAD = 4;
const E_HEAD_AT = 5;
const E_TAIL = 6;
const E_COUNT = 7;
const E_BUCKET = 8;
/** Key doubles (Float64, at byte 40 and 48): its last admission, a fixed window's start. */
const E_LAST = 5;
const E_START = 6;
/** The key's stored form: kind, then bytes. */
const E_KEY = 56;

const DEFAULT_MAX_KEYS = 1_000_000;
const DEFAULT_MAX_TIMES = 16 * 2 ** 20;
/** Keys whose window is over, dropped from the front of a scope on each admission at most. */
const SWEEP_PER_HIT = 4;
/** The largest buffer made. */
const MAX_BUFFER_BYTES = 2 ** 32;

export interface SharedCountersBufferOptions {
  /** Keys counted at most, over every scope. Defaults to 1 000 000. */
  readonly maxKeys?: number | undefined;
  /** Admission times the rolling windows keep at most, over every key. Defaults to 16 Mi. */
  readonly maxTimes?: number | undefined;
}

/** The bounds of `maxKeys` and `maxTimes`. */
export const MAX_SHARED_KEYS = 2 ** 26;
export const MAX_SHARED_TIMES = 2 ** 28;

const BUFFER_OPTION_CHECKS: OptionChecks<SharedCountersBufferOptions> = {
  maxKeys: wholeNumber(1, MAX_SHARED_KEYS),
  maxTimes: wholeNumber(1, MAX_SHARED_TIMES),
};

interface Geometry {
  readonly buckets: number;
  readonly chunks: number;
  readonly scopesAt: number;
  readonly bucketsAt: number;
  readonly keysAt: number;
  readonly linksAt: number;
  readonly timesAt: number;
  readonly byteLength: number;
}

function geometryOf(maxKeys: number, chunks: number): Geometry {
  let buckets = 1;
  while (buckets < maxKeys) buckets *= 2;
  const scopesAt = HEADER_BYTES;
  const bucketsAt = scopesAt + MAX_SCOPES * SCOPE_BYTES;
  const keysAt = Math.ceil((bucketsAt + 4 * buckets) / 8) * 8;
  const linksAt = keysAt + maxKeys * ENTRY_BYTES;
  const timesAt = Math.ceil((linksAt + 4 * chunks) / 8) * 8;
  const byteLength = timesAt + chunks * CHUNK_TIMES * 8;
  return { buckets, chunks, scopesAt, bucketsAt, keysAt, linksAt, timesAt, byteLength };
}

/**
 * A zeroed buffer for the in-memory limits of every thread of one process. Memory is taken from
 * the system as keys and times first use it, so an idle buffer costs address space, not RSS:
 * at the defaults about 250 MiB of it.
 */
export function createSharedCountersBuffer(
  options: SharedCountersBufferOptions = {},
): SharedArrayBuffer {
  checkOptions('createSharedCountersBuffer()', options, BUFFER_OPTION_CHECKS);
  const maxKeys = options.maxKeys ?? DEFAULT_MAX_KEYS;
  const chunks = Math.ceil((options.maxTimes ?? DEFAULT_MAX_TIMES) / CHUNK_TIMES);
  const geometry = geometryOf(maxKeys, chunks);
  if (geometry.byteLength > MAX_BUFFER_BYTES) {
    throw new ConfigurationError(
      `createSharedCountersBuffer(): ${maxKeys} keys and ${chunks * CHUNK_TIMES} times need ` +
        `${geometry.byteLength} bytes, more than ${MAX_BUFFER_BYTES}: lower maxKeys or maxTimes`,
    );
  }
  const buffer = new SharedArrayBuffer(geometry.byteLength);
  const header = new Int32Array(buffer, 0, HEADER_BYTES / 4);
  header[H_MAGIC] = MAGIC;
  header[H_VERSION] = VERSION;
  header[H_MAX_KEYS] = maxKeys;
  header[H_BUCKETS] = geometry.buckets;
  header[H_CHUNKS] = chunks;
  header[H_SEED] = randomInt(2 ** 31 - 1);
  return buffer;
}

/** What names one scope's counters: two threads naming it alike count in the same keys. */
export interface SharedScope {
  readonly prefix: string;
  readonly windowMs: number;
  readonly rolling: boolean;
}

/** The buffer has no room left for a key or a time that no other key could make room for. */
export class SharedCountersFullError extends Error {
  override readonly name = 'SharedCountersFullError';
}

/**
 * One thread's view of a shared buffer; a view is used by its own thread only. Every method of
 * its scopes' windows takes the lock, unless the thread holds it already (`enter()`).
 */
export class SharedCounters {
  private readonly bytes: Uint8Array;
  private readonly words: Int32Array;
  private readonly floats: Float64Array;
  private readonly keys: KeyBytes;
  private readonly bucketMask: number;
  private readonly scopesWord: number;
  private readonly bucketsWord: number;
  private readonly keysWord: number;
  private readonly keysAt: number;
  private readonly linksWord: number;
  private readonly timesFloat: number;
  private readonly maxKeys: number;
  private readonly chunks: number;
  /** `enter()` calls not yet left: the lock is held while above zero. */
  private depth = 0;

  constructor(buffer: SharedArrayBuffer) {
    const header = headerOf(buffer);
    const maxKeys = header[H_MAX_KEYS] ?? 0;
    const chunks = header[H_CHUNKS] ?? 0;
    const geometry = geometryOf(maxKeys, chunks);
    if (header[H_BUCKETS] !== geometry.buckets || buffer.byteLength !== geometry.byteLength) {
      throw new ConfigurationError(
        'threads: the shared counters are not laid out as this version lays them out',
      );
    }
    this.bytes = new Uint8Array(buffer);
    this.words = new Int32Array(buffer);
    this.floats = new Float64Array(buffer);
    this.keys = new KeyBytes(header[H_SEED] ?? 0);
    this.bucketMask = geometry.buckets - 1;
    this.scopesWord = geometry.scopesAt >> 2;
    this.bucketsWord = geometry.bucketsAt >> 2;
    this.keysWord = geometry.keysAt >> 2;
    this.keysAt = geometry.keysAt;
    this.linksWord = geometry.linksAt >> 2;
    this.timesFloat = geometry.timesAt >> 3;
    this.maxKeys = maxKeys;
    this.chunks = chunks;
  }

  /** Takes the lock, unless this thread holds it already; every `enter()` needs its `leave()`. */
  enter(): void {
    if (this.depth++ === 0) lock(this.words, H_LOCK);
  }

  leave(): void {
    if (--this.depth === 0) unlock(this.words, H_LOCK);
  }

  /** The windows of one scope, shared with every thread that names it alike. */
  windows(scope: SharedScope, now: () => number = Date.now): LocalWindows {
    const digest = createHash('sha256')
      .update(JSON.stringify([scope.prefix, scope.windowMs, scope.rolling]))
      .digest();
    this.enter();
    try {
      const id = this.scopeId(digest, scope);
      return new SharedWindows(this, id, scope.windowMs, scope.rolling, now);
    } finally {
      this.leave();
    }
  }

  /** Keys held now, over every scope, for tests and diagnostics. */
  get size(): number {
    this.enter();
    try {
      let free = 0;
      for (let id = this.words[H_FREE_KEY] ?? 0; id !== 0; id = this.word(id, E_NEXT)) free++;
      return (this.words[H_USED_KEYS] ?? 0) - free;
    } finally {
      this.leave();
    }
  }

  /** The scope's number, written the first time any thread names it. */
  private scopeId(digest: Buffer, scope: SharedScope): number {
    const named = this.words[H_SCOPES] ?? 0;
    for (let id = 1; id <= named; id++) {
      const at = (this.scopesWord + (id - 1) * SCOPE_WORDS) * 4;
      if (digest.equals(this.bytes.subarray(at, at + DIGEST_BYTES))) return id;
    }
    if (named >= MAX_SCOPES) {
      throw new ConfigurationError(`threads: more than ${MAX_SCOPES} scopes share the counters`);
    }
    const id = named + 1;
    const word = this.scopesWord + named * SCOPE_WORDS;
    this.bytes.set(digest, word * 4);
    this.words[word + S_WINDOW] = scope.windowMs;
    this.words[word + S_ROLLING] = scope.rolling ? 1 : 0;
    this.words[H_SCOPES] = id;
    return id;
  }

  // Keys. `id`s are 1-based; the lock is held by every caller below.

  /** The key `key` of `scope`, or 0. */
  find(scope: number, key: string): number {
    const bucket = this.bucketOf(scope, key);
    for (let id = this.words[this.bucketsWord + bucket] ?? 0; id !== 0;) {
      if (this.word(id, E_SCOPE) === scope && this.keys.storedAt(this.bytes, this.keyAt(id))) {
        return id;
      }
      id = this.word(id, E_NEXT);
    }
    return 0;
  }

  /** A new key `key` of `scope`, holding nothing, newest in its scope. */
  create(scope: number, key: string, now: number): number {
    const bucket = this.bucketOf(scope, key);
    let id = this.takeKey();
    while (id === 0) {
      this.evictOne(now, 0);
      id = this.takeKey();
    }
    const word = this.keysWord + (id - 1) * ENTRY_WORDS;
    this.words.fill(0, word, word + ENTRY_WORDS);
    this.words[word + E_SCOPE] = scope;
    this.words[word + E_BUCKET] = bucket;
    this.words[word + E_NEXT] = this.words[this.bucketsWord + bucket] ?? 0;
    this.words[this.bucketsWord + bucket] = id;
    // `find()` or `bucketOf()` just encoded `key`.
    this.keys.storeAt(this.bytes, this.keyAt(id));
    this.append(scope, id);
    return id;
  }

  /** Forgets key `id`: out of its bucket and its scope's list, its chunks and itself freed. */
  remove(id: number): void {
    const bucketWord = this.bucketsWord + this.word(id, E_BUCKET);
    const next = this.word(id, E_NEXT);
    let at = this.words[bucketWord] ?? 0;
    if (at === id) {
      this.words[bucketWord] = next;
    } else {
      while (at !== 0 && this.word(at, E_NEXT) !== id) at = this.word(at, E_NEXT);
      if (at !== 0) this.setWord(at, E_NEXT, next);
    }
    this.unlink(id);
    this.freeTimes(id);
    this.setWord(id, E_SCOPE, 0);
    this.setWord(id, E_NEXT, this.words[H_FREE_KEY] ?? 0);
    this.words[H_FREE_KEY] = id;
  }

  /** Key `id` becomes its scope's newest, admitted at `now`. */
  touch(id: number, now: number): void {
    this.setFloat(id, E_LAST, now);
    const scope = this.word(id, E_SCOPE);
    if (this.scopeWord(scope, S_LAST) === id) return;
    this.unlink(id);
    this.append(scope, id);
  }

  /** Drops up to `SWEEP_PER_HIT` keys of `scope` whose window is over, oldest first. */
  sweep(scope: number, now: number): void {
    for (let budget = SWEEP_PER_HIT; budget > 0; budget--) {
      const id = this.scopeWord(scope, S_FIRST);
      if (id === 0 || !this.over(id, now)) return;
      this.remove(id);
    }
  }

  count(id: number): number {
    return this.word(id, E_COUNT);
  }

  setCount(id: number, count: number): void {
    this.setWord(id, E_COUNT, count);
  }

  start(id: number): number {
    return this.float(id, E_START);
  }

  setStart(id: number, start: number): void {
    this.setFloat(id, E_START, start);
  }

  // A rolling key's times, in a chain of chunks: `E_HEAD_AT` is the oldest's index in the first,
  // and the chain holds exactly the chunks that `E_HEAD_AT + E_COUNT` times fill.

  /** The key's `index`th time, oldest first. */
  timeAt(id: number, index: number): number {
    const at = this.word(id, E_HEAD_AT) + index;
    let chunk = this.word(id, E_HEAD);
    for (let hops = at >> CHUNK_SHIFT; hops > 0; hops--) chunk = this.link(chunk);
    return this.floats[this.timesFloat + (chunk - 1) * CHUNK_TIMES + (at & CHUNK_MASK)] ?? 0;
  }

  newest(id: number): number {
    const count = this.word(id, E_COUNT);
    const at = this.word(id, E_HEAD_AT) + count - 1;
    const chunk = this.word(id, E_TAIL);
    return this.floats[this.timesFloat + (chunk - 1) * CHUNK_TIMES + (at & CHUNK_MASK)] ?? 0;
  }

  /** Drops the times at or before `cutoff`, oldest first, freeing the chunks they leave. */
  dropUntil(id: number, cutoff: number): void {
    let count = this.word(id, E_COUNT);
    let head = this.word(id, E_HEAD);
    let headAt = this.word(id, E_HEAD_AT);
    const times = this.floats;
    while (
      count > 0 &&
      (times[this.timesFloat + (head - 1) * CHUNK_TIMES + headAt] ?? 0) <= cutoff
    ) {
      count--;
      headAt++;
      if (headAt === CHUNK_TIMES && count > 0) {
        const next = this.link(head);
        this.freeChunk(head);
        head = next;
        headAt = 0;
      }
    }
    this.setWord(id, E_COUNT, count);
    if (count === 0) {
      if (head !== 0) this.freeChunk(head);
      this.setWord(id, E_HEAD, 0);
      this.setWord(id, E_TAIL, 0);
      this.setWord(id, E_HEAD_AT, 0);
      return;
    }
    this.setWord(id, E_HEAD, head);
    this.setWord(id, E_HEAD_AT, headAt);
  }

  /** Appends `time`, taking a chunk when the last is full (making room from other keys). */
  push(id: number, time: number, now: number): void {
    const count = this.word(id, E_COUNT);
    const at = this.word(id, E_HEAD_AT) + count;
    if (count === 0 || (at & CHUNK_MASK) === 0) {
      const chunk = this.chunkFor(id, now);
      if (count === 0) {
        this.setWord(id, E_HEAD, chunk);
        this.setWord(id, E_HEAD_AT, 0);
      } else {
        this.setLink(this.word(id, E_TAIL), chunk);
      }
      this.setWord(id, E_TAIL, chunk);
    }
    const tail = this.word(id, E_TAIL);
    const slot = (this.word(id, E_HEAD_AT) + count) & CHUNK_MASK;
    this.floats[this.timesFloat + (tail - 1) * CHUNK_TIMES + slot] = time;
    this.setWord(id, E_COUNT, count + 1);
  }

  /** Takes back the newest time, freeing the last chunk when it empties. */
  pop(id: number): void {
    const count = this.word(id, E_COUNT) - 1;
    if (count <= 0) {
      this.freeTimes(id);
      return;
    }
    this.setWord(id, E_COUNT, count);
    if (((this.word(id, E_HEAD_AT) + count) & CHUNK_MASK) !== 0) return;
    const tail = this.word(id, E_TAIL);
    let chunk = this.word(id, E_HEAD);
    while (this.link(chunk) !== tail) chunk = this.link(chunk);
    this.freeChunk(tail);
    this.setLink(chunk, 0);
    this.setWord(id, E_TAIL, chunk);
  }

  // Making room.

  /** Whether key `id`'s window is over at `now`: nothing it counts is inside any more. */
  private over(id: number, now: number): boolean {
    const scope = this.word(id, E_SCOPE);
    const windowMs = this.scopeWord(scope, S_WINDOW);
    if (this.scopeWord(scope, S_ROLLING) === 0) return this.float(id, E_START) + windowMs <= now;
    return this.word(id, E_COUNT) === 0 || this.newest(id) + windowMs <= now;
  }

  /**
   * Forgets one key other than `keep`: the oldest of a scope whose window is over, else the one
   * admitted longest ago of every scope's oldest.
   */
  private evictOne(now: number, keep: number): void {
    let chosen = 0;
    let chosenLast = Infinity;
    const named = this.words[H_SCOPES] ?? 0;
    for (let scope = 1; scope <= named; scope++) {
      let id = this.scopeWord(scope, S_FIRST);
      if (id === keep) id = this.word(id, E_NEWER);
      if (id === 0) continue;
      if (this.over(id, now)) {
        chosen = id;
        break;
      }
      const last = this.float(id, E_LAST);
      if (last < chosenLast) {
        chosen = id;
        chosenLast = last;
      }
    }
    if (chosen === 0) {
      throw new SharedCountersFullError(
        `the shared counters are full: one key holds all ${this.chunks * CHUNK_TIMES} times ` +
          `(or all ${this.maxKeys} keys are taken): give the ThreadShare more`,
      );
    }
    this.remove(chosen);
  }

  private chunkFor(id: number, now: number): number {
    let chunk = this.takeChunk();
    while (chunk === 0) {
      this.evictOne(now, id);
      chunk = this.takeChunk();
    }
    return chunk;
  }

  private takeKey(): number {
    const free = this.words[H_FREE_KEY] ?? 0;
    if (free !== 0) {
      this.words[H_FREE_KEY] = this.word(free, E_NEXT);
      return free;
    }
    const used = this.words[H_USED_KEYS] ?? 0;
    if (used >= this.maxKeys) return 0;
    this.words[H_USED_KEYS] = used + 1;
    return used + 1;
  }

  private takeChunk(): number {
    const free = this.words[H_FREE_CHUNK] ?? 0;
    if (free !== 0) {
      this.words[H_FREE_CHUNK] = this.link(free);
      this.setLink(free, 0);
      return free;
    }
    const used = this.words[H_USED_CHUNKS] ?? 0;
    if (used >= this.chunks) return 0;
    this.words[H_USED_CHUNKS] = used + 1;
    return used + 1;
  }

  private freeChunk(chunk: number): void {
    this.setLink(chunk, this.words[H_FREE_CHUNK] ?? 0);
    this.words[H_FREE_CHUNK] = chunk;
  }

  /** Frees every chunk of key `id`: it holds no time. */
  private freeTimes(id: number): void {
    let chunk = this.word(id, E_HEAD);
    while (chunk !== 0) {
      const next = this.link(chunk);
      this.freeChunk(chunk);
      chunk = next;
    }
    this.setWord(id, E_HEAD, 0);
    this.setWord(id, E_TAIL, 0);
    this.setWord(id, E_HEAD_AT, 0);
    this.setWord(id, E_COUNT, 0);
  }

  // The scopes' lists, in order of last admission.

  private append(scope: number, id: number): void {
    const last = this.scopeWord(scope, S_LAST);
    this.setWord(id, E_OLDER, last);
    this.setWord(id, E_NEWER, 0);
    if (last === 0) this.setScopeWord(scope, S_FIRST, id);
    else this.setWord(last, E_NEWER, id);
    this.setScopeWord(scope, S_LAST, id);
  }

  private unlink(id: number): void {
    const scope = this.word(id, E_SCOPE);
    const older = this.word(id, E_OLDER);
    const newer = this.word(id, E_NEWER);
    if (older === 0) this.setScopeWord(scope, S_FIRST, newer);
    else this.setWord(older, E_NEWER, newer);
    if (newer === 0) this.setScopeWord(scope, S_LAST, older);
    else this.setWord(newer, E_OLDER, older);
  }

  // Fields.

  private bucketOf(scope: number, key: string): number {
    return (this.keys.hash(key) ^ Math.imul(scope, 0x9e3779b1)) & this.bucketMask;
  }

  private keyAt(id: number): number {
    return this.keysAt + (id - 1) * ENTRY_BYTES + E_KEY;
  }

  private word(id: number, field: number): number {
    return this.words[this.keysWord + (id - 1) * ENTRY_WORDS + field] ?? 0;
  }

  private setWord(id: number, field: number, value: number): void {
    this.words[this.keysWord + (id - 1) * ENTRY_WORDS + field] = value;
  }

  private float(id: number, field: number): number {
    return this.floats[(this.keysWord + (id - 1) * ENTRY_WORDS) / 2 + field] ?? 0;
  }

  private setFloat(id: number, field: number, value: number): void {
    this.floats[(this.keysWord + (id - 1) * ENTRY_WORDS) / 2 + field] = value;
  }

  private scopeWord(scope: number, field: number): number {
    return this.words[this.scopesWord + (scope - 1) * SCOPE_WORDS + field] ?? 0;
  }

  private setScopeWord(scope: number, field: number, value: number): void {
    this.words[this.scopesWord + (scope - 1) * SCOPE_WORDS + field] = value;
  }

  private link(chunk: number): number {
    return this.words[this.linksWord + chunk - 1] ?? 0;
  }

  private setLink(chunk: number, next: number): void {
    this.words[this.linksWord + chunk - 1] = next;
  }
}

/** One scope's windows in a shared buffer, with the rules of `RollingWindows` or fixed windows. */
class SharedWindows implements LocalWindows {
  constructor(
    private readonly table: SharedCounters,
    private readonly scope: number,
    private readonly windowMs: number,
    private readonly rolling: boolean,
    private readonly now: () => number,
  ) {}

  peek(key: string, into: CounterReading): void {
    const { table } = this;
    table.enter();
    try {
      const now = this.now();
      this.read(this.live(key, now), now, into);
    } finally {
      table.leave();
    }
  }

  hit(key: string, into: CounterReading): void {
    const { table, scope } = this;
    table.enter();
    try {
      const now = this.now();
      let id = this.live(key, now);
      if (id === 0) id = this.created(key, now);
      if (this.rolling) {
        const count = table.count(id);
        table.push(id, count > 0 ? Math.max(now, table.newest(id)) : now, now);
      } else {
        table.setCount(id, table.count(id) + 1);
      }
      table.touch(id, now);
      table.sweep(scope, now);
      this.read(id, now, into);
    } finally {
      table.leave();
    }
  }

  freeAt(key: string, keep: number): number {
    const { table } = this;
    table.enter();
    try {
      const now = this.now();
      if (!this.rolling) {
        // A fixed window's count drops only when it ends.
        const reading = { count: 0, resetAt: 0 };
        this.read(this.live(key, now), now, reading);
        return reading.count > keep ? reading.resetAt : now;
      }
      // No count is down to a negative keep: a whole window.
      if (keep < 0) return now + this.windowMs;
      const id = this.live(key, now);
      if (id === 0 || table.count(id) <= keep) return now;
      return table.timeAt(id, table.count(id) - keep - 1) + this.windowMs;
    } finally {
      table.leave();
    }
  }

  decrement(key: string): void {
    const { table } = this;
    table.enter();
    try {
      if (this.rolling) {
        const id = table.find(this.scope, key);
        if (id !== 0 && table.count(id) > 0) table.pop(id);
        return;
      }
      // A fixed window taken back before any hit starts then, with no hits, as a first hit would.
      const now = this.now();
      const id = this.live(key, now) || this.created(key, now);
      table.setCount(id, Math.max(0, table.count(id) - 1));
    } finally {
      table.leave();
    }
  }

  resetKey(key: string): void {
    const { table } = this;
    table.enter();
    try {
      const id = table.find(this.scope, key);
      if (id !== 0) table.remove(id);
    } finally {
      table.leave();
    }
  }

  /** Leaves the counts to the other threads that share them. */
  shutdown(): void {
    // Nothing of this thread's own to let go.
  }

  /**
   * The key with what has left its window dropped, or 0 (and the key forgotten) when nothing is
   * left: a rolling key without a time inside the window, a fixed key whose window ended.
   */
  private live(key: string, now: number): number {
    const { table } = this;
    const id = table.find(this.scope, key);
    if (id === 0) return 0;
    if (this.rolling) table.dropUntil(id, now - this.windowMs);
    const left = this.rolling ? table.count(id) > 0 : table.start(id) + this.windowMs > now;
    if (left) return id;
    table.remove(id);
    return 0;
  }

  /** A new key holding nothing; a fixed window starts now. */
  private created(key: string, now: number): number {
    const id = this.table.create(this.scope, key, now);
    if (!this.rolling) this.table.setStart(id, now);
    return id;
  }

  private read(id: number, now: number, into: CounterReading): void {
    const { table } = this;
    if (id === 0) {
      into.count = 0;
      into.resetAt = now + this.windowMs;
      return;
    }
    into.count = table.count(id);
    into.resetAt = (this.rolling ? table.timeAt(id, 0) : table.start(id)) + this.windowMs;
  }
}

/** The header of a buffer made by `createSharedCountersBuffer()`; a `ConfigurationError` if not. */
function headerOf(buffer: unknown): Int32Array {
  if (Object.prototype.toString.call(buffer) !== '[object SharedArrayBuffer]') {
    throw new ConfigurationError('threads: expected the counters of a ThreadShare link');
  }
  const shared = buffer as SharedArrayBuffer;
  const header =
    shared.byteLength >= HEADER_BYTES ? new Int32Array(shared, 0, HEADER_BYTES / 4) : undefined;
  if (header?.[H_MAGIC] !== MAGIC || header[H_VERSION] !== VERSION) {
    throw new ConfigurationError(
      'threads: the counters were not made by a ThreadShare of this version',
    );
  }
  return header;
}
