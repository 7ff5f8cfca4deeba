import { Redis } from 'ioredis';
import { AdmissionStore } from '../../lib/rate-limit/admission-store';
import type { AuthFailureLimiter } from '../../lib/rate-limit/auth-failures';
import type { LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import {
  guessWrong,
  limiterFleet,
  mostInOneWindow,
  sharedConnection,
} from '../helpers/auth-budget';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  rollingCount,
  uniquePrefix,
} from '../helpers/redis';
import { type ClockedRedis, withRedisClock } from '../helpers/redis-clock';

/**
 * The failed-authentication budget of two instances sharing a real Redis, over any span of one
 * rolling window: with N instances, at most the budget plus N - 1 wrong credentials are compared.
 * The instances and Redis's scripts read one injected clock, so a minute passes without waiting.
 *
 * The sequence: requests alternate between the two instances, all from one IP with wrong keys, 20
 * per minute. 10 at t0 and 10 at t0 + 30 s are all compared; of two at t0 + 45 s one is (the
 * instance that had not yet seen the budget spent); then 15 at t0 + 61.5 s, when the span from
 * t0 + 30 s already holds 11 comparisons, so at most 10 more may be compared.
 *
 * When Redis answers some time after the call that spent the budget, the instance that sent it
 * must hold the budget spent until the reset counted from the answer: counted from the call, it
 * would run out while the failure that spent the budget is still inside the window, and that
 * instance would compare one more than the bound.
 *
 * Beneath it, the engine: a failure recorded while its rolling counter in Redis is full replaces
 * the oldest admission, and the key stays full until the newest `limit` have left the window.
 */

const BUDGET = 20;
const WINDOW_MS = 60_000;
const INSTANCES = 2;
const T0 = 1_764_300_000_000;
const IP = '198.51.100.23';

