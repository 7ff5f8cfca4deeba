import { DEFAULT_LIMITS } from '../../gateway/config';
import { freePort, type OwnedRedis, uniquePrefix } from '../helpers/redis';
import { type RecordingUpstream, startRecordingUpstream } from '../helpers/upstream';
import {
  assertBuilt,
  closeClient,
  describeTimes,
  describeWithOwnedRedis,
  type GatewayProcess,
  hammer,
  type KeysFile,
  quantileMs,
  type RequestSpec,
  redisCommand,
  sleep,
  startGatewayFleet,
  startOwnedRedis,
  startTraffic,
  statusCounts,
  stopAll,
  waitForState,
  waitUntil,
  writeKeysFile,
} from './harness';

/**
 * Three real gateway processes through Redis outages: started while Redis is down, then Redis
 * stopped (SIGKILL) and restarted while traffic flows. The gateways keep answering (no 5xx, no
 * long wait), count in memory meanwhile (local count x TOLLGATE_EXPECTED_INSTANCES), log one
 * warning per outage, and share counts again by themselves.
 */

const INSTANCES = 3;
const LIMIT = DEFAULT_LIMITS.checkoutCreate;
const PUBLIC_KEY_HEADER = 'X-Service-Public-API-Key';
/** The bounds. */
const MAX_WAIT_MS = 500;
const MAX_RECOVERY_MS = 5000;
/** Steady traffic, not a flood: the suites share two cores with other suites. */
const TRAFFIC_CONCURRENCY = 6;

