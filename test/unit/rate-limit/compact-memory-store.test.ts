import fc from 'fast-check';
import { type ClientRateLimitInfo, MemoryStore, type Options } from 'express-rate-limit';
import {
  CompactMemoryStore,
  type CompactMemoryStoreOptions,
  ipv4Number,
} from '../../../lib/rate-limit/compact-memory-store';

/**
 * CompactMemoryStore against express-rate-limit's own MemoryStore as the oracle: the same random
 * sequences of increment, decrement, resetKey, resetAll and get, with the clock (Date.now and
 * MemoryStore's interval, jest's fake timers) moved between calls, give the same answers.
 */

const START = Date.UTC(2026, 10, 24, 12, 0, 0, 7);
const RUNS = 300;

type Op =
  | { readonly kind: 'increment' | 'decrement' | 'resetKey' | 'get'; readonly key: string }
  | { readonly kind: 'resetAll' }
  | { readonly kind: 'advance'; readonly ms: number };

/** Per-IP keys (numbers inside the store), their look-alikes, and keys that stay strings. */
const KEYS = [
  'ip:10.0.0.1',
  'ip:10.0.0.2',
  'ip:0.0.0.0',
  'ip:255.255.255.255',
  'ip:128.0.0.1',
  'ip:010.0.0.1',
  'ip:10.0.0.1 ',
  'ip:2001:db8:1200::/56',
  '10.0.0.1',
  'account:acct_1',
  'account:10.0.0.1',
  '',
];

/** Enough IPv4 clients that the store's tables grow, are reused and shrink. */
const MANY_IPV4_KEYS = Array.from({ length: 300 }, (_, n) => `ip:10.0.${n >> 8}.${n & 255}`);

function ops(
  windowMs: number,
  keys: readonly string[] = KEYS,
  maxLength = 120,
): fc.Arbitrary<Op[]> {
  const key = fc.constantFrom(...keys);
  const advance = fc.oneof(
    fc.integer({ min: 0, max: Math.ceil(windowMs / 4) }),
    fc.constantFrom(1, windowMs - 1, windowMs, windowMs + 1, 2 * windowMs, 3 * windowMs + 5),
    fc.integer({ min: 0, max: 3 * windowMs }),
  );
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 30, arbitrary: key.map((k) => ({ kind: 'increment' as const, key: k })) },
    { weight: 10, arbitrary: key.map((k) => ({ kind: 'decrement' as const, key: k })) },
    { weight: 5, arbitrary: key.map((k) => ({ kind: 'resetKey' as const, key: k })) },
    { weight: 10, arbitrary: key.map((k) => ({ kind: 'get' as const, key: k })) },
    { weight: 15, arbitrary: advance.map((ms) => ({ kind: 'advance' as const, ms })) },
    { weight: 1, arbitrary: fc.constant({ kind: 'resetAll' as const }) },
  );
  // `size: 'max'`: else fast-check keeps arrays to about ten operations, whatever maxLength says.
  return fc.array(op, { minLength: 1, maxLength, size: 'max' });
}

type Answer = readonly [hits: number, reset: number] | undefined;

function answer(info: ClientRateLimitInfo | undefined): Answer {
  if (info === undefined) return undefined;
  if (!(info.resetTime instanceof Date)) throw new Error('resetTime is not a Date');
  return [info.totalHits, info.resetTime.getTime()];
}

