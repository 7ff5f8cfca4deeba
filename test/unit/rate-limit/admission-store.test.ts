import { EventEmitter } from 'node:events';
import { ADMIT_SCRIPT } from '../../../lib/rate-limit/admission-scripts';
import {
  AdmissionStore,
  type CounterRequest,
  type LocalCounters,
} from '../../../lib/rate-limit/admission-store';
import type { RedisCommandClient } from '../../../lib/rate-limit/redis-commands';
import { scriptSha1 } from '../../../lib/rate-limit/redis-commands';
import { RedisHealth, type RedisStatusSource } from '../../../lib/rate-limit/redis-health';

/**
 * The admission store on its own, with a Redis double: one script call per admission, the local
 * fallback (all or nothing, scaled by the expected instances) while Redis fails, and keys known
 * full refused without asking Redis, at the limit each request carries.
 */

const WINDOW_MS = 60_000;

/** A connection that answers each command with the next scripted reply, or fails. */
class FakeRedis extends EventEmitter implements RedisCommandClient, RedisStatusSource {
  status = 'ready';
  readonly calls: string[][] = [];
  readonly replies: unknown[] = [];
  failing: Error | undefined;

  call(command: string, ...args: string[]): Promise<unknown> {
    this.calls.push([command, ...args]);
    if (this.failing !== undefined) return Promise.reject(this.failing);
    return Promise.resolve(this.replies.shift());
  }
}

interface Setup {
  store: AdmissionStore;
  redis: FakeRedis;
  a: LocalCounters;
  b: LocalCounters;
  clock: { ms: number };
}

const stores: AdmissionStore[] = [];
afterEach(() => {
  for (const store of stores.splice(0)) store.shutdown();
});

function setup(expectedInstances = 1): Setup {
  const clock = { ms: Date.UTC(2026, 10, 25, 6, 0, 0) };
  const now = (): number => clock.ms;
  const redis = new FakeRedis();
  const health = new RedisHealth(redis, { coolDownMs: 1000, now });
  const store = new AdmissionStore({
    windowMs: WINDOW_MS,
    redis: { client: redis, health },
    expectedInstances,
    now,
  });
  stores.push(store);
  return {
    store,
    redis,
    a: store.countersFor('rl:a:'),
    b: store.countersFor('rl:b:', { rolling: true }),
    clock,
  };
}

const request = (counter: LocalCounters, key: string, limit: number): CounterRequest => ({
  counter,
  key,
  limit,
  enforced: true,
});

describe('AdmissionStore', () => {
  it('sends one EVALSHA per admission, with every key and each limit, window and kind', async () => {
    const { store, redis, a, b } = setup();
    redis.replies.push([0, Date.UTC(2026, 10, 25, 6, 0, 0), 1, WINDOW_MS, 1, WINDOW_MS]);
    const outcome = await store.admit([
      request(a, 'account:{acct}:ip:203.0.113.7', 3),
      request(b, 'account:{acct}', 10),
    ]);
    expect(redis.calls).toEqual([
      [
        'EVALSHA',
        scriptSha1(ADMIT_SCRIPT),
        '2',
        'rl:a:account:{acct}:ip:203.0.113.7',
        'rl:b:rolling:account:{acct}',
        '3',
        String(WINDOW_MS),
        'e',
        '10',
        String(WINDOW_MS),
        'er',
      ],
    ]);
    expect(outcome.refusedAt).toBe(-1);
    expect(outcome.readings.map((reading) => reading.count)).toEqual([1, 1]);
  });

  it('refuses a key Redis found full without asking again, unless the request carries a higher limit', async () => {
    const { store, redis, a } = setup();
    redis.replies.push([0, 0, 3, 30_000]);
    expect((await store.admit([request(a, 'account:{acct}', 3)])).refusedAt).toBe(-1);
    const refused = await store.admit([request(a, 'account:{acct}', 3)]);
    expect(refused.refusedAt).toBe(0);
    expect(refused.readings[0]?.resetAt).toBeGreaterThan(Date.UTC(2026, 10, 25, 6, 0, 29));
    expect(redis.calls).toHaveLength(1);
    // An override raised to 5: the count seen (3) is below it, so Redis decides.
    redis.replies.push([0, 0, 4, 29_000]);
    expect((await store.admit([request(a, 'account:{acct}', 5)])).refusedAt).toBe(-1);
    expect(redis.calls).toHaveLength(2);
  });

  it('counts locally, all or nothing and scaled by the expected instances, while Redis fails', async () => {
    const { store, redis, a, b } = setup(3);
    redis.failing = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    const both = (): CounterRequest[] => [request(a, 'ip:203.0.113.7', 6), request(b, 'k', 30)];
    // 6 / 3 instances: two admissions in this process.
    const outcomes = [];
    for (let n = 0; n < 4; n++) outcomes.push((await store.admit(both())).refusedAt);
    expect(outcomes).toEqual([-1, -1, 0, 0]);
    expect(redis.calls).toHaveLength(1);
    // The refusals by `a` spent nothing of `b`: 2 counts, reported scaled.
    const [, bReading] = await store.read(both());
    expect(bReading?.count).toBe(2 * 3);
  });

  it('reads counts without counting, from the local counters when Redis is unusable', async () => {
    const { store, redis, a } = setup();
    redis.status = 'connecting';
    for (let n = 0; n < 2; n++) await store.admit([request(a, 'account:{acct}', 5)]);
    const first = await store.read([request(a, 'account:{acct}', 5)]);
    const second = await store.read([request(a, 'account:{acct}', 5)]);
    expect(first).toEqual(second);
    expect(first[0]?.count).toBe(2);
    expect(redis.calls).toEqual([]);
  });
});
