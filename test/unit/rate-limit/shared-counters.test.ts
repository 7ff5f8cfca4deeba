import fc from 'fast-check';
import { ConfigurationError } from '../../../lib/errors';
import {
  CompactMemoryStore,
  type CounterReading,
} from '../../../lib/rate-limit/compact-memory-store';
import { type LocalWindows, RollingWindows } from '../../../lib/rate-limit/rolling-windows';
import {
  createSharedCountersBuffer,
  SharedCounters,
  SharedCountersFullError,
} from '../../../lib/rate-limit/shared-counters';

/**
 * The counters in shared memory answer as the single-thread windows they stand for, on random
 * sequences of every operation over several keys and two scopes (rolling and fixed) with a clock
 * the test moves; they reuse the memory of keys and times that left; and when the keys or the
 * times run out, the key admitted longest ago goes, and a key that alone holds every time is
 * refused with a clear error.
 */

const WINDOW_MS = 1000;
const T0 = 1_700_000_000_000;
const KEYS = ['account:{acct_1}', 'account:{acct_2}', 'ip:203.0.113.7', 'ip:2001:db8::/56', 'k'];

type Op =
  | { kind: 'hit' | 'peek' | 'decrement' | 'reset'; key: number; advance: number }
  | { kind: 'freeAt'; key: number; keep: number; advance: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constantFrom('hit' as const, 'hit' as const, 'peek' as const),
    key: fc.integer({ min: 0, max: KEYS.length - 1 }),
    advance: fc.integer({ min: 0, max: 120 }),
  }),
  fc.record({
    kind: fc.constantFrom('decrement' as const, 'reset' as const),
    key: fc.integer({ min: 0, max: KEYS.length - 1 }),
    advance: fc.integer({ min: 0, max: 120 }),
  }),
  fc.record({
    kind: fc.constant('freeAt' as const),
    key: fc.integer({ min: 0, max: KEYS.length - 1 }),
    keep: fc.integer({ min: -1, max: 12 }),
    advance: fc.integer({ min: 0, max: 120 }),
  }),
);

/** Runs `ops` on both, comparing every answer; `now` is moved by each op's advance. */
function expectSameAnswers(
  shared: LocalWindows,
  reference: LocalWindows,
  ops: readonly Op[],
  clock: { now: number },
): void {
  const got: CounterReading = { count: 0, resetAt: 0 };
  const want: CounterReading = { count: 0, resetAt: 0 };
  ops.forEach((next, step) => {
    clock.now += next.advance;
    const key = KEYS[next.key] ?? 'k';
    const where = `step ${step}: ${next.kind} ${key} at +${clock.now - T0}`;
    switch (next.kind) {
      case 'hit':
        shared.hit(key, got);
        reference.hit(key, want);
        expect({ where, ...got }).toEqual({ where, ...want });
        return;
      case 'peek':
        shared.peek(key, got);
        reference.peek(key, want);
        expect({ where, ...got }).toEqual({ where, ...want });
        return;
      case 'freeAt':
        expect({ where, at: shared.freeAt(key, next.keep) }).toEqual({
          where,
          at: reference.freeAt(key, next.keep),
        });
        return;
      case 'decrement':
        shared.decrement(key);
        reference.decrement(key);
        return;
      case 'reset':
        shared.resetKey(key);
        reference.resetKey(key);
        return;
    }
  });
}

function counters(options: { maxKeys?: number; maxTimes?: number } = {}): SharedCounters {
  return new SharedCounters(createSharedCountersBuffer(options));
}