/** Runs `sequence` on both stores; returns both transcripts. */
async function replay(
  sequence: readonly Op[],
  windowMs: number,
  options: CompactMemoryStoreOptions = {},
): Promise<{ oracle: Answer[]; compact: Answer[] }> {
  jest.useFakeTimers({ now: START });
  const oracle = new MemoryStore();
  const compact = new CompactMemoryStore(options);
  try {
    oracle.init({ windowMs } as Options);
    compact.init({ windowMs });
    const transcripts = { oracle: [] as Answer[], compact: [] as Answer[] };
    for (const op of sequence) {
      switch (op.kind) {
        case 'advance':
          jest.advanceTimersByTime(op.ms);
          break;
        case 'increment':
          transcripts.oracle.push(answer(await oracle.increment(op.key)));
          transcripts.compact.push(answer(compact.increment(op.key)));
          break;
        case 'get':
          transcripts.oracle.push(answer(await oracle.get(op.key)));
          transcripts.compact.push(answer(compact.get(op.key)));
          break;
        case 'decrement':
          await oracle.decrement(op.key);
          compact.decrement(op.key);
          break;
        case 'resetKey':
          await oracle.resetKey(op.key);
          compact.resetKey(op.key);
          break;
        case 'resetAll':
          await oracle.resetAll();
          compact.resetAll();
          break;
      }
    }
    return transcripts;
  } finally {
    oracle.shutdown();
    compact.shutdown();
    jest.useRealTimers();
  }
}

describe('CompactMemoryStore against MemoryStore', () => {
  afterEach(() => {
    jest.useRealTimers();
  });

  it.each([
    ['a 60-second window', 60_000, {}],
    ['a 1-second window', 1000, {}],
    ['a 7-millisecond window', 7, {}],
    ['the longest window (2^31 - 1 ms)', 2 ** 31 - 1, {}],
    ['bare addresses as the IPv4 keys', 1000, { ipv4KeyPrefix: '' }],
    ['counts past 2 kept in the wide map', 1000, { maxPackedCount: 2 }],
  ])(
    'answers as MemoryStore does on random sequences: %s',
    async (_name, windowMs, options: CompactMemoryStoreOptions) => {
      await fc.assert(
        fc.asyncProperty(ops(windowMs), async (sequence) => {
          const { oracle, compact } = await replay(sequence, windowMs, options);
          expect(compact).toEqual(oracle);
        }),
        { numRuns: RUNS },
      );
    },
  );

  it('answers as MemoryStore does on random sequences: many IPv4 clients', async () => {
    await fc.assert(
      fc.asyncProperty(ops(1000, [...MANY_IPV4_KEYS, ...KEYS], 600), async (sequence) => {
        const { oracle, compact } = await replay(sequence, 1000);
        expect(compact).toEqual(oracle);
      }),
      { numRuns: 100 },
    );
  });

  it('answers as MemoryStore does for one key counted far past the limit', async () => {
    // Past 32,766, the most a table slot keeps for a 60-second window.
    const sequence: Op[] = [
      ...Array.from({ length: 40_000 }, () => ({ kind: 'increment' as const, key: 'ip:10.0.0.1' })),
      { kind: 'decrement', key: 'ip:10.0.0.1' },
      { kind: 'get', key: 'ip:10.0.0.1' },
      { kind: 'advance', ms: 59_999 },
      { kind: 'increment', key: 'ip:10.0.0.1' },
      { kind: 'advance', ms: 1 },
      { kind: 'increment', key: 'ip:10.0.0.1' },
    ];
    const { oracle, compact } = await replay(sequence, 60_000);
    expect(compact).toEqual(oracle);
    expect(compact.at(-1)).toEqual([1, START + 120_000]);
  });
});

