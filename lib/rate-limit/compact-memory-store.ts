import type { ClientRateLimitInfo, IncrementResponse, Options, Store } from 'express-rate-limit';
import { Ipv4Table, MAX_VALUE, capacityFor } from './ipv4-table';

/**
 * express-rate-limit's `MemoryStore`, with the same answers in a fraction of its memory: a key
 * costs one number in a table (IPv4 clients) or one entry of a `Map` from key to number (other
 * keys), with no object, `Date` or timer of its own.
 *
 * What it keeps, and why it is small (figures in BENCHMARKS.md):
 *
 * - Two generations of key to number, `current` and `previous`, swapped once per window as
 *   MemoryStore swaps its two maps: a key touched moves to `current`; `previous` is dropped whole
 *   when the next window begins, by then holding only keys whose windows are over. The swaps are a
 *   function of the clock (at `init()` time plus whole windows), done by whichever call comes
 *   first after one is due, or by one unref'd timer per store when nothing comes.
 * - The number is the key's hit count and the start of its window, packed: `count * M + offset`,
 *   where `offset` is the start in milliseconds after the generation's base (the start of the
 *   window before the generation's) and `M` the power of two above twice the window. For a
 *   60-second window and up to 16,383 hits that is below 2^31, which V8 keeps inline in the map
 *   (a Smi), not as a heap number.
 * - A key that is a canonical dotted-quad IPv4 address after `ipv4KeyPrefix` (`ip:203.0.113.7`)
 *   is kept as its 32-bit number, not as the string: the request's key string is not retained.
 *   Every other key (accounts, IPv6 networks, other shapes) stays a string. Only canonical text
 *   maps to a number and every number comes from one text, so distinct keys stay distinct.
 * - The numbers go to an `Ipv4Table` per generation (a typed array outside V8's heap, 11 to 21
 *   bytes a key) rather than the `Map`, when the packed number fits its 32-bit slots: windows
 *   shorter than 2^23 ms (about 2.3 hours; for a 60-second window, counts up to 32,766 in the
 *   slot and past that in `wide`). A swap clears the table of the generation dropped and reuses
 *   it for the new one, so a steady stream of new addresses costs no allocation once the tables
 *   are grown, and the collector's heap does not grow with the addresses.
 *
 * Same semantics as MemoryStore (test/unit/rate-limit/compact-memory-store.test.ts runs both on
 * random sequences): exact counts, each key's window starting at its first hit (or its first
 * decrement, which creates a key with no hits, as MemoryStore does), `resetTime` as a `Date`,
 * `decrement` never below zero, `resetKey`, `resetAll`, `get`. Differences: a second `init()`
 * forgets every count (MemoryStore keeps them across its restarted timer), and a clock that goes
 * back by more than a window starts new windows at the generation's base, a few milliseconds
 * later than MemoryStore would (never earlier).
 */

export interface CompactMemoryStoreOptions {
  /**
   * Keys made of this prefix and a canonical IPv4 address are kept as numbers. Defaults to `ip:`,
   * the kit's per-IP keys; `''` for keys that are bare addresses.
   */
  ipv4KeyPrefix?: string;
  now?: () => number;
  /**
   * Hit counts above this are kept exactly in a second map of their generation. Defaults to the
   * most the packed number holds exactly (2^36 - 1 for a 60-second window); tests lower it.
   */
  maxPackedCount?: number;
}

export type CompactKey = string | number;

/** A key's hits in its current window and when that window resets (ms since epoch). */
export interface CounterReading {
  count: number;
  resetAt: number;
}

interface Generation {
  /** Window starts are stored as milliseconds after this. */
  readonly base: number;
  readonly packed: Map<CompactKey, number>;
  /** IPv4 keys' packed numbers, when the window's packing fits the table's slots. */
  readonly ipv4: Ipv4Table | undefined;
  /** Exact counts of keys whose packed count reads `maxPackedCount`. Rarely used. */
  readonly wide: Map<CompactKey, number>;
}

interface Entry {
  count: number;
  start: number;
}

/** The most the packed number may hold: every integer up to it is exact in a double. */
const MAX_EXACT = 2 ** 53;
/** About 35 years, which leaves room for 2^11 - 1 hits in the packed number. */
const MAX_WINDOW_MS = 2 ** 40;
const MAX_TIMER_MS = 2 ** 31 - 1;
/** The largest multiplier with which the table's 32-bit slots still hold counts up to 254. */
const MAX_TABLE_SCALE = 2 ** 24;
/**
 * A reused table this many times larger than the last window needed is replaced by a smaller one,
 * so memory follows a stream of addresses that slows down, a window later.
 */
