import fc from 'fast-check';
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
  uniquePrefix,
} from '../helpers/redis';
import { withRedisClock } from '../helpers/redis-clock';

/**
 * The failed-authentication budget of 2 to 4 instances sharing one real Redis, under random
 * sequences of wrong credentials from one IP over several windows: each step moves the clock
 * (often not at all, sometimes across a window's edge) and sends one to three attempts at once to
 * random instances. In every span of one window, at most the budget plus one per extra instance
 * are compared; and once a whole window has passed with no failure, every instance compares
 * again. The instances and the scripts in Redis read one injected clock: no run waits.
 *
 * Redis answers after a latency drawn for each script call (often none, else up to a tenth of the
 * window): it decides that much after the call was sent, and the shared clock reaches that time
 * before the answer is delivered, as over a real network.
 *
 * fast-check draws a new seed each run and prints it with the shrunk path on a failure; set
 * `FC_SEED` (and `FC_PATH`) to replay one.
 */

const WINDOW_MS = 10_000;
const IP = '203.0.113.77';
const RUNS = 200;

interface Step {
  readonly wait: number;
  /** The instances (indices modulo the fleet's size) that get an attempt at once. */
  readonly to: readonly number[];
}

/** Often none, so the budget fills; often part of a window, so failures leave it one by one. */
const wait: fc.Arbitrary<number> = fc.oneof(
  { weight: 3, arbitrary: fc.constant(0) },
  { weight: 3, arbitrary: fc.integer({ min: 1, max: WINDOW_MS / 2 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(WINDOW_MS / 2, WINDOW_MS - 1, WINDOW_MS, WINDOW_MS + 1),
  },
);

const step: fc.Arbitrary<Step> = fc.record({
  wait,
  to: fc.array(fc.nat({ max: 3 }), { minLength: 1, maxLength: 3 }),
});

/** Milliseconds from a script call's send to Redis running it, taken in turn by the calls. */
const latencies: fc.Arbitrary<number[]> = fc.array(
  fc.oneof(
    { weight: 1, arbitrary: fc.constant(0) },
    { weight: 2, arbitrary: fc.integer({ min: 1, max: WINDOW_MS / 10 }) },
  ),
  { minLength: 1, maxLength: 8 },
);

const scenario = fc.record({
  instances: fc.integer({ min: 2, max: 4 }),
  limit: fc.integer({ min: 1, max: 6 }),
  steps: fc.array(step, { minLength: 1, maxLength: 60 }),
  latencies,
});

/** A replay of a failure fast-check printed, when `FC_SEED` (and `FC_PATH`) are set. */
const replay: Pick<fc.Parameters<unknown>, 'seed' | 'path'> = process.env.FC_SEED === undefined
  ? {}
  : { seed: Number(process.env.FC_SEED), path: process.env.FC_PATH };

describeWithRedis('the failed-authentication budget of a fleet sharing Redis (property)', () => {
  let testRedis: TestRedis | undefined;
  let connection: LimiterRedisConnection | undefined;

  beforeAll(async () => {
    testRedis = await acquireTestRedis();
    if (testRedis === undefined) throw new Error('describeWithRedis ran without a Redis');
    connection = await sharedConnection(testRedis.url);
  });

  afterAll(async () => {
    await connection?.close();
    await testRedis?.close();
  });

  it('compares at most the budget plus one per extra instance in any span of one window', async () => {
    const live = connection;
    if (live === undefined) throw new Error('no Redis');
    await fc.assert(
      fc.asyncProperty(scenario, async ({ instances, limit, steps, latencies: delays }) => {
        let time = 1_764_300_000_000;
        const now = (): number => time;
        let calls = 0;
        const clocked = withRedisClock(live, now, {
          next: () => delays[calls++ % delays.length] ?? 0,
          reach: (decidedAt) => {
            time = Math.max(time, decidedAt);
          },
        });
        const prefix = uniquePrefix('auth-fleet-property');
        const fleet = limiterFleet(instances, {
          limit,
          windowMs: WINDOW_MS,
          redis: clocked.redis,
          prefix,
          now,
        });
        const req = { clientIp: IP };
        const compared: number[] = [];
        const attempt = (instance: AuthFailureLimiter): Promise<boolean> =>
          guessWrong(instance, req, compared, now);
        try {
          for (const { wait: after, to } of steps) {
            time += after;
            await Promise.all(to.map((index) => attempt(fleet[index % instances]!)));
            await clocked.settled();
          }
          expect(mostInOneWindow(compared, WINDOW_MS)).toBeLessThanOrEqual(limit + instances - 1);

          time += WINDOW_MS;
          const again: boolean[] = [];
          for (const instance of fleet) {
            again.push(await attempt(instance));
            await clocked.settled();
            // Each one's failure must not spend the others' room: a window passes between them.
            time += WINDOW_MS;
          }
          expect(again).toEqual(fleet.map(() => true));
        } finally {
          for (const instance of fleet) instance.shutdown();
        }
      }),
      { numRuns: RUNS, ...replay },
    );
  });
});