describeWithRedis('the failed-authentication budget of two instances over one window', () => {
  let testRedis: TestRedis | undefined;
  let connection: LimiterRedisConnection | undefined;
  let admin: Redis | undefined;
  const limiters: AuthFailureLimiter[] = [];

  beforeAll(async () => {
    testRedis = await acquireTestRedis();
    if (testRedis === undefined) throw new Error('describeWithRedis ran without a Redis');
    connection = await sharedConnection(testRedis.url);
    admin = new Redis(testRedis.url);
  });

  afterAll(async () => {
    for (const limiter of limiters.splice(0)) limiter.shutdown();
    admin?.disconnect();
    await connection?.close();
    await testRedis?.close();
  });

  it('compares at most the budget plus one in any minute when a blind comparison was made while the budget was spent', async () => {
    if (connection === undefined) throw new Error('no Redis');
    let time = T0;
    const now = (): number => time;
    const clocked: ClockedRedis = withRedisClock(connection, now);
    const prefix = uniquePrefix('auth-fleet-window');
    const fleet = limiterFleet(INSTANCES, {
      limit: BUDGET,
      windowMs: WINDOW_MS,
      redis: clocked.redis,
      prefix,
      now,
    });
    limiters.push(...fleet);
    const req = { clientIp: IP };
    const compared: number[] = [];
    let sent = 0;

    /** `count` requests at `at`, alternating between the instances, each answered in turn. */
    const burst = async (at: number, count: number): Promise<number> => {
      time = at;
      const before = compared.length;
      for (let i = 0; i < count; i++) {
        await guessWrong(fleet[sent++ % INSTANCES]!, req, compared, now);
        await clocked.settled();
      }
      return compared.length - before;
    };

    const perBurst = [
      await burst(T0, 10),
      await burst(T0 + 30_000, 10),
      await burst(T0 + 45_000, 2),
      await burst(T0 + 61_500, 15),
    ];

    expect({ perBurst, most: mostInOneWindow(compared, WINDOW_MS) }).toEqual({
      perBurst: [10, 10, 1, 10],
      most: BUDGET + INSTANCES - 1,
    });
  });

  it('compares at most the budget plus one in any minute when Redis answers the call that spent the budget some time after it was sent', async () => {
    if (connection === undefined) throw new Error('no Redis');
    let time = T0;
    const now = (): number => time;
    // The instance that spends the budget hears so 500 ms after it asked: Redis decides then.
    let latencyMs = 0;
    const clocked = withRedisClock(connection, now, {
      next: () => latencyMs,
      reach: (decidedAt) => {
        time = Math.max(time, decidedAt);
      },
    });
    const prefix = uniquePrefix('auth-fleet-latency');
    const [first, second] = limiterFleet(INSTANCES, {
      limit: BUDGET,
      windowMs: WINDOW_MS,
      redis: clocked.redis,
      prefix,
      now,
    });
    if (first === undefined || second === undefined) throw new Error('no fleet');
    limiters.push(first, second);
    const req = { clientIp: IP };
    const compared: number[] = [];
    const guess = async (instance: AuthFailureLimiter, at: number): Promise<boolean> => {
      time = Math.max(time, at);
      const ran = await guessWrong(instance, req, compared, now);
      await clocked.settled();
      return ran;
    };

    // 19 failures on the second instance, the 20th on the first: only the first knows the budget
    // spent, and its own memory holds one failure, so only Redis's answer can keep it from
    // comparing until the failure of T0 leaves the window.
    await guess(second, T0);
    for (let i = 1; i < BUDGET - 1; i++) await guess(second, T0 + 30_000);
    latencyMs = 500;
    // Sent at T0 + 30 s, counted by Redis at T0 + 30.5 s: full until T0 + 60 s.
    await guess(first, T0 + 30_000);
    latencyMs = 0;
    // The second instance last heard 19: it compares one blind, as it may.
    const blind = await guess(second, T0 + 31_000);
    // The failure of T0 is still inside the window: neither instance may compare.
    const late = [await guess(first, T0 + 59_700), await guess(second, T0 + 59_700)];

    expect({ blind, late, most: mostInOneWindow(compared, WINDOW_MS) }).toEqual({
      blind: true,
      late: [false, false],
      most: BUDGET + INSTANCES - 1,
    });
  });

  it('records in Redis a failure compared over the limit, in place of the oldest, and holds the key full until the newest limit have left', async () => {
    if (connection === undefined || admin === undefined) throw new Error('no Redis');
    const limit = 3;
    const windowMs = 10_000;
    let time = T0;
    const now = (): number => time;
    const clocked = withRedisClock(connection, now);
    const prefix = uniquePrefix('auth-fleet-store');
    const store = new AdmissionStore({ windowMs, redis: clocked.redis, now });
    const counter = store.countersFor(prefix, { ipv4KeyPrefix: '', rolling: true });
    const failure = { counter, key: IP, limit, enforced: true, countWhenFull: true };
    const request = { counter, key: IP, limit, enforced: true };
    const ringKey = `${counter.prefix}${IP}`;
    try {
      for (let i = 0; i < limit; i++) {
        time = T0 + i * 1000;
        expect((await store.admit([failure])).refusedAt).toBe(-1);
      }
      // A request asking to go ahead is refused and counts nothing; a failure is counted.
      time = T0 + 3000;
      const asked = await store.admit([request]);
      expect({ refusedAt: asked.refusedAt, held: await rollingCount(admin, ringKey) }).toEqual({
        refusedAt: 0,
        held: limit,
      });
      const over = await store.admit([failure]);
      expect({
        refusedAt: over.refusedAt,
        held: await rollingCount(admin, ringKey),
        resetAt: over.readings[0]?.resetAt,
      }).toEqual({ refusedAt: 0, held: limit, resetAt: T0 + 1000 + windowMs });

      // When the first failure leaves, the three newest (T0 + 1 s, 2 s, 3 s) still fill the window.
      time = T0 + windowMs + 500;
      counter.forget(IP);
      expect((await store.admit([request])).refusedAt).toBe(0);
      time = T0 + 1000 + windowMs;
      counter.forget(IP);
      expect((await store.admit([request])).refusedAt).toBe(-1);
    } finally {
      store.shutdown();
    }
  });
});