const SHRINK_FACTOR = 4;

export class CompactMemoryStore implements Store {
  readonly localKeys = true;
  private readonly ipv4KeyPrefix: string;
  private readonly now: () => number;
  private readonly maxPackedCountOption: number | undefined;
  private windowMs = 0;
  /** Multiplier of the count in the packed number: a power of two above twice the window. */
  private scale = 1;
  private maxPackedCount = 0;
  /** The count at which a table slot defers to `wide`; 0 when IPv4 keys use the `Map`. */
  private maxTableCount = 0;
  /** The time of `init()`: generations begin at `epoch + n * windowMs`. */
  private epoch = 0;
  /** The window number of `current`. */
  private generation = 0;
  private current: Generation = unusedGeneration();
  private previous: Generation = unusedGeneration();
  private interval: NodeJS.Timeout | undefined;
  /** A scratch entry, reused by every call (the store never awaits). */
  private readonly entry: Entry = { count: 0, start: 0 };

  constructor(options: CompactMemoryStoreOptions = {}) {
    this.ipv4KeyPrefix = options.ipv4KeyPrefix ?? 'ip:';
    this.now = options.now ?? (() => Date.now());
    this.maxPackedCountOption = options.maxPackedCount;
  }

  init(options: Pick<Options, 'windowMs'>): void {
    const windowMs = options.windowMs;
    if (!Number.isInteger(windowMs) || windowMs < 1 || windowMs > MAX_WINDOW_MS) {
      throw new RangeError(
        `CompactMemoryStore: windowMs must be a whole number from 1 to ${MAX_WINDOW_MS}, got ${windowMs}`,
      );
    }
    this.windowMs = windowMs;
    this.scale = 2 ** Math.ceil(Math.log2(2 * windowMs + 1));
    const exactMax = MAX_EXACT / this.scale - 1;
    const wanted = this.maxPackedCountOption ?? exactMax;
    if (!Number.isInteger(wanted) || wanted < 1 || wanted > exactMax) {
      throw new RangeError(`CompactMemoryStore: maxPackedCount must be from 1 to ${exactMax}`);
    }
    this.maxPackedCount = wanted;
    this.maxTableCount =
      this.scale <= MAX_TABLE_SCALE
        ? Math.min(wanted, Math.floor((MAX_VALUE - (this.scale - 1)) / this.scale))
        : 0;
    this.epoch = this.now();
    this.generation = 0;
    this.current = this.emptyGeneration(this.epoch - windowMs, undefined, 0);
    this.previous = this.emptyGeneration(this.epoch - 2 * windowMs, undefined, 0);
    if (this.interval !== undefined) clearInterval(this.interval);
    // Frees the keys of a window that is over when no call comes to do it. The swaps follow the
    // clock, so a timer that fires more often than once a window (the longest timer Node keeps is
    // about 24.8 days) or late changes nothing but when memory is freed.
    this.interval = setInterval(
      () => {
        this.rotate(this.now());
      },
      Math.min(windowMs, MAX_TIMER_MS),
    );
    this.interval.unref();
  }

  get(key: string): ClientRateLimitInfo | undefined {
    const now = this.now();
    this.rotate(now);
    const compact = this.compactKey(key);
    const entry = this.entry;
    if (!this.read(this.current, compact, entry) && !this.read(this.previous, compact, entry)) {
      return undefined;
    }
    if (entry.start + this.windowMs <= now) return undefined;
    return { totalHits: entry.count, resetTime: new Date(entry.start + this.windowMs) };
  }

  increment(key: string): IncrementResponse {
    const entry = this.entry;
    this.countHit(key, entry);
    return { totalHits: entry.count, resetTime: new Date(entry.start + this.windowMs) };
  }

  /**
   * The key's hits in its current window, counting nothing: `0`, resetting a window from now,
   * when it has none. Writes into `into`, so a caller on the hot path allocates nothing.
   */
  peek(key: string, into: CounterReading): void {
    const now = this.now();
    this.rotate(now);
    const compact = this.compactKey(key);
    const entry = this.entry;
    const found =
      this.read(this.current, compact, entry) || this.read(this.previous, compact, entry);
    if (!found || entry.start + this.windowMs <= now) {
      into.count = 0;
      into.resetAt = this.startAt(now) + this.windowMs;
      return;
    }
    into.count = entry.count;
    into.resetAt = entry.start + this.windowMs;
  }

