import {
  IdempotencyStoreError,
  MemoryIdempotencyStore,
  type MemoryIdempotencyStoreOptions,
} from '../../../lib/idempotency/store';

/**
 * The in-memory store: compare-and-set claims, settlements and releases, lifetimes on an injected
 * clock, and bounds that only ever evict what has expired.
 */

const TTL = 1000;

function storeAt(options: Omit<MemoryIdempotencyStoreOptions, 'now'> = {}): {
  store: MemoryIdempotencyStore;
  clock: { now: number };
} {
  const clock = { now: 0 };
  const store = new MemoryIdempotencyStore({ ...options, now: () => clock.now });
  return { store, clock };
}

async function expectFull(promise: Promise<unknown>): Promise<void> {
  const error: unknown = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(IdempotencyStoreError);
  expect((error as IdempotencyStoreError).reason).toBe('full');
}

describe('MemoryIdempotencyStore', () => {
  it('claims a free name once; a second claim gets the record', async () => {
    const { store } = storeAt();
    expect(store.state()).toBe('memory');
    expect(await store.claim('n', 'c1', TTL)).toBeUndefined();
    expect(await store.claim('n', 'c2', TTL)).toBe('c1');
    expect(await store.claim('other', 'c3', TTL)).toBeUndefined();
    expect(store.size).toBe(2);
  });

  it('claims a name once among concurrent claims', async () => {
    const { store } = storeAt();
    const found = await Promise.all(
      Array.from({ length: 50 }, (_, index) => store.claim('n', `c${index}`, TTL)),
    );
    expect(found.filter((record) => record === undefined)).toHaveLength(1);
    const winner = `c${found.indexOf(undefined)}`;
    expect(found.filter((record) => record === winner)).toHaveLength(49);
  });

  it('settles only the claim it holds', async () => {
    const { store } = storeAt();
    expect(await store.claim('n', 'c1', TTL)).toBeUndefined();
    expect(await store.settle('n', 'c2', 'answer-by-c2', TTL)).toBe(false);
    expect(await store.claim('n', 'x', TTL)).toBe('c1');
    expect(await store.settle('n', 'c1', 'answer', TTL)).toBe(true);
    expect(await store.claim('n', 'x', TTL)).toBe('answer');
    // Settled: the claim no longer holds it.
    expect(await store.settle('n', 'c1', 'again', TTL)).toBe(false);
    expect(await store.claim('n', 'x', TTL)).toBe('answer');
    expect(await store.settle('absent', 'c1', 'answer', TTL)).toBe(false);
    expect(await store.claim('absent', 'y', TTL)).toBeUndefined();
  });

  it('releases only the claim it holds', async () => {
    const { store } = storeAt();
    expect(await store.claim('n', 'c1', TTL)).toBeUndefined();
    await store.release('n', 'c2');
    expect(await store.claim('n', 'x', TTL)).toBe('c1');
    await store.release('n', 'c1');
    expect(store.size).toBe(0);
    expect(await store.claim('n', 'c3', TTL)).toBeUndefined();
    // A settled record is no claim: a late release leaves it.
    expect(await store.settle('n', 'c3', 'answer', TTL)).toBe(true);
    await store.release('n', 'c3');
    expect(await store.claim('n', 'x', TTL)).toBe('answer');
  });

  it('forgets a claim when its lifetime ends, and a late settlement keeps nothing', async () => {
    const { store, clock } = storeAt();
    expect(await store.claim('n', 'c1', TTL)).toBeUndefined();
    clock.now = TTL - 1;
    expect(await store.claim('n', 'x', TTL)).toBe('c1');
    clock.now = TTL;
    expect(await store.settle('n', 'c1', 'late', TTL)).toBe(false);
    expect(await store.claim('n', 'c2', TTL)).toBeUndefined();
    // The stale claim cannot release the new one.
    await store.release('n', 'c1');
    expect(await store.claim('n', 'x', TTL)).toBe('c2');
  });

  it('counts a settled record’s lifetime from its settlement', async () => {
    const { store, clock } = storeAt();
    expect(await store.claim('n', 'c1', TTL)).toBeUndefined();
    clock.now = 600;
    expect(await store.settle('n', 'c1', 'answer', TTL)).toBe(true);
    clock.now = 600 + TTL - 1;
    expect(await store.claim('n', 'x', TTL)).toBe('answer');
    clock.now = 600 + TTL;
    expect(await store.claim('n', 'c2', TTL)).toBeUndefined();
  });

  it('refuses a new claim when full of records that have not expired', async () => {
    const { store, clock } = storeAt({ maxRecords: 3 });
    for (const name of ['a', 'b', 'c']) {
      expect(await store.claim(name, `claim-${name}`, TTL)).toBeUndefined();
      clock.now += 100;
    }
    await expectFull(store.claim('d', 'claim-d', TTL));
    // A name already held is still answered when full.
    expect(await store.claim('a', 'x', TTL)).toBe('claim-a');
    // Nothing was dropped to make room.
    expect(store.size).toBe(3);
    for (const name of ['a', 'b', 'c']) {
      expect(await store.claim(name, 'x', TTL)).toBe(`claim-${name}`);
    }
  });

  it('makes room by dropping only what has expired', async () => {
    const { store, clock } = storeAt({ maxRecords: 3 });
    // a at 0, b at 100, c at 200; a settled at 300 (its lifetime starts again).
    expect(await store.claim('a', 'claim-a', TTL)).toBeUndefined();
    clock.now = 100;
    expect(await store.claim('b', 'claim-b', TTL)).toBeUndefined();
    clock.now = 200;
    expect(await store.claim('c', 'claim-c', TTL)).toBeUndefined();
    clock.now = 300;
    expect(await store.settle('a', 'claim-a', 'answer-a', TTL)).toBe(true);
    // At 1100 only b has expired: d takes its place, a and c stay.
    clock.now = 1100;
    expect(await store.claim('d', 'claim-d', TTL)).toBeUndefined();
    expect(store.size).toBe(3);
    expect(await store.claim('a', 'x', TTL)).toBe('answer-a');
    expect(await store.claim('c', 'x', TTL)).toBe('claim-c');
    expect(await store.claim('d', 'x', TTL)).toBe('claim-d');
    await expectFull(store.claim('e', 'claim-e', TTL));
    // At 1200 c has expired too.
    clock.now = 1200;
    expect(await store.claim('e', 'claim-e', TTL)).toBeUndefined();
    expect(await store.claim('a', 'x', TTL)).toBe('answer-a');
    // c is gone (a held name would be answered), and a, d, e fill the store.
    await expectFull(store.claim('c', 'claim-c2', TTL));
  });

  it('refuses a settlement past its character bound and keeps the claim', async () => {
    const { store } = storeAt({ maxCharacters: 20 });
    expect(await store.claim('n', 'claim-1', TTL)).toBeUndefined();
    await expectFull(store.settle('n', 'claim-1', 'x'.repeat(21), TTL));
    // Still claimed: its retries are refused, never forwarded again.
    expect(await store.claim('n', 'x', TTL)).toBe('claim-1');
    expect(await store.settle('n', 'claim-1', 'x'.repeat(20), TTL)).toBe(true);
    await expectFull(store.claim('m', 'c', TTL));
  });

  it('frees the characters of what it drops', async () => {
    const { store, clock } = storeAt({ maxCharacters: 20 });
    expect(await store.claim('a', 'a'.repeat(10), TTL)).toBeUndefined();
    expect(await store.claim('b', 'b'.repeat(10), TTL)).toBeUndefined();
    await expectFull(store.claim('c', 'c', TTL));
    await store.release('a', 'a'.repeat(10));
    expect(await store.claim('c', 'c'.repeat(10), TTL)).toBeUndefined();
    clock.now = TTL;
    expect(await store.claim('d', 'd'.repeat(20), TTL)).toBeUndefined();
    expect(store.size).toBe(1);
  });
});
