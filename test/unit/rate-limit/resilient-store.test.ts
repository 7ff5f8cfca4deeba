import { EventEmitter } from 'node:events';
import type { IncrementResponse, Options, Store } from 'express-rate-limit';
import {
  RedisHealth,
  type RedisStatusSource,
  type SharedStoreState,
} from '../../../lib/rate-limit/redis-health';
import {
  ResilientStore,
  type ResilientStoreOptions,
} from '../../../lib/rate-limit/resilient-store';

const WINDOW_MS = 60_000;
const COOL_DOWN_MS = 1000;
const LIMIT = 3;

/** A shared-store double implementing express-rate-limit's Store: counts per key, or fails on demand. */
class FakeSharedStore implements Store {
  readonly calls: string[] = [];
  failing: Error | undefined;
  private readonly hits = new Map<string, number>();

  constructor(private readonly resetAt: () => number) {}

  increment(key: string): IncrementResponse {
    this.calls.push(`increment ${key}`);
    if (this.failing !== undefined) throw this.failing;
    const totalHits = (this.hits.get(key) ?? 0) + 1;
    this.hits.set(key, totalHits);
    return { totalHits, resetTime: new Date(this.resetAt()) };
  }

  decrement(key: string): void {
    this.calls.push(`decrement ${key}`);
    if (this.failing !== undefined) throw this.failing;
    this.hits.set(key, Math.max(0, (this.hits.get(key) ?? 0) - 1));
  }

  resetKey(key: string): void {
    this.calls.push(`resetKey ${key}`);
    if (this.failing !== undefined) throw this.failing;
    this.hits.delete(key);
  }

  /** Starts a new window for every key, as Redis does when the keys expire. */
  expireAll(): void {
    this.hits.clear();
  }
}

/** The connection-state part of an ioredis client: a `status` and its events. */
class FakeConnection extends EventEmitter implements RedisStatusSource {
  status = 'ready';
}

interface Harness {
  store: ResilientStore;
  shared: FakeSharedStore;
  connection: FakeConnection;
  health: RedisHealth;
  changes: [SharedStoreState, string | undefined][];
  clock: { ms: number };
}

const stores: ResilientStore[] = [];
afterEach(() => {
  for (const store of stores.splice(0)) store.shutdown();
});

async function harness(
  options: Partial<ResilientStoreOptions> = {},
  withShared = true,
): Promise<Harness> {
  const clock = { ms: Date.now() };
  const now = (): number => clock.ms;
  const connection = new FakeConnection();
  const health = new RedisHealth(connection, { coolDownMs: COOL_DOWN_MS, now });
  const changes: [SharedStoreState, string | undefined][] = [];
  health.on('change', (state, reason) => changes.push([state, reason]));
  const shared = new FakeSharedStore(() => clock.ms + WINDOW_MS);
  const store = new ResilientStore({
    limit: LIMIT,
    now,
    ...(withShared ? { shared: { store: shared, health } } : {}),
    ...options,
  });
  stores.push(store);
  await store.init({ windowMs: WINDOW_MS } as Options);
  return { store, shared, connection, health, changes, clock };
}

async function hits(store: ResilientStore, key: string, times: number): Promise<number[]> {
  const totals: number[] = [];
  for (let i = 0; i < times; i++) totals.push((await store.increment(key)).totalHits);
  return totals;
}

