import { AuthenticationError } from '../../lib/errors';
import {
  type AuthFailureLimiter,
  createAuthFailureLimiter,
} from '../../lib/rate-limit/auth-failures';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
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
 */

const BUDGET = 20;
const WINDOW_MS = 60_000;
const INSTANCES = 2;
const T0 = 1_764_300_000_000;
const IP = '198.51.100.23';

function wrongKey(): never {
  throw new AuthenticationError('invalid_api_key');
}

/** The most of `times` inside any span of `windowMs` ([t, t + windowMs)). */
function mostInOneWindow(times: readonly number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let most = 0;
  let from = 0;
  for (let to = 0; to < sorted.length; to++) {
    while ((sorted[from] ?? 0) + windowMs <= (sorted[to] ?? 0)) from++;
    most = Math.max(most, to - from + 1);
  }
  return most;
}

describeWithRedis('the failed-authentication budget of two instances over one window', () => {
  let testRedis: TestRedis | undefined;
  let connection: LimiterRedisConnection | undefined;
  const limiters: AuthFailureLimiter[] = [];

  beforeAll(async () => {
    testRedis = await acquireTestRedis();
    if (testRedis === undefined) throw new Error('describeWithRedis ran without a Redis');
    connection = createLimiterRedis({ url: testRedis.url });
    const deadline = Date.now() + 5000;
    while (connection.health.state !== 'shared') {
      if (Date.now() > deadline) throw new Error(`Redis stayed ${connection.health.state}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  });

  afterAll(async () => {
    for (const limiter of limiters.splice(0)) limiter.shutdown();
    await connection?.close();
    await testRedis?.close();
  });

  it('compares at most the budget plus one in any minute when a blind comparison was made while the budget was spent', async () => {
    if (connection === undefined) throw new Error('no Redis');
    let time = T0;
    const now = (): number => time;
    const clocked: ClockedRedis = withRedisClock(connection, now);
    const prefix = uniquePrefix('auth-fleet-window');
    const fleet = Array.from({ length: INSTANCES }, () =>
      createAuthFailureLimiter({
        limit: BUDGET,
        windowMs: WINDOW_MS,
        redis: clocked.redis,
        prefix,
        now,
      }),
    );
    limiters.push(...fleet);
    const req = { clientIp: IP };
    const compared: number[] = [];
    let sent = 0;

    /** `count` requests at `at`, alternating between the instances, each answered in turn. */
    const burst = async (at: number, count: number): Promise<number> => {
      time = at;
      const before = compared.length;
      for (let i = 0; i < count; i++) {
        const instance = fleet[sent++ % INSTANCES]!;
        await new Promise<void>((answered) => {
          instance.queueAttempt(
            req,
            () => {
              compared.push(now());
              return wrongKey();
            },
            () => {
              answered();
            },
          );
        });
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
});
