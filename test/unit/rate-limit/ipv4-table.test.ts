import fc from 'fast-check';
import { Ipv4Table, MAX_VALUE, capacityFor } from '../../../lib/rate-limit/ipv4-table';

/**
 * Ipv4Table against a `Map` as the oracle: random sequences of set, delete and get on keys chosen
 * to share home slots and to wrap around the end of a small table give the same answers, and the
 * table's entries are the map's after every step.
 */

type Op =
  | { readonly kind: 'set'; readonly key: number; readonly value: number }
  | { readonly kind: 'delete' | 'get'; readonly key: number }
  | { readonly kind: 'clear' };

/** The multiplier the tests give their tables (Knuth's), so that they can aim keys at slots. */
const KNUTH = 0x9e3779b9;

/** The home slot of `key` in a table of `2^bits` slots with the tests' multiplier. */
function homeOf(key: number, bits: number): number {
  return Math.imul(key, KNUTH) >>> (32 - bits);
}

/** The first `count` keys from 0 up whose home, in a table of 2^bits slots, is one of `homes`. */
function keysAt(count: number, bits: number, homes: readonly number[]): number[] {
  const keys: number[] = [];
  for (let k = 0; keys.length < count; k++) if (homes.includes(homeOf(k, bits))) keys.push(k);
  return keys;
}

/**
 * Key sets, one per sequence: where deletion must shift entries back, and where it must not.
 * - Crowded: homes in one eighth of every table (the fourth, or the last, whose runs wrap past
 *   the end), so runs are long.
 * - Neighbours: a few keys on each of two or three neighbouring home slots of the smallest table,
 *   so that runs are short and a deleted key's slot is often the next entry's home.
 * - Anywhere: small numbers, the ends of the signed range, any 32-bit number.
 */
const KEY_SETS: readonly fc.Arbitrary<number>[] = [
  fc.constantFrom(...keysAt(40, 3, [3]), ...keysAt(40, 3, [7])),
  fc.constantFrom(...keysAt(6, 4, [3, 4])),
  fc.constantFrom(...keysAt(6, 4, [14, 15, 0])),
  fc.oneof(
    fc.integer({ min: -8, max: 40 }),
    fc.constantFrom(0, -1, 2 ** 31 - 1, -(2 ** 31), 0x0a000001, 0x7f000001 | 0),
    fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
  ),
];

const value = fc.oneof(fc.integer({ min: 0, max: 1000 }), fc.constantFrom(0, MAX_VALUE));

function sequenceOf(key: fc.Arbitrary<number>): fc.Arbitrary<Op[]> {
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 10, arbitrary: fc.record({ kind: fc.constant('set' as const), key, value }) },
    { weight: 5, arbitrary: fc.record({ kind: fc.constant('delete' as const), key }) },
    { weight: 5, arbitrary: fc.record({ kind: fc.constant('get' as const), key }) },
    { weight: 1, arbitrary: fc.constant({ kind: 'clear' as const }) },
  );
  // `size: 'max'`: else fast-check keeps arrays to about ten operations, whatever maxLength says.
  return fc.array(op, { minLength: 1, maxLength: 300, size: 'max' });
}

function sorted(entries: Iterable<[number, number]>): [number, number][] {
  return [...entries].sort((a, b) => a[0] - b[0]);
}

describe('Ipv4Table', () => {
  it('answers as a Map does on random sequences, keeping every key reachable', () => {
    fc.assert(
      fc.property(fc.oneof(...KEY_SETS.map(sequenceOf)), (sequence) => {
        const table = new Ipv4Table(16, KNUTH);
        const oracle = new Map<number, number>();
        for (const step of sequence) {
          switch (step.kind) {
            case 'set':
              table.set(step.key, step.value);
              oracle.set(step.key, step.value);
              break;
            case 'delete':
              expect(table.delete(step.key)).toBe(oracle.delete(step.key));
              break;
            case 'get':
              expect(table.get(step.key)).toBe(oracle.get(step.key) ?? -1);
              break;
            case 'clear':
              table.clear();
              oracle.clear();
              break;
          }
          expect(table.size).toBe(oracle.size);
          expect(table.capacity).toBeGreaterThanOrEqual((table.size * 4) / 3);
        }
        expect(sorted(table.entries())).toEqual(sorted(oracle));
        for (const [k, v] of oracle) expect(table.get(k)).toBe(v);
      }),
      { numRuns: 1000 },
    );
  });

  it('deletes from the middle of long runs that wrap past the last slot', () => {
    const table = new Ipv4Table(16, KNUTH);
    // Keys whose home is one of the last slots: their runs wrap to the first slots.
    const keys = keysAt(12, 4, [14, 15]);
    keys.forEach((k, i) => {
      table.set(k, i);
    });
    expect(table.capacity).toBe(16);
    for (const k of keys.filter((_, i) => i % 3 === 1)) expect(table.delete(k)).toBe(true);
    keys.forEach((k, i) => {
      expect(table.get(k)).toBe(i % 3 === 1 ? -1 : i);
    });
    expect(table.size).toBe(8);
  });

  it('grows by doubling at three quarters full and keeps its array on clear()', () => {
    const table = new Ipv4Table();
    for (let k = 0; k < 12; k++) table.set(k, k);
    expect(table.capacity).toBe(16);
    table.set(12, 12);
    expect(table.capacity).toBe(32);
    table.clear();
    expect(table.size).toBe(0);
    expect(table.capacity).toBe(32);
    expect(table.get(3)).toBe(-1);
    expect(Ipv4Table.sizedFor(1_000_000).capacity).toBe(2 ** 21);
    expect(capacityFor(12)).toBe(16);
    expect(capacityFor(13)).toBe(32);
  });

  it('hashes with a multiplier of its own: keys aimed at one run under a known one spread out', () => {
    // Forty keys whose home, under Knuth's multiplier, is one of 8 slots of 64.
    const aimed = keysAt(40, 3, [5]);
    const orders = Array.from({ length: 2 }, () => {
      const table = new Ipv4Table(64);
      aimed.forEach((k, i) => {
        table.set(k, i);
      });
      aimed.forEach((k, i) => {
        expect(table.get(k)).toBe(i);
      });
      return [...table.entries()].map(([k]) => k);
    });
    // Two tables drew different multipliers, so their slots hold the keys in different orders.
    expect(orders[0]).not.toEqual(orders[1]);
  });

  it('refuses values and capacities it cannot keep', () => {
    const table = new Ipv4Table();
    expect(() => {
      table.set(1, MAX_VALUE + 1);
    }).toThrow(RangeError);
    expect(() => {
      table.set(1, -1);
    }).toThrow(RangeError);
    expect(() => {
      table.set(1, 1.5);
    }).toThrow(RangeError);
    expect(() => new Ipv4Table(24)).toThrow(RangeError);
    expect(() => new Ipv4Table(8)).toThrow(RangeError);
    expect(() => new Ipv4Table(16, 2)).toThrow(RangeError);
    expect(() => new Ipv4Table(16, 2 ** 32 + 1)).toThrow(RangeError);
    expect(table.size).toBe(0);
  });
});
