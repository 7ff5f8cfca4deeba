import { DEFAULT_LIMITS } from '../../gateway/config';
import { allSecrets } from '../helpers/fixtures';
import { findLeaks } from '../helpers/logs';
import { type OwnedRedis, uniquePrefix } from '../helpers/redis';
import { type RecordingUpstream, startRecordingUpstream } from '../helpers/upstream';
import {
  type Answer,
  assertBuilt,
  closeClient,
  describeWithOwnedRedis,
  type GatewayProcess,
  hammer,
  type KeysFile,
  printRateLimitEvents,
  redisCommand,
  rollingState,
  startGatewayFleet,
  startOwnedRedis,
  statusCounts,
  stopAll,
  waitForState,
  writeKeysFile,
} from './harness';

/**
 * Three real gateway processes share one Redis: hit concurrently with three times a limit, they
 * admit exactly the limit, and every other answer is a 429 with a Retry-After that is never
 * earlier than the window's real reset (the key's TTL in Redis).
 */

const INSTANCES = 3;
const CONCURRENCY = 20;
const WINDOW_SECONDS = DEFAULT_LIMITS.windowMs / 1000;
const PUBLIC_KEY_HEADER = 'X-Service-Public-API-Key';

describeWithOwnedRedis('three gateway processes sharing one Redis', () => {
  const prefix = uniquePrefix('mp-shared');
  let redis: OwnedRedis;
  let upstream: RecordingUpstream;
  let keys: KeysFile;
  let fleet: GatewayProcess[];

  beforeAll(async () => {
    assertBuilt();
    [redis, upstream] = await Promise.all([startOwnedRedis(), startRecordingUpstream()]);
    keys = writeKeysFile();
    fleet = await startGatewayFleet(INSTANCES, {
      keysFile: keys,
      upstreamUrl: upstream.url,
      // Trusting the loopback proxy lets one keep-alive client present many client IPs.
      env: {
        REDIS_URL: redis.url,
        TOLLGATE_REDIS_PREFIX: prefix,
        TOLLGATE_TRUST_PROXY: 'loopback',
      },
    });
    await waitForState(fleet, 'shared');
  }, 30_000);

  afterAll(async () => {
    closeClient();
    await stopAll();
    await upstream.close();
  });

  /** Expects exactly `limit` 200s, and 429 `rate_limited` with a valid Retry-After for the rest. */
  async function expectExactAdmission(
    answers: Answer[],
    limit: number,
    redisKey: string,
  ): Promise<void> {
    // Ms until the key has room again, read after every answer: a fixed window's end, or when a
    // rolling window's oldest admission leaves it.
    const rolling = redisKey.includes(':rolling:')
      ? await rollingState(redis.port, redisKey)
      : undefined;
    const ttlMs =
      rolling === undefined
        ? Number(await redisCommand(redis.port, ['PTTL', redisKey]))
        : WINDOW_SECONDS * 1000 - rolling.oldestAgeMs;
    if (statusCounts(answers)[200] !== limit)
      printRateLimitEvents(`[shared-limits] count off for ${redisKey}`, fleet);
    expect(ttlMs).toBeGreaterThan(0);
    expect(statusCounts(answers)).toEqual({ 200: limit, 429: answers.length - limit });
    for (const answer of answers.filter((each) => each.status === 429)) {
      expect(answer.body).toMatchObject({
        status: 429,
        code: 'rate_limited',
        message: 'Too many requests',
      });
      const retryAfter = answer.headers['retry-after'];
      expect(retryAfter).toMatch(/^\d+$/);
      // Answered before the key was read, so never earlier than the time left then.
      expect(Number(retryAfter)).toBeGreaterThanOrEqual(Math.ceil(ttlMs / 1000));
      expect(Number(retryAfter)).toBeLessThanOrEqual(WINDOW_SECONDS);
      expect(answer.headers['ratelimit-policy']).toBeDefined();
    }
  }

  it('admits exactly the per-account limit when three instances get three times the limit at once', async () => {
    const limit = DEFAULT_LIMITS.authenticated;
    const { level1 } = keys.fixtures.keys;
    upstream.reset();
    const answers = await hammer(INSTANCES * limit, CONCURRENCY, (index) => ({
      url: fleet[index % INSTANCES]?.url ?? '',
      path: '/api/v1/transactions/',
      headers: { authorization: `Bearer ${level1.secretKey}` },
    }));

    const key = `${prefix}authenticated:rolling:account:{acct_open}`;
    await expectExactAdmission(answers, limit, key);
    expect(
      upstream.requests.filter((request) => request.url === '/api/v1/transactions/'),
    ).toHaveLength(limit);
    const perInstance = fleet.map(
      (_, instance) =>
        answers.filter((answer, index) => index % INSTANCES === instance && answer.status === 200)
          .length,
    );
    const redisCount = (await rollingState(redis.port, key))?.count;
    console.log(
      `[shared-limits] authenticated scope: ${answers.length} requests over ${INSTANCES} instances, ` +
        `${CONCURRENCY} in flight: admitted ${statusCounts(answers)[200]} (limit ${limit}); ` +
        `per instance ${perInstance.join('/')}; Redis counted ${redisCount}: refused requests spend nothing`,
    );
    expect(redisCount).toBe(limit);
  });

  it.each([1, 2, 3])(
    'admits exactly the per-IP checkout limit across three instances (run %i)',
    async (run) => {
      const limit = DEFAULT_LIMITS.checkoutCreate;
      const clientIp = `198.51.100.${run}`;
      const answers = await hammer(INSTANCES * limit, CONCURRENCY, (index) => ({
        url: fleet[index % INSTANCES]?.url ?? '',
        method: 'POST',
        path: '/api/v1/checkout/',
        headers: {
          [PUBLIC_KEY_HEADER]: keys.fixtures.keys.level1.publishableKey,
          'x-forwarded-for': clientIp,
        },
        body: { amount: 100, currency: 'EUR' },
      }));

      await expectExactAdmission(answers, limit, `${prefix}checkout-create:ip:${clientIp}`);
      console.log(
        `[shared-limits] checkout-create run ${run}: ${answers.length} requests, admitted ${statusCounts(answers)[200]} (limit ${limit})`,
      );
    },
  );

  it('reports shared counters on /healthz and logs no secret', async () => {
    for (const gateway of fleet) {
      expect(await gateway.rateLimits()).toBe('shared');
      expect(gateway.events('rate_limit.degraded')).toEqual([]);
      expect(findLeaks(gateway.lines.join('\n'), allSecrets(keys.fixtures))).toEqual([]);
    }
  });
});
