import { randomInt } from 'node:crypto';

/**
 * A hash table from 32-bit keys (IPv4 addresses as numbers) to values from 0 to `MAX_VALUE`, kept
 * in one `Uint32Array` outside V8's heap: 8 bytes a slot, at most 3/4 of the slots used, so 11 to
 * 21 bytes a key. `CompactMemoryStore` keeps its per-IP counters here rather than in a `Map`:
 *
 * - the collector neither marks nor moves it, and it does not count in the live heap that V8
 *   grows its next collection's limit from, so a million addresses in a window do not raise the
 *   heap's sawtooth as a `Map` of them does;
 * - `clear()` keeps the array, so a store can reuse a generation's table for the next window
 *   instead of growing a new one from empty through every doubling.
 *
 * Open addressing with linear probing; deletion shifts the following entries back (no
 * tombstones), so a table never fills with dead slots. Slot `i` is `key` at `2i` and `value + 1`
 * at `2i + 1`, where 0 marks an empty slot.
 *
 * The home slot is multiply-shift hashing (the top bits of `key * a mod 2^32`) with `a` a random
 * odd multiplier drawn for each table: a universal family, so that clients who pick their
 * addresses (from ranges they hold) cannot aim them at one run of slots and make every lookup
 * walk it, as they could with a fixed multiplier such as Knuth's.
 */

/** The largest value a slot holds (its stored form, `value + 1`, is a 32-bit number). */
export const MAX_VALUE = 2 ** 32 - 2;

const MIN_CAPACITY = 16;
/** Slots in use may reach `capacity * LOAD_NUMERATOR / LOAD_DENOMINATOR`. */
const LOAD_NUMERATOR = 3;
const LOAD_DENOMINATOR = 4;
/** The most slots a table takes: 2^30 (8 GiB), past any count of IPv4 keys one window holds. */
const MAX_CAPACITY = 2 ** 30;

export class Ipv4Table {
  private slots: Uint32Array;
  /** `capacity - 1`; the capacity is a power of two. */
  private mask: number;
  /** `32 - log2(capacity)`: the hash's top bits pick the home slot. */
  private shift: number;
  private count = 0;

  /** A table that holds `keys` keys without growing. */
  static sizedFor(keys: number): Ipv4Table {
    return new Ipv4Table(capacityFor(keys));
  }

  /**
   * @param multiplier The hash's odd multiplier; random unless given (tests give one to build
   *   keys that share home slots).
   */
  constructor(
    capacity = MIN_CAPACITY,
    private readonly multiplier = randomMultiplier(),
  ) {
    if (!isPowerOfTwo(capacity) || capacity < MIN_CAPACITY || capacity > MAX_CAPACITY) {
      throw new RangeError(
        `Ipv4Table: capacity must be a power of two from ${MIN_CAPACITY} to ${MAX_CAPACITY}`,
      );
    }
    if (
      !Number.isInteger(multiplier) ||
      multiplier % 2 === 0 ||
      multiplier < 1 ||
      multiplier >= 2 ** 32
    ) {
      throw new RangeError('Ipv4Table: the multiplier must be an odd 32-bit number');
    }
    this.slots = new Uint32Array(2 * capacity);
    this.mask = capacity - 1;
    this.shift = 32 - Math.log2(capacity);
  }

  get size(): number {
    return this.count;
  }

  get capacity(): number {
    return this.mask + 1;
  }

  /** The key's value, or -1 when the key is absent. `key` is read as a 32-bit number. */
  get(key: number): number {
    const slot = this.find(key >>> 0);
    return slot < 0 ? -1 : (this.slots[2 * slot + 1] ?? 0) - 1;
  }

