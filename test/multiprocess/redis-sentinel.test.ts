import { DEFAULT_LIMITS } from '../../gateway/config';
import { type OwnedRedis, uniquePrefix } from '../helpers/redis';
import { type RecordingUpstream, startRecordingUpstream } from '../helpers/upstream';
import {
  assertBuilt,
  closeClient,
  describeWithOwnedRedis,
  type GatewayProcess,
  hammer,
  type KeysFile,
  type OwnedSentinel,
  type RequestSpec,
  redisCommand,
  startGatewayFleet,
  startOwnedRedis,
  startSentinel,
  statusCounts,
  stopAll,
  waitForState,
  waitUntil,
  writeKeysFile,
} from './harness';

/**
 * Real gateway processes that find their Redis through a real Sentinel (REDIS_SENTINELS,
 * REDIS_SENTINEL_NAME): they share counts exactly on the master Sentinel names, and when that
 * master dies and Sentinel promotes its replica, they keep answering and share counts on the new
 * master without a restart.
 */

const INSTANCES = 3;
const LIMIT = DEFAULT_LIMITS.checkoutCreate;
const PUBLIC_KEY_HEADER = 'X-Service-Public-API-Key';
const DOWN_AFTER_MS = 500;
/** Sentinel's detection, election and promotion, then the gateways' reconnection. */
const MAX_FAILOVER_MS = 15_000;

describeWithOwnedRedis('gateway processes behind Redis Sentinel', () => {
  const prefix = uniquePrefix('mp-sentinel');
  let master: OwnedRedis;
  let replica: OwnedRedis;
  let sentinel: OwnedSentinel;
  let upstream: RecordingUpstream;
  let keys: KeysFile;
  let fleet: GatewayProcess[];

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

  beforeAll(async () => {
    assertBuilt();
    // No 5 s wait before the replica's first sync.
    [master, upstream] = await Promise.all([
      startOwnedRedis(undefined, ['--repl-diskless-sync-delay', '0']),
      startRecordingUpstream(),
    ]);
    replica = await startOwnedRedis(undefined, ['--replicaof', '127.0.0.1', String(master.port)]);
    await waitUntil(
      async () =>
        String(await redisCommand(replica.port, ['INFO', 'replication'])).includes(
          'master_link_status:up',
        ),
      10_000,
      50,
    );
    sentinel = await startSentinel({
      masterPort: master.port,
      replicaPort: replica.port,
      downAfterMs: DOWN_AFTER_MS,
    });
    // Without a replica Sentinel knows of, there is no failover.
    await waitUntil(
      async () => {
        const replicas = (await redisCommand(sentinel.port, [
          'SENTINEL',
          'REPLICAS',
          sentinel.name,
        ])) as unknown[];
        return replicas.length === 1;
      },
      10_000,
      50,
    );
    keys = writeKeysFile();
    fleet = await startGatewayFleet(INSTANCES, {
      keysFile: keys,
      upstreamUrl: upstream.url,
      env: {
        REDIS_SENTINELS: sentinel.address,
        REDIS_SENTINEL_NAME: sentinel.name,
        TOLLGATE_REDIS_PREFIX: prefix,
        TOLLGATE_TRUST_PROXY: 'loopback',
      },
    });
    await waitForState(fleet, 'shared');
  }, 45_000);

  afterAll(async () => {
    closeClient();
    await stopAll();
    await upstream.close();
  });

  it('admits exactly the per-IP limit across three instances on the master Sentinel names', async () => {
    const answers = await hammer(INSTANCES * LIMIT, 20, (index) =>
      checkout(index, '198.51.100.20'),
    );
    expect(statusCounts(answers)).toEqual({ 200: LIMIT, 429: (INSTANCES - 1) * LIMIT });
    expect(
      Number(await redisCommand(master.port, ['GET', `${prefix}checkout-create:ip:198.51.100.20`])),
    ).toBe(LIMIT);
    console.log(
      `[redis-sentinel] ${answers.length} requests over ${INSTANCES} instances, admitted ${statusCounts(answers)[200]} (limit ${LIMIT})`,
    );
  });

  it('keeps answering when the master dies, and shares counts on the promoted replica without a restart', async () => {
    const killedAt = Date.now();
    await master.stop();
    const duringFailover = await hammer(INSTANCES * 10, 6, (index) =>
      checkout(index, `198.51.100.${30 + index}`),
    );
    expect(statusCounts(duringFailover)).toEqual({ 200: duringFailover.length });

    await waitUntil(
      async () => (await sentinel.masterPort()) === replica.port,
      MAX_FAILOVER_MS,
      50,
    );
    const promotedAfterMs = Date.now() - killedAt;
    await waitForState(fleet, 'shared', MAX_FAILOVER_MS);
    console.log(
      `[redis-sentinel] master killed: Sentinel promoted the replica after ${promotedAfterMs} ms, ` +
        `all ${INSTANCES} gateways shared again after ${Date.now() - killedAt} ms`,
    );

    const answers = await hammer(INSTANCES * LIMIT, 20, (index) =>
      checkout(index, '198.51.100.21'),
    );
    expect(statusCounts(answers)).toEqual({ 200: LIMIT, 429: (INSTANCES - 1) * LIMIT });
    expect(
      Number(
        await redisCommand(replica.port, ['GET', `${prefix}checkout-create:ip:198.51.100.21`]),
      ),
    ).toBe(LIMIT);
    for (const gateway of fleet) expect(gateway.events('rate_limit.degraded')).toHaveLength(1);
  }, 30_000);
});
