import { DEFAULT_LIMITS } from '../../gateway/config';
import { freePort, uniquePrefix } from '../helpers/redis';
import { type RecordingUpstream, startRecordingUpstream } from '../helpers/upstream';
import {
  assertBuilt,
  closeClient,
  describeWithOwnedRedis,
  type GatewayProcess,
  hammer,
  type KeysFile,
  masterPortOf,
  type OwnedCluster,
  printRateLimitEvents,
  type RequestSpec,
  redisCommand,
  rollingState,
  requestOnce,
  sleep,
  startGatewayFleet,
  startRedisCluster,
  statusCounts,
  stopAll,
  waitForState,
  waitUntil,
  writeKeysFile,
} from './harness';

/**
 * Three real gateway processes on a real three-master Redis Cluster (REDIS_CLUSTER_NODES): the
 * exact-admission property holds, whichever master holds a key. Each master first answers the
 * increment script with NOSCRIPT (the script is never loaded cluster-wide); the adapter runs it
 * with EVAL, routed by key.
 */

const INSTANCES = 3;
const CONCURRENCY = 20;
const PUBLIC_KEY_HEADER = 'X-Service-Public-API-Key';
/** The bound for a gateway started while Redis is down. */
const MAX_RECOVERY_MS = 5000;
/** Client IPs per master: the test picks addresses whose keys land on each master in turn. */
const CLIENTS_PER_MASTER = 2;