  /** Sets the key's value, an integer from 0 to `MAX_VALUE`. */
  set(key: number, value: number): void {
    if (!Number.isInteger(value) || value < 0 || value > MAX_VALUE) {
      throw new RangeError(`Ipv4Table: a value must be an integer from 0 to ${MAX_VALUE}`);
    }
    const unsigned = key >>> 0;
    let slot = this.find(unsigned);
    if (slot < 0) {
      if ((this.count + 1) * LOAD_DENOMINATOR > this.capacity * LOAD_NUMERATOR) {
        this.resize(2 * this.capacity);
      }
      slot = this.emptySlotFor(unsigned);
      this.slots[2 * slot] = unsigned;
      this.count += 1;
    }
    this.slots[2 * slot + 1] = value + 1;
  }

  /** Removes the key; `true` when it was there. */
  delete(key: number): boolean {
    let hole = this.find(key >>> 0);
    if (hole < 0) return false;
    const slots = this.slots;
    const mask = this.mask;
    // Backward-shift deletion: each following entry of the run moves into the hole unless its
    // home slot lies after the hole, within the run (cyclically in (hole, next]).
    let next = hole;
    for (;;) {
      next = (next + 1) & mask;
      if (slots[2 * next + 1] === 0) break;
      const home = this.home(slots[2 * next] ?? 0);
      const stays = hole <= next ? home > hole && home <= next : home > hole || home <= next;
      if (stays) continue;
      slots[2 * hole] = slots[2 * next] ?? 0;
      slots[2 * hole + 1] = slots[2 * next + 1] ?? 0;
      hole = next;
    }
    slots[2 * hole] = 0;
    slots[2 * hole + 1] = 0;
    this.count -= 1;
    return true;
  }

  /** Empties the table and keeps its array. */
  clear(): void {
    if (this.count === 0) return;
    this.slots.fill(0);
    this.count = 0;
  }

  /** Every key and its value, in slot order. For tests and diagnostics. */
  *entries(): IterableIterator<[key: number, value: number]> {
    for (let slot = 0; slot <= this.mask; slot++) {
      const stored = this.slots[2 * slot + 1] ?? 0;
      if (stored !== 0) yield [(this.slots[2 * slot] ?? 0) | 0, stored - 1];
    }
  }

  private home(unsigned: number): number {
    return Math.imul(unsigned, this.multiplier) >>> this.shift;
  }

  /** The key's slot, or -1. */
  private find(unsigned: number): number {
    const slots = this.slots;
    const mask = this.mask;
    let slot = this.home(unsigned);
    for (;;) {
      if (slots[2 * slot + 1] === 0) return -1;
      if (slots[2 * slot] === unsigned) return slot;
      slot = (slot + 1) & mask;
    }
  }

  /** The first empty slot of the key's run; the table has one (it is at most 3/4 full). */
  private emptySlotFor(unsigned: number): number {
    const slots = this.slots;
    const mask = this.mask;
    let slot = this.home(unsigned);
    while (slots[2 * slot + 1] !== 0) slot = (slot + 1) & mask;
    return slot;
  }

  private resize(capacity: number): void {
    if (capacity > MAX_CAPACITY) throw new RangeError('Ipv4Table: too many keys');
    const old = this.slots;
    this.slots = new Uint32Array(2 * capacity);
    this.mask = capacity - 1;
    this.shift = 32 - Math.log2(capacity);
    for (let index = 1; index < old.length; index += 2) {
      if (old[index] === 0) continue;
      const unsigned = old[index - 1] ?? 0;
      const slot = this.emptySlotFor(unsigned);
      this.slots[2 * slot] = unsigned;
      this.slots[2 * slot + 1] = old[index] ?? 0;
    }
  }
}

/** The capacity of a table for `keys` keys: a power of two, at most 3/4 used. */
export function capacityFor(keys: number): number {
  let capacity = MIN_CAPACITY;
  while (keys * LOAD_DENOMINATOR > capacity * LOAD_NUMERATOR && capacity < MAX_CAPACITY) {
    capacity *= 2;
  }
  return capacity;
}

/** An odd number from 1 to 2^32 - 1, from the operating system's random source. */
function randomMultiplier(): number {
  return randomInt(0, 2 ** 31) * 2 + 1;
}

function isPowerOfTwo(n: number): boolean {
  return Number.isInteger(n) && n > 0 && (n & (n - 1)) === 0;
}