describe('SharedCounters', () => {
  it('answers as RollingWindows on random sequences', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const clock = { now: T0 };
        const now = (): number => clock.now;
        const shared = counters({ maxKeys: 64, maxTimes: 4096 }).windows(
          { prefix: 'p:', windowMs: WINDOW_MS, rolling: true },
          now,
        );
        expectSameAnswers(shared, new RollingWindows({ windowMs: WINDOW_MS, now }), ops, clock);
      }),
      { numRuns: 300 },
    );
  });

  it('answers as the fixed windows of CompactMemoryStore on random sequences', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const clock = { now: T0 };
        const now = (): number => clock.now;
        const shared = counters({ maxKeys: 64, maxTimes: 64 }).windows(
          { prefix: 'p:', windowMs: WINDOW_MS, rolling: false },
          now,
        );
        const reference = new CompactMemoryStore({ now });
        reference.init({ windowMs: WINDOW_MS });
        try {
          expectSameAnswers(shared, reference, ops, clock);
        } finally {
          reference.shutdown();
        }
      }),
      { numRuns: 300 },
    );
  });

  it('keeps a rolling key past many chunks, and frees them as its times leave', () => {
    const clock = { now: T0 };
    const table = counters({ maxKeys: 4, maxTimes: 64 });
    const windows = table.windows(
      { prefix: 'p:', windowMs: WINDOW_MS, rolling: true },
      () => clock.now,
    );
    const reading: CounterReading = { count: 0, resetAt: 0 };
    // 64 times fill the four chunks; each time is a millisecond after the last.
    for (let i = 0; i < 64; i++, clock.now++) windows.hit('a', reading);
    expect(reading).toEqual({ count: 64, resetAt: T0 + WINDOW_MS });
    expect(windows.freeAt('a', 10)).toBe(T0 + 53 + WINDOW_MS);
    // Half have left: their two chunks are free for another key.
    clock.now = T0 + WINDOW_MS + 31;
    windows.peek('a', reading);
    expect(reading).toEqual({ count: 32, resetAt: T0 + 32 + WINDOW_MS });
    for (let i = 0; i < 32; i++) windows.hit('b', reading);
    expect(reading.count).toBe(32);
    windows.peek('a', reading);
    expect(reading.count).toBe(32);
  });

  it('forgets the key admitted longest ago when the keys run out', () => {
    const clock = { now: T0 };
    const table = counters({ maxKeys: 2, maxTimes: 64 });
    const windows = table.windows(
      { prefix: 'p:', windowMs: WINDOW_MS, rolling: true },
      () => clock.now,
    );
    const reading: CounterReading = { count: 0, resetAt: 0 };
    windows.hit('a', reading);
    clock.now += 1;
    windows.hit('b', reading);
    clock.now += 1;
    windows.hit('a', reading);
    clock.now += 1;
    windows.hit('c', reading);
    expect(table.size).toBe(2);
    windows.peek('b', reading);
    expect(reading.count).toBe(0);
    windows.peek('a', reading);
    expect(reading.count).toBe(2);
  });

  it('forgets keys whose window is over before any other, whatever their scope', () => {
    const clock = { now: T0 };
    const table = counters({ maxKeys: 2, maxTimes: 64 });
    const short = table.windows(
      { prefix: 's:', windowMs: WINDOW_MS, rolling: true },
      () => clock.now,
    );
    const long = table.windows(
      { prefix: 'l:', windowMs: 10 * WINDOW_MS, rolling: false },
      () => clock.now,
    );
    const reading: CounterReading = { count: 0, resetAt: 0 };
    // 'a' is the key admitted longest ago: only 'b' having left its window makes 'b' go first.
    long.hit('a', reading);
    clock.now += 1;
    short.hit('b', reading);
    clock.now += WINDOW_MS;
    short.hit('c', reading);
    long.peek('a', reading);
    expect(reading).toEqual({ count: 1, resetAt: T0 + 10 * WINDOW_MS });
  });

  it('refuses a time when one key alone holds every time, and takes it once they leave', () => {
    const clock = { now: T0 };
    const table = counters({ maxKeys: 4, maxTimes: 32 });
    const windows = table.windows(
      { prefix: 'p:', windowMs: WINDOW_MS, rolling: true },
      () => clock.now,
    );
    const reading: CounterReading = { count: 0, resetAt: 0 };
    for (let i = 0; i < 32; i++) windows.hit('a', reading);
    expect(() => {
      windows.hit('a', reading);
    }).toThrow(SharedCountersFullError);
    windows.peek('a', reading);
    expect(reading.count).toBe(32);
    clock.now += WINDOW_MS;
    windows.hit('a', reading);
    expect(reading.count).toBe(1);
  });

  it('shares a scope between views named alike, and keeps other scopes apart', () => {
    const buffer = createSharedCountersBuffer({ maxKeys: 16, maxTimes: 64 });
    const scope = { prefix: 'p:', windowMs: WINDOW_MS, rolling: true };
    const one = new SharedCounters(buffer).windows(scope);
    const two = new SharedCounters(buffer).windows(scope);
    const longer = new SharedCounters(buffer).windows({ ...scope, windowMs: 2 * WINDOW_MS });
    const reading: CounterReading = { count: 0, resetAt: 0 };
    one.hit('account:{acct_1}', reading);
    two.hit('account:{acct_1}', reading);
    expect(reading.count).toBe(2);
    longer.hit('account:{acct_1}', reading);
    expect(reading.count).toBe(1);
  });

  it('keeps keys that hash alike apart, long ones and others by their digest', () => {
    const table = counters({ maxKeys: 1, maxTimes: 64 });
    const windows = table.windows({ prefix: 'p:', windowMs: WINDOW_MS, rolling: false });
    const reading: CounterReading = { count: 0, resetAt: 0 };
    const long = 'account:{'.padEnd(60, 'x');
    windows.hit(long, reading);
    windows.hit(long, reading);
    expect(reading.count).toBe(2);
    // One key at most: another key takes its place rather than its count.
    windows.hit(`${long}y`, reading);
    expect(reading.count).toBe(1);
    windows.hit('ключ', reading);
    expect(reading.count).toBe(1);
  });

  it('refuses a buffer it did not make, and bounds it is not made for', () => {
    expect(() => new SharedCounters(new SharedArrayBuffer(64))).toThrow(ConfigurationError);
    expect(() => createSharedCountersBuffer({ maxKeys: 0 })).toThrow(ConfigurationError);
    expect(() => createSharedCountersBuffer({ maxKeys: 2 ** 26, maxTimes: 2 ** 28 })).toThrow(
      /more than 4294967296: lower maxKeys or maxTimes/,
    );
  });
});