describeWithOwnedRedis('gateway processes through Redis outages', () => {
  const prefix = uniquePrefix('mp-outage');
  let redisPort: number;
  let redis: OwnedRedis | undefined;
  let upstream: RecordingUpstream;
  let keys: KeysFile;
  let fleet: GatewayProcess[];

  /** `POST /checkout/` (30 per client IP) through instance `index % 3`, as client `clientIp`. */
  const checkout = (index: number, clientIp: string): RequestSpec => ({
    url: fleet[index % INSTANCES]?.url ?? '',
    method: 'POST',
    path: '/api/v1/checkout/',
    headers: {
      [PUBLIC_KEY_HEADER]: keys.fixtures.keys.level1.publishableKey,
      'x-forwarded-for': clientIp,
    },
    body: { amount: 100, currency: 'EUR' },
  });
  const states = async (): Promise<string[]> =>
    Promise.all(fleet.map((gateway) => gateway.rateLimits()));

  beforeAll(async () => {
    assertBuilt();
    redisPort = await freePort();
    upstream = await startRecordingUpstream();
    keys = writeKeysFile();
    fleet = await startGatewayFleet(INSTANCES, {
      keysFile: keys,
      upstreamUrl: upstream.url,
      env: {
        REDIS_URL: `redis://127.0.0.1:${redisPort}`,
        TOLLGATE_REDIS_PREFIX: prefix,
        TOLLGATE_EXPECTED_INSTANCES: String(INSTANCES),
        TOLLGATE_TRUST_PROXY: 'loopback',
      },
    });
  }, 30_000);

  afterAll(async () => {
    closeClient();
    await stopAll();
    await upstream.close();
  });

  it('serves in degraded mode when started while Redis is down, and shares counts within 5 s of Redis coming up', async () => {
    expect(await states()).toEqual(fleet.map(() => 'degraded'));
    await waitUntil(
      () => fleet.every((gateway) => gateway.events('rate_limit.degraded').length > 0),
      3000,
    );

    // Each instance counts alone, scaled by the expected instances: it admits limit / instances.
    const degradedShare = Math.floor(LIMIT / INSTANCES);
    const alone = await hammer(LIMIT, 10, () => checkout(0, '203.0.113.1'));
    expect(statusCounts(alone)).toEqual({ 200: degradedShare, 429: LIMIT - degradedShare });

    redis = await startOwnedRedis(redisPort);
    const upAt = Date.now();
    const recoveryMs = await waitForState(fleet, 'shared', MAX_RECOVERY_MS);
    console.log(
      `[redis-outage] gateways started with Redis down: all ${INSTANCES} report shared ${Date.now() - upAt} ms after Redis came up`,
    );
    expect(recoveryMs).toBeLessThan(MAX_RECOVERY_MS);

    const shared = await hammer(INSTANCES * LIMIT, 20, (index) => checkout(index, '203.0.113.2'));
    expect(statusCounts(shared)).toEqual({ 200: LIMIT, 429: (INSTANCES - 1) * LIMIT });
    expect(
      Number(await redisCommand(redisPort, ['GET', `${prefix}checkout-create:ip:203.0.113.2`])),
    ).toBe(LIMIT);
    console.log(
      `[redis-outage] after recovery: ${shared.length} requests over ${INSTANCES} instances, admitted ${statusCounts(shared)[200]} (limit ${LIMIT})`,
    );
    for (const gateway of fleet) {
      expect(gateway.events('rate_limit.degraded')).toHaveLength(1);
      expect(gateway.events('rate_limit.shared')).toHaveLength(1);
    }
  });

  it('answers every request without a 5xx or a long wait while Redis is killed and restarted, then shares counts again', async () => {
    expect(await states()).toEqual(fleet.map(() => 'shared'));
    // Every request comes from a fresh client IP, so every one is counted (in Redis or memory).
    let clients = 0;
    const traffic = startTraffic(TRAFFIC_CONCURRENCY, (index) => {
      clients += 1;
      return checkout(
        index,
        `10.${(clients >> 16) & 255}.${(clients >> 8) & 255}.${clients & 255}`,
      );
    });
    await sleep(700);
    const killedAt = Date.now();
    await redis?.stop();
    await waitForState(fleet, 'degraded', 2000);
    await sleep(1000);
    redis = await startOwnedRedis(redisPort);
    const upAt = Date.now();
    const recoveryMs = await waitForState(fleet, 'shared', MAX_RECOVERY_MS);
    await sleep(500);
    const answers = await traffic.stop();

    const failures = answers.filter((answer) => answer.status === 0 || answer.status >= 500);
    const slowest = quantileMs(answers, 1);
    const duringOutage = answers.filter(
      (answer) => answer.sentAt >= killedAt && answer.sentAt < upAt + recoveryMs,
    );
    console.log(
      `[redis-outage] Redis killed and restarted under traffic: ${answers.length} requests, statuses ` +
        `${JSON.stringify(statusCounts(answers))}; all: ${describeTimes(answers)}; the ${duringOutage.length} sent while ` +
        `Redis was down or reconnecting: ${describeTimes(duringOutage)}; shared again ${recoveryMs} ms after Redis came up`,
    );
    expect(failures).toEqual([]);
    expect(statusCounts(answers)).toEqual({ 200: answers.length });
    expect(duringOutage.length).toBeGreaterThan(INSTANCES * 10);
    expect(slowest).toBeLessThan(MAX_WAIT_MS);
    expect(recoveryMs).toBeLessThan(MAX_RECOVERY_MS);

    // One warning per outage and instance (two outages so far), not one per request.
    for (const gateway of fleet) {
      expect(gateway.events('rate_limit.degraded')).toHaveLength(2);
      expect(gateway.events('rate_limit.shared')).toHaveLength(2);
    }

    // The restarted Redis (empty: it keeps nothing on disk) counts again: the traffic after
    // recovery is in it, and a fresh client gets exactly the limit across the three instances.
    const counted = (await redisCommand(redisPort, [
      'KEYS',
      `${prefix}checkout-create:ip:10.*`,
    ])) as string[];
    expect(counted.length).toBeGreaterThan(0);
    const shared = await hammer(INSTANCES * LIMIT, 20, (index) => checkout(index, '203.0.113.3'));
    expect(statusCounts(shared)).toEqual({ 200: LIMIT, 429: (INSTANCES - 1) * LIMIT });
    console.log(
      `[redis-outage] after the restart: ${shared.length} requests over ${INSTANCES} instances, admitted ${statusCounts(shared)[200]} (limit ${LIMIT})`,
    );
  });

  it('answers within the command timeout while Redis hangs (SIGSTOP), and shares counts again once it answers', async () => {
    expect(await states()).toEqual(fleet.map(() => 'shared'));
    const hung = redis?.process;
    let clients = 0;
    const traffic = startTraffic(TRAFFIC_CONCURRENCY, (index) => {
      clients += 1;
      return checkout(index, `10.200.${(clients >> 8) & 255}.${clients & 255}`);
    });
    await sleep(500);
    const stoppedAt = Date.now();
    hung?.kill('SIGSTOP');
    await sleep(1500);
    hung?.kill('SIGCONT');
    const resumedAt = Date.now();
    const recoveryMs = await waitForState(fleet, 'shared', MAX_RECOVERY_MS);
    await sleep(300);
    const answers = await traffic.stop();

    const duringHang = answers.filter(
      (answer) => answer.sentAt >= stoppedAt && answer.sentAt < resumedAt,
    );
    const slowest = quantileMs(answers, 1);
    console.log(
      `[redis-outage] Redis hung 1.5 s under traffic: ${answers.length} requests, statuses ${JSON.stringify(statusCounts(answers))}; ` +
        `all: ${describeTimes(answers)}; the ${duringHang.length} sent during the hang: ${describeTimes(duringHang)}; ` +
        `shared again ${recoveryMs} ms after it resumed`,
    );
    expect(statusCounts(answers)).toEqual({ 200: answers.length });
    expect(duringHang.length).toBeGreaterThan(INSTANCES * 10);
    expect(slowest).toBeLessThan(MAX_WAIT_MS);
    for (const gateway of fleet) {
      expect(gateway.events('rate_limit.degraded')).toHaveLength(3);
      expect(gateway.events('rate_limit.shared')).toHaveLength(3);
    }
    const shared = await hammer(INSTANCES * LIMIT, 20, (index) => checkout(index, '203.0.113.4'));
    expect(statusCounts(shared)).toEqual({ 200: LIMIT, 429: (INSTANCES - 1) * LIMIT });
  });
});