  /** When the key's count is down to `keep` or fewer: now when it already is, else its reset. */
  freeAt(key: string, keep: number): number {
    const reading = { count: 0, resetAt: 0 };
    this.peek(key, reading);
    return reading.count > keep ? reading.resetAt : this.now();
  }

  /** Counts one hit, as `increment()`, and writes the count and reset after it into `into`. */
  hit(key: string, into: CounterReading): void {
    const entry = this.entry;
    this.countHit(key, entry);
    into.count = entry.count;
    into.resetAt = entry.start + this.windowMs;
  }

  private countHit(key: string, entry: Entry): void {
    const now = this.now();
    const compact = this.compactKey(key);
    this.touch(compact, now);
    if (entry.start + this.windowMs <= now) {
      entry.count = 0;
      entry.start = this.startAt(now);
    }
    entry.count += 1;
    this.write(this.current, compact, entry);
  }

  decrement(key: string): void {
    const now = this.now();
    const compact = this.compactKey(key);
    const entry = this.touch(compact, now);
    if (entry.count > 0) entry.count -= 1;
    this.write(this.current, compact, entry);
  }

  resetKey(key: string): void {
    const compact = this.compactKey(key);
    this.remove(this.current, compact);
    this.remove(this.previous, compact);
  }

  resetAll(): void {
    this.current = this.emptyGeneration(this.current.base, this.current.ipv4, 0);
    this.previous = this.emptyGeneration(this.previous.base, this.previous.ipv4, 0);
  }

  /** Stops the timer and lets every key and table go; `init()` starts the store again. */
  shutdown(): void {
    if (this.interval !== undefined) clearInterval(this.interval);
    this.interval = undefined;
    this.current = this.emptyGeneration(this.current.base, undefined, 0);
    this.previous = this.emptyGeneration(this.previous.base, undefined, 0);
  }

  /** Keys kept, for tests and diagnostics: those of both generations, expired or not. */
  get size(): number {
    return generationSize(this.current) + generationSize(this.previous);
  }

  /** Slots of the IPv4 tables of both generations, for tests and diagnostics. */
  get ipv4Capacity(): number {
    return (this.current.ipv4?.capacity ?? 0) + (this.previous.ipv4?.capacity ?? 0);
  }

  /**
   * MemoryStore's `getClient()`: the key's entry, moved to `current` if it was in `previous`, or
   * created with no hits and a window starting now. Read into the scratch entry, not yet written.
   */
  private touch(compact: CompactKey, now: number): Entry {
    this.rotate(now);
    const entry = this.entry;
    if (this.read(this.current, compact, entry)) return entry;
    if (this.read(this.previous, compact, entry)) {
      this.remove(this.previous, compact);
      // A window that is over can be stored at `current`'s base: over for good, and its count is
      // never read again (the next increment starts a new window). A live one starts after that
      // base unless the clock went back, when it is moved to the base: a later reset, never earlier.
      if (entry.start + this.windowMs <= now) {
        entry.count = 0;
        entry.start = this.current.base;
      } else if (entry.start < this.current.base) {
        entry.start = this.current.base;
      }
      return entry;
    }
    entry.count = 0;
    entry.start = this.startAt(now);
    return entry;
  }

  /** A window starting `now`; no earlier than the generation's base if the clock went back. */
  private startAt(now: number): number {
    return Math.max(now, this.current.base);
  }

  private read(generation: Generation, compact: CompactKey, entry: Entry): boolean {
    let packed: number | undefined;
    let maxCount: number;
    if (typeof compact === 'number' && generation.ipv4 !== undefined) {
      packed = generation.ipv4.get(compact);
      if (packed < 0) return false;
      maxCount = this.maxTableCount;
    } else {
      packed = generation.packed.get(compact);
      if (packed === undefined) return false;
      maxCount = this.maxPackedCount;
    }
    const offset = packed % this.scale;
    const count = (packed - offset) / this.scale;
    entry.start = generation.base + offset;
    entry.count = count === maxCount ? (generation.wide.get(compact) ?? count) : count;
    return true;
  }