describe('ResilientStore with a healthy shared store', () => {
  it('counts in the shared store', async () => {
    const { store, shared, health, changes } = await harness();
    expect(await hits(store, 'account:a', 2)).toEqual([1, 2]);
    expect(shared.calls).toEqual(['increment account:a', 'increment account:a']);
    expect(health.state).toBe('shared');
    expect(changes).toEqual([]);
  });

  it('does not scale shared counts by the expected instances', async () => {
    const { store } = await harness({ expectedInstances: 4 });
    expect(await hits(store, 'k', 2)).toEqual([1, 2]);
  });

  it('passes decrement and resetKey to the shared store', async () => {
    const { store, shared } = await harness();
    await store.increment('k');
    await store.decrement('k');
    await store.resetKey('k');
    expect(shared.calls).toEqual(['increment k', 'decrement k', 'resetKey k']);
  });

  it('undoes a count in the store counting now: shared when usable, else memory', async () => {
    const { store, shared } = await harness();
    await hits(store, 'k', 2);
    await store.decrement('k');
    expect((await store.increment('k')).totalHits).toBe(2);
    shared.failing = new Error('down');
    await hits(store, 'm', 2);
    await store.decrement('m');
    expect((await store.increment('m')).totalHits).toBe(2);
  });
});

describe('ResilientStore when the shared store fails', () => {
  it('falls back to memory and reports degraded', async () => {
    const { store, shared, health, changes } = await harness();
    await store.increment('k');
    shared.failing = Object.assign(new Error('Command timed out'), { code: 'ETIMEDOUT' });
    const result = await store.increment('k');
    expect(result.totalHits).toBe(1);
    expect(result.resetTime).toBeInstanceOf(Date);
    expect(health.state).toBe('degraded');
    expect(changes).toEqual([['degraded', 'ETIMEDOUT']]);
  });

  it('reports one change for many failures, and skips the shared store while cooling down', async () => {
    const { store, shared, changes, clock } = await harness({ limit: 1000 });
    shared.failing = new Error('Command timed out');
    await store.increment('k');
    await store.increment('k');
    expect(shared.calls).toHaveLength(1);
    for (let i = 0; i < 5; i++) {
      clock.ms += COOL_DOWN_MS;
      await store.increment('k');
    }
    expect(shared.calls).toHaveLength(6);
    expect(changes).toEqual([['degraded', 'Error']]);
  });

  it('multiplies local counts by expectedInstances while degraded', async () => {
    const { store, shared } = await harness({ limit: 100, expectedInstances: 3 });
    shared.failing = new Error('down');
    expect(await hits(store, 'k', 3)).toEqual([3, 6, 9]);
  });

  it('refuses at the limit sooner when the fleet share is counted (limit 3, 2 instances)', async () => {
    const { store, shared } = await harness({ expectedInstances: 2 });
    shared.failing = new Error('down');
    expect(await hits(store, 'k', 2)).toEqual([2, 4]);
  });

  it('counts exactly, unscaled, when no shared store is configured', async () => {
    const { store, shared } = await harness({ limit: 100, expectedInstances: 3 }, false);
    expect(await hits(store, 'k', 3)).toEqual([1, 2, 3]);
    expect(shared.calls).toEqual([]);
  });

  it('uses memory without trying the shared store while the client is not connected', async () => {
    const { store, shared, connection, health, changes } = await harness();
    connection.status = 'reconnecting';
    connection.emit('close');
    expect(health.state).toBe('degraded');
    expect(await hits(store, 'k', 2)).toEqual([1, 2]);
    expect(shared.calls).toEqual([]);
    expect(changes).toEqual([['degraded', 'connection closed']]);
  });

  it("resumes the shared store after 'ready'", async () => {
    const { store, shared, connection, health, changes } = await harness({ limit: 100 });
    connection.status = 'reconnecting';
    connection.emit(
      'error',
      Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
    );
    await store.increment('k');
    expect(shared.calls).toEqual([]);

    connection.status = 'ready';
    connection.emit('ready');
    expect(health.state).toBe('shared');
    await store.increment('k');
    expect(shared.calls).toEqual(['increment k']);
    expect(changes).toEqual([
      ['degraded', 'ECONNREFUSED'],
      ['shared', undefined],
    ]);
  });

  it('resumes the shared store by itself when a command succeeds after the cool-down', async () => {
    const { store, shared, health, changes, clock } = await harness({ limit: 100 });
    shared.failing = new Error('Command timed out');
    await store.increment('k');
    shared.failing = undefined;
    clock.ms += COOL_DOWN_MS;
    expect((await store.increment('k')).totalHits).toBe(1);
    expect(health.state).toBe('shared');
    expect(changes.map(([state]) => state)).toEqual(['degraded', 'shared']);
  });

  it('starts degraded when the client is not connected at creation', () => {
    const connection = new FakeConnection();
    connection.status = 'connecting';
    const health = new RedisHealth(connection, { coolDownMs: COOL_DOWN_MS });
    expect(health.state).toBe('degraded');
    expect(health.usable).toBe(false);
  });
});