describeWithOwnedRedis('gateway processes on a three-master Redis Cluster', () => {
  const prefix = uniquePrefix('mp-cluster');
  let cluster: OwnedCluster;
  let upstream: RecordingUpstream;
  let keys: KeysFile;
  let fleet: GatewayProcess[];
  let sharedAfterMs: number;

  beforeAll(async () => {
    assertBuilt();
    const ports = [await freePort(), await freePort(), await freePort()];
    upstream = await startRecordingUpstream();
    keys = writeKeysFile();
    // The gateways start before the cluster exists: they must find it by themselves.
    fleet = await startGatewayFleet(INSTANCES, {
      keysFile: keys,
      upstreamUrl: upstream.url,
      env: {
        REDIS_CLUSTER_NODES: ports.map((port) => `127.0.0.1:${port}`).join(','),
        TOLLGATE_REDIS_PREFIX: prefix,
        TOLLGATE_TRUST_PROXY: 'loopback',
      },
    });
    await waitForState(fleet, 'degraded');
    const started = Date.now();
    cluster = await startRedisCluster(ports);
    const formedAt = Date.now();
    sharedAfterMs = await waitForState(fleet, 'shared', MAX_RECOVERY_MS);
    console.log(
      `[redis-cluster] three masters on ${cluster.addresses.join(', ')} formed in ${formedAt - started} ms; ` +
        `all ${INSTANCES} gateways (started before it) shared ${sharedAfterMs} ms later`,
    );
  }, 45_000);

  afterAll(async () => {
    closeClient();
    await stopAll();
    await upstream.close();
  });

  it('serves degraded before the cluster exists and shares counts within 5 s of it forming', async () => {
    expect(sharedAfterMs).toBeLessThan(MAX_RECOVERY_MS);
    for (const gateway of fleet) {
      expect(await gateway.rateLimits()).toBe('shared');
      expect(gateway.events('rate_limit.degraded')).toHaveLength(1);
      expect(gateway.events('rate_limit.shared')).toHaveLength(1);
    }
  });

  it('admits exactly the per-account limit when three instances get three times the limit at once', async () => {
    const limit = DEFAULT_LIMITS.authenticated;
    const answers = await hammer(INSTANCES * limit, CONCURRENCY, (index) => ({
      url: fleet[index % INSTANCES]?.url ?? '',
      path: '/api/v1/transactions/',
      headers: { authorization: `Bearer ${keys.fixtures.keys.level1.secretKey}` },
    }));
    if (statusCounts(answers)[200] !== limit)
      printRateLimitEvents('[redis-cluster] per-account count off', fleet);
    expect(statusCounts(answers)).toEqual({ 200: limit, 429: (INSTANCES - 1) * limit });
    for (const answer of answers.filter((each) => each.status === 429)) {
      expect(answer.body).toMatchObject({ code: 'rate_limited' });
      expect(Number(answer.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(Number(answer.headers['retry-after'])).toBeLessThanOrEqual(
        DEFAULT_LIMITS.windowMs / 1000,
      );
    }
    console.log(
      `[redis-cluster] authenticated scope: ${answers.length} requests over ${INSTANCES} instances, admitted ${statusCounts(answers)[200]} (limit ${limit})`,
    );
  });

  it("counts a publishable key's requests in its account's scope and its per-IP cap, all or nothing, on the account's master", async () => {
    const limit = DEFAULT_LIMITS.publishablePayments;
    const clientIp = '198.51.100.45';
    const answers = await hammer(INSTANCES * limit, CONCURRENCY, (index) => ({
      url: fleet[index % INSTANCES]?.url ?? '',
      method: 'POST',
      path: '/api/v1/payment/status/',
      headers: {
        [PUBLIC_KEY_HEADER]: keys.fixtures.keys.level1.publishableKey,
        'x-forwarded-for': clientIp,
      },
      body: { id: 'pay_1' },
    }));
    if (statusCounts(answers)[200] !== limit)
      printRateLimitEvents('[redis-cluster] publishable cap count off', fleet);
    expect(statusCounts(answers)).toEqual({ 200: limit, 429: (INSTANCES - 1) * limit });
    // Both counters share the account's hash tag, so one script call reads and counts both; the
    // refused requests spent neither.
    const accountKey = `${prefix}payments:rolling:account:{acct_open}`;
    const capKey = `${prefix}payments-publishable:account:{acct_open}:ip:${clientIp}`;
    const master = await masterPortOf(cluster, accountKey);
    expect(await masterPortOf(cluster, capKey)).toBe(master);
    expect(await redisCommand(master, ['GET', capKey])).toBe(String(limit));
    expect((await rollingState(master, accountKey))?.count).toBe(limit);
  });

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

  it('admits exactly the per-IP limit for clients whose keys live on every master', async () => {
    const limit = DEFAULT_LIMITS.checkoutCreate;
    const byMaster = new Map<number, string[]>(cluster.nodes.map((node) => [node.port, []]));
    for (
      let host = 1;
      [...byMaster.values()].some((ips) => ips.length < CLIENTS_PER_MASTER);
      host++
    ) {
      const ip = `198.51.${100 + (host >> 8)}.${host & 255}`;
      const ips = byMaster.get(await masterPortOf(cluster, `${prefix}checkout-create:ip:${ip}`));
      if (ips !== undefined && ips.length < CLIENTS_PER_MASTER) ips.push(ip);
    }
    const clientIps = [...byMaster.values()].flat();
    const perClient = INSTANCES * limit;
    const answers = await hammer(clientIps.length * perClient, CONCURRENCY, (index) =>
      checkout(index, clientIps[index % clientIps.length] ?? ''),
    );
    const admitted = clientIps.map(
      (_, client) =>
        answers.filter(
          (answer, index) => index % clientIps.length === client && answer.status === 200,
        ).length,
    );
    if (admitted.some((count) => count !== limit))
      printRateLimitEvents('[redis-cluster] per-IP count off', fleet);
    expect(admitted).toEqual(clientIps.map(() => limit));
    expect(statusCounts(answers)).toEqual({
      200: clientIps.length * limit,
      429: clientIps.length * (perClient - limit),
    });

    // Where the keys live: every master holds this test's counters for its clients.
    const keysPerMaster = await Promise.all(
      cluster.nodes.map(
        async (node) =>
          ((await redisCommand(node.port, ['KEYS', `${prefix}checkout-create:*`])) as string[])
            .length,
      ),
    );
    console.log(
      `[redis-cluster] checkout-create: ${clientIps.length} clients x ${perClient} requests, admitted ${admitted.join('/')} ` +
        `(limit ${limit}); keys per master ${keysPerMaster.join('/')}`,
    );
    expect(keysPerMaster).toEqual(cluster.nodes.map(() => CLIENTS_PER_MASTER));
  });

  it('ran the script with EVAL on every master, where the cached SHA answered NOSCRIPT', async () => {
    const evalCalls = await Promise.all(
      cluster.nodes.map(async (node) => {
        const stats = String(await redisCommand(node.port, ['INFO', 'commandstats']));
        return Number(/cmdstat_eval:calls=(\d+)/.exec(stats)?.[1] ?? 0);
      }),
    );
    console.log(`[redis-cluster] EVAL fallbacks per master: ${evalCalls.join('/')}`);
    expect(evalCalls.every((calls) => calls > 0)).toBe(true);
  });

  it('answers at once and never runs the increment later when a master drops the connection it was sent on', async () => {
    const clientIp = '192.0.2.1';
    const key = `${prefix}checkout-create:ip:${clientIp}`;
    const master = await masterPortOf(cluster, key);
    const send = () => requestOnce(checkout(0, clientIp));
    expect((await send()).status).toBe(200);
    expect(await redisCommand(master, ['GET', key])).toBe('1');

    // The master holds the increment (paused writes), then drops every client connection.
    const pauseMs = 400;
    await redisCommand(master, ['CLIENT', 'PAUSE', String(pauseMs), 'WRITE']);
    const pending = send();
    await sleep(50);
    await redisCommand(master, ['CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes']);
    const answer = await pending;
    await sleep(pauseMs);

    console.log(
      `[redis-cluster] connection dropped with an increment in flight: answered ${answer.status} in ${answer.ms.toFixed(1)} ms`,
    );
    expect(answer.status).toBe(200);
    expect(answer.ms).toBeLessThan(pauseMs);
    expect(await redisCommand(master, ['GET', key])).toBe('1');

    // After the cool-down the gateway reconnects to that master and counts there again.
    await waitUntil(
      async () => {
        await send();
        return Number(await redisCommand(master, ['GET', key])) > 1;
      },
      5000,
      200,
    );
  });
});