  private write(generation: Generation, compact: CompactKey, entry: Entry): void {
    const offset = entry.start - generation.base;
    const inTable = typeof compact === 'number' && generation.ipv4 !== undefined;
    const maxCount = inTable ? this.maxTableCount : this.maxPackedCount;
    const count = Math.min(entry.count, maxCount);
    const packed = count * this.scale + offset;
    if (inTable) generation.ipv4.set(compact, packed);
    else generation.packed.set(compact, packed);
    if (count === maxCount) generation.wide.set(compact, entry.count);
    else if (generation.wide.size > 0) generation.wide.delete(compact);
  }

  private remove(generation: Generation, compact: CompactKey): void {
    const removed =
      typeof compact === 'number' && generation.ipv4 !== undefined
        ? generation.ipv4.delete(compact)
        : generation.packed.delete(compact);
    if (removed && generation.wide.size > 0) generation.wide.delete(compact);
  }

  /**
   * A generation with no keys, reusing `table` (cleared) when there is one and it is no more than
   * `SHRINK_FACTOR` times what `keysLastWindow` keys need.
   */
  private emptyGeneration(
    base: number,
    table: Ipv4Table | undefined,
    keysLastWindow: number,
  ): Generation {
    let ipv4: Ipv4Table | undefined;
    if (this.maxTableCount > 0) {
      const needed = capacityFor(keysLastWindow);
      if (table === undefined || table.capacity > SHRINK_FACTOR * needed) {
        ipv4 = Ipv4Table.sizedFor(keysLastWindow);
      } else {
        table.clear();
        ipv4 = table;
      }
    }
    return { base, packed: new Map(), wide: new Map(), ipv4 };
  }

  /** Swaps generations as MemoryStore's timer would have by `now`: once per window gone by. */
  private rotate(now: number): void {
    if (this.windowMs === 0) throw new Error('CompactMemoryStore: init() was not called');
    const due = Math.floor((now - this.epoch) / this.windowMs);
    if (due <= this.generation) return;
    const base = this.epoch + (due - 1) * this.windowMs;
    const dropped = this.previous;
    const ended = this.current;
    const lastWindowKeys = ended.ipv4?.size ?? 0;
    if (due === this.generation + 1) {
      this.previous = ended;
    } else {
      // Two windows or more went by with no call. `previous` is only read and deleted from, so
      // its table needs no room.
      this.previous = this.emptyGeneration(base - this.windowMs, ended.ipv4, 0);
    }
    this.current = this.emptyGeneration(base, dropped.ipv4, lastWindowKeys);
    this.generation = due;
  }

  private compactKey(key: string): CompactKey {
    return compactKey(key, this.ipv4KeyPrefix);
  }
}

/**
 * `key` as a map key that retains little: the 32-bit number of its canonical IPv4 address when it
 * is `ipv4KeyPrefix` and one, else `key` itself. Distinct keys stay distinct.
 */
export function compactKey(key: string, ipv4KeyPrefix: string): CompactKey {
  if (ipv4KeyPrefix.length > 0 && !key.startsWith(ipv4KeyPrefix)) return key;
  return ipv4Number(key, ipv4KeyPrefix.length) ?? key;
}

function unusedGeneration(): Generation {
  return { base: 0, packed: new Map(), wide: new Map(), ipv4: undefined };
}

function generationSize(generation: Generation): number {
  return generation.packed.size + (generation.ipv4?.size ?? 0);
}

/**
 * The canonical dotted-quad IPv4 address in `text` from `from` to its end, as a signed 32-bit
 * number (a Smi for V8); `undefined` for anything else, leading zeros and empty parts included.
 */
export function ipv4Number(text: string, from = 0): number | undefined {
  const end = text.length;
  if (end - from < 7 || end - from > 15) return undefined;
  let value = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = from; i < end; i++) {
    const code = text.charCodeAt(i);
    if (code === 46) {
      if (digits === 0 || dots === 3) return undefined;
      value = (value << 8) | octet;
      octet = 0;
      digits = 0;
      dots += 1;
    } else if (code >= 48 && code <= 57) {
      if (digits > 0 && octet === 0) return undefined;
      octet = octet * 10 + (code - 48);
      digits += 1;
      if (octet > 255) return undefined;
    } else {
      return undefined;
    }
  }
  if (digits === 0 || dots !== 3) return undefined;
  return (value << 8) | octet;
}