describe('CompactMemoryStore', () => {
  afterEach(() => {
    jest.useRealTimers();
  });

  it('starts a window at the first hit, refuses nothing itself and resets after the window', () => {
    let now = START;
    const store = new CompactMemoryStore({ now: () => now });
    store.init({ windowMs: 60_000 });
    now += 500;
    expect(store.increment('ip:203.0.113.7')).toEqual({
      totalHits: 1,
      resetTime: new Date(START + 60_500),
    });
    now += 59_999;
    expect(store.increment('ip:203.0.113.7').totalHits).toBe(2);
    now += 1;
    expect(store.increment('ip:203.0.113.7')).toEqual({
      totalHits: 1,
      resetTime: new Date(START + 120_500),
    });
    store.shutdown();
  });

  it('reads a count with peek() without counting, and hit() counts as increment() does', () => {
    let now = START;
    const store = new CompactMemoryStore({ now: () => now });
    store.init({ windowMs: 60_000 });
    const reading = { count: -1, resetAt: 0 };
    store.peek('account:{acct_1}', reading);
    expect(reading).toEqual({ count: 0, resetAt: START + 60_000 });
    now += 500;
    store.hit('account:{acct_1}', reading);
    expect(reading).toEqual({ count: 1, resetAt: START + 60_500 });
    store.hit('account:{acct_1}', reading);
    now += 1000;
    store.peek('account:{acct_1}', reading);
    store.peek('account:{acct_1}', reading);
    expect(reading).toEqual({ count: 2, resetAt: START + 60_500 });
    expect(store.get('account:{acct_1}')?.totalHits).toBe(2);
    now = START + 60_500;
    store.peek('account:{acct_1}', reading);
    expect(reading).toEqual({ count: 0, resetAt: START + 120_500 });
    store.shutdown();
  });

  it('drops the keys of a window that is over, by its timer, with no call coming', () => {
    jest.useFakeTimers({ now: START });
    const store = new CompactMemoryStore();
    store.init({ windowMs: 1000 });
    for (let host = 0; host < 100; host++) store.increment(`ip:10.0.1.${host}`);
    store.increment('account:acct_1');
    expect(store.size).toBe(101);
    jest.advanceTimersByTime(1000);
    expect(store.size).toBe(101);
    jest.advanceTimersByTime(1000);
    expect(store.size).toBe(0);
    store.shutdown();
  });

  it('keeps a key touched in the previous window and drops the others', () => {
    jest.useFakeTimers({ now: START });
    const store = new CompactMemoryStore();
    store.init({ windowMs: 1000 });
    store.increment('ip:10.0.0.1');
    store.increment('ip:10.0.0.2');
    jest.advanceTimersByTime(1500);
    store.increment('ip:10.0.0.1');
    jest.advanceTimersByTime(500);
    expect(store.size).toBe(1);
    expect(store.get('ip:10.0.0.1')).toEqual({
      totalHits: 1,
      resetTime: new Date(START + 2500),
    });
    store.shutdown();
  });

  it('reuses its IPv4 tables from window to window and shrinks them when clients go', () => {
    jest.useFakeTimers({ now: START });
    const store = new CompactMemoryStore();
    store.init({ windowMs: 1000 });
    const capacities: number[] = [];
    for (let window = 0; window < 5; window++) {
      for (let n = 0; n < 1000; n++) store.increment(`ip:10.${window}.${n >> 8}.${n & 255}`);
      capacities.push(store.ipv4Capacity);
      jest.advanceTimersByTime(1000);
    }
    // Both generations grow to 2,048 slots (1,000 keys, at most 3/4 full), then are reused.
    expect(capacities).toEqual([2048 + 16, 4096, 4096, 4096, 4096]);
    expect(store.size).toBe(1000);
    for (let idle = 0; idle < 3; idle++) jest.advanceTimersByTime(1000);
    expect(store.size).toBe(0);
    expect(store.ipv4Capacity).toBe(32);
    store.shutdown();
  });

  it('keeps IPv4 counts past a table slot exactly, in windows shorter than 2^23 ms', () => {
    jest.useFakeTimers({ now: START });
    const store = new CompactMemoryStore();
    store.init({ windowMs: 2 ** 23 - 1 });
    for (let i = 0; i < 300; i++) store.increment('ip:10.0.0.1');
    expect(store.ipv4Capacity).toBeGreaterThan(0);
    expect(store.get('ip:10.0.0.1')?.totalHits).toBe(300);
    store.decrement('ip:10.0.0.1');
    expect(store.increment('ip:10.0.0.1').totalHits).toBe(300);
    store.shutdown();
    store.init({ windowMs: 2 ** 23 });
    store.increment('ip:10.0.0.1');
    expect(store.ipv4Capacity).toBe(0);
    expect(store.get('ip:10.0.0.1')?.totalHits).toBe(1);
    store.shutdown();
  });

  it('never starts a window earlier than the generation when the clock goes back', () => {
    let now = START;
    const store = new CompactMemoryStore({ now: () => now });
    store.init({ windowMs: 1000 });
    now += 5000;
    store.increment('ip:10.0.0.9');
    now -= 4000;
    const { totalHits, resetTime } = store.increment('ip:10.0.0.1');
    expect(totalHits).toBe(1);
    expect(resetTime?.getTime()).toBeGreaterThanOrEqual(now + 1000);
    expect(store.increment('ip:10.0.0.9').totalHits).toBe(2);
    store.shutdown();
  });

  it('keeps windows longer than a Node timer, with counts past the packed number', () => {
    jest.useFakeTimers({ now: START });
    const day = 86_400_000;
    const store = new CompactMemoryStore();
    store.init({ windowMs: 100 * day });
    for (let i = 0; i < 5000; i++) store.increment('account:acct_1');
    jest.advanceTimersByTime(99 * day);
    expect(store.increment('account:acct_1')).toEqual({
      totalHits: 5001,
      resetTime: new Date(START + 100 * day),
    });
    store.decrement('account:acct_1');
    jest.advanceTimersByTime(day - 1);
    expect(store.get('account:acct_1')?.totalHits).toBe(5000);
    jest.advanceTimersByTime(1);
    expect(store.get('account:acct_1')).toBeUndefined();
    expect(store.increment('account:acct_1').totalHits).toBe(1);
    jest.advanceTimersByTime(250 * day);
    expect(store.size).toBe(0);
    store.shutdown();
  });

  it('refuses a window it cannot keep, and calls before init()', () => {
    const store = new CompactMemoryStore();
    expect(() => store.increment('k')).toThrow('init()');
    expect(() => {
      store.init({ windowMs: 0 });
    }).toThrow(RangeError);
    expect(() => {
      store.init({ windowMs: 2 ** 40 + 1 });
    }).toThrow(RangeError);
    expect(() => {
      store.init({ windowMs: 1.5 });
    }).toThrow(RangeError);
    expect(() => {
      new CompactMemoryStore({ maxPackedCount: 0 }).init({ windowMs: 1000 });
    }).toThrow(RangeError);
  });
});