describe('ResilientStore over the limit', () => {
  it('answers an over-limit key from memory until its reset, without the shared store', async () => {
    const { store, shared, clock } = await harness();
    const resetAt = clock.ms + WINDOW_MS;
    expect(await hits(store, 'k', LIMIT + 1)).toEqual([1, 2, 3, 4]);
    expect(store.blockedUntil('k')).toBe(resetAt);
    const callsWhenBlocked = shared.calls.length;

    for (let i = 0; i < 5; i++) {
      const result = await store.increment('k');
      expect(result).toEqual({ totalHits: LIMIT + 1, resetTime: new Date(resetAt) });
    }
    expect(shared.calls).toHaveLength(callsWhenBlocked);

    clock.ms = resetAt - 1;
    await store.increment('k');
    expect(shared.calls).toHaveLength(callsWhenBlocked);

    clock.ms = resetAt;
    shared.expireAll();
    expect(store.blockedUntil('k')).toBeUndefined();
    expect((await store.increment('k')).totalHits).toBe(1);
    expect(shared.calls).toHaveLength(callsWhenBlocked + 1);
  });

  it('blocks only the key that went over', async () => {
    const { store, shared } = await harness();
    await hits(store, 'a', LIMIT + 1);
    expect((await store.increment('b')).totalHits).toBe(1);
    expect(shared.calls.at(-1)).toBe('increment b');
    expect(store.blockedUntil('b')).toBeUndefined();
  });

  it('tells apart per-IP keys kept as numbers from their look-alikes, in memory and blocked', async () => {
    const { store } = await harness({}, false);
    const keys = ['ip:203.0.113.9', '203.0.113.9', 'ip:203.0.113.09', 'account:203.0.113.9'];
    await hits(store, 'ip:203.0.113.9', LIMIT + 1);
    expect(store.blockedUntil('ip:203.0.113.9')).toBeDefined();
    for (const key of keys.slice(1)) {
      expect(store.blockedUntil(key)).toBeUndefined();
      expect((await store.increment(key)).totalHits).toBe(1);
    }
    await store.resetKey('ip:203.0.113.9');
    expect(store.blockedUntil('ip:203.0.113.9')).toBeUndefined();
    expect((await store.increment('ip:203.0.113.9')).totalHits).toBe(1);
    expect((await store.increment('203.0.113.9')).totalHits).toBe(2);
  });

  it('does not block a key at exactly the limit', async () => {
    const { store } = await harness();
    await hits(store, 'k', LIMIT);
    expect(store.blockedUntil('k')).toBeUndefined();
  });

  it('when full, forgets the oldest block first and still records the newest', async () => {
    const { store } = await harness({ maxBlockedKeys: 2 });
    for (const key of ['a', 'b', 'c']) await hits(store, key, LIMIT + 1);
    expect(store.blockedUntil('a')).toBeUndefined();
    expect(store.blockedUntil('b')).toBeDefined();
    expect(store.blockedUntil('c')).toBeDefined();
  });

  it('forgets the block on resetKey', async () => {
    const { store } = await harness();
    await hits(store, 'k', LIMIT + 1);
    await store.resetKey('k');
    expect(store.blockedUntil('k')).toBeUndefined();
    expect((await store.increment('k')).totalHits).toBe(1);
  });
});