describe('ipv4Number', () => {
  it('reads canonical dotted quads as signed 32-bit numbers', () => {
    expect(ipv4Number('0.0.0.0')).toBe(0);
    expect(ipv4Number('10.1.2.3')).toBe(0x0a010203);
    expect(ipv4Number('255.255.255.255')).toBe(-1);
    expect(ipv4Number('ip:128.0.0.0', 3)).toBe(-(2 ** 31));
  });

  it('refuses everything else', () => {
    for (const text of [
      '',
      '1.2.3',
      '1.2.3.4.5',
      '01.2.3.4',
      '1.2.3.256',
      '1.2..3',
      '.1.2.3',
      '1.2.3.',
      '1.2.3.4 ',
      '1.2.3.-4',
      '0x1.2.3.4',
      '167772161',
      '::ffff:1.2.3.4',
      '1111.2.3.4',
    ]) {
      expect([text, ipv4Number(text)]).toEqual([text, undefined]);
    }
  });

  it('is a bijection between canonical addresses and 32-bit numbers', () => {
    const octet = fc.integer({ min: 0, max: 255 });
    fc.assert(
      fc.property(fc.tuple(octet, octet, octet, octet), (parts) => {
        const number = ipv4Number(parts.join('.'));
        expect(number).toBe(
          (parts[0] * 2 ** 24 + parts[1] * 2 ** 16 + parts[2] * 256 + parts[3]) | 0,
        );
      }),
      { numRuns: 1000 },
    );
  });
});
