import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { createAdminApp } from '../../gateway/admin';
import { generateKey } from '../../lib/model/key-format';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { createFixtures } from '../helpers/fixtures';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import { captureLogs } from '../helpers/logs';
import {
  describeWithRedis,
  type OwnedRedis,
  startRedisServer,
  uniquePrefix,
  untilShared,
} from '../helpers/redis';
import { samples, valueOf } from '../helpers/metrics';

/**
 * `GET /metrics` on the admin listener: a scripted mix of allowed, refused, limited
 * and degraded requests is found counted with the right labels, and 10,000 distinct keys and
 * client addresses add no series (no key id, account or address is ever a label).
 *
 * The Redis is a redis-server of this test's own (it is paused and stopped here).
 */

const WALLETS = '/api/v1/wallets/';
const CHECKOUT = '/api/v1/checkout/';

function seriesOf(all: Map<string, number>, prefix: string): string[] {
  return [...all.keys()].filter((series) => series.startsWith(prefix));
}

describeWithRedis('/metrics after a scripted mix of requests', () => {
  const fixtures = createFixtures();
  let owned: OwnedRedis;
  let redis: LimiterRedisConnection;
  let gateway: TestGateway;
  let admin: http.Server;
  let adminPort: number;

  const scrape = (): Promise<{ status: number; type: string; text: string }> =>
    new Promise((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port: adminPort, path: '/metrics', agent: false }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (text += chunk));
          res.on('end', () => {
            resolve({
              status: res.statusCode ?? 0,
              type: String(res.headers['content-type']),
              text,
            });
          });
        })
        .on('error', reject);
    });

  beforeAll(async () => {
    owned = await startRedisServer();
    redis = createLimiterRedis({ url: owned.url });
    await untilShared(redis);
    gateway = await startTestGateway({
      fixtures,
      redis,
      redisPrefix: uniquePrefix('metrics'),
      limits: { checkoutCreate: 2 },
    });
    const adminApp = createAdminApp({
      directory: fixtures.ring,
      tokenSha256: undefined,
      logger: captureLogs().logger,
      readOnlyReason: 'test',
      readiness: gateway.app.readiness,
      metrics: gateway.app.metrics,
    });
    admin = adminApp.listen(0, '127.0.0.1');
    await new Promise((resolve) => admin.once('listening', resolve));
    adminPort = (admin.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => admin.close(resolve));
    await gateway.close();
    await redis.close();
    await owned.stop();
  });

  it('counts each kind of request with bounded labels, and 10,000 distinct keys and addresses add no series', async () => {
    const { keys } = fixtures;
    // Allowed, shared counters.
    expect(
      (await gateway.send({ path: WALLETS, headers: bearer(keys.admin.secretKey) })).status,
    ).toBe(200);
    expect(
      (await gateway.send({ path: WALLETS, headers: bearer(keys.level1.secretKey) })).status,
    ).toBe(200);
    // Refused: no credentials, a role too low, an address off the whitelist.
    expect((await gateway.send({ path: WALLETS })).status).toBe(401);
    expect(
      (
        await gateway.send({
          method: 'POST',
          path: '/api/v1/payouts/',
          headers: bearer(keys.level1.secretKey),
          body: { amount: 1 },
        })
      ).status,
    ).toBe(403);
    expect(
      (await gateway.send({ path: WALLETS, headers: bearer(keys.walled.secretKey) })).status,
    ).toBe(403);
    // Limited: the third checkout from one address, with a limit of 2.
    const checkout = {
      method: 'POST',
      path: CHECKOUT,
      headers: { 'x-service-public-api-key': keys.level2.publishableKey },
      body: { amount: 5 },
      from: '127.0.0.3',
    };
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await gateway.send(checkout)).status);
    expect(statuses).toEqual([200, 200, 429]);
    // The upstream hangs up: 502.
    gateway.upstream.respond = (_request, res) => res.socket?.destroy();
    expect(
      (await gateway.send({ path: WALLETS, headers: bearer(keys.level2.secretKey) })).status,
    ).toBe(502);
    gateway.upstream.reset();

    // Degraded: Redis stops answering; the command times out and limits fall back to memory.
    const control = new Redis(owned.url);
    await control.call('CLIENT', 'PAUSE', '1500', 'ALL');
    control.disconnect();
    expect(
      (await gateway.send({ path: WALLETS, headers: bearer(keys.level3.secretKey) })).status,
    ).toBe(200);
    expect(gateway.app.rateLimitState()).toBe('degraded');
    expect(
      (await gateway.send({ path: WALLETS, headers: bearer(keys.level3.secretKey) })).status,
    ).toBe(200);

    const scraped = await scrape();
    expect(scraped.status).toBe(200);
    expect(scraped.type).toMatch(/^text\/plain; version=0\.0\.4/);
    const all = samples(scraped.text);
    const decisions = (labels: Record<string, string>): number | undefined =>
      valueOf(all, 'tollgate_decisions_total', labels);
    expect(
      decisions({ route: WALLETS, outcome: 'allowed', code: 'none', rate_limits: 'shared' }),
    ).toBe(3); // admin, level-1, and level-2 whose upstream hung up
    for (const code of ['missing_credentials', 'ip_not_whitelisted']) {
      expect(decisions({ route: WALLETS, outcome: 'refused', code, rate_limits: 'shared' })).toBe(
        1,
      );
    }
    expect(
      decisions({
        route: '/api/v1/payouts/',
        outcome: 'refused',
        code: 'insufficient_role',
        rate_limits: 'shared',
      }),
    ).toBe(1);
    expect(
      decisions({ route: CHECKOUT, outcome: 'allowed', code: 'none', rate_limits: 'shared' }),
    ).toBe(2);
    expect(
      decisions({
        route: CHECKOUT,
        outcome: 'limited',
        code: 'rate_limited',
        rate_limits: 'shared',
      }),
    ).toBe(1);
    expect(
      decisions({ route: WALLETS, outcome: 'allowed', code: 'none', rate_limits: 'degraded' }),
    ).toBe(2);

    expect(valueOf(all, 'tollgate_http_requests_total', { status: '200' })).toBe(6);
    expect(valueOf(all, 'tollgate_http_requests_total', { status: '401' })).toBe(1);
    expect(valueOf(all, 'tollgate_http_requests_total', { status: '403' })).toBe(2);
    expect(valueOf(all, 'tollgate_http_requests_total', { status: '429' })).toBe(1);
    expect(valueOf(all, 'tollgate_http_requests_total', { status: '502' })).toBe(1);

    expect(valueOf(all, 'tollgate_upstream_errors_total', { kind: 'unavailable' })).toBe(1);
    expect(valueOf(all, 'tollgate_upstream_request_duration_seconds_count')).toBe(6);
    expect(valueOf(all, 'tollgate_upstream_up')).toBe(1);

    expect(
      valueOf(all, 'tollgate_redis_command_failures_total', {
        command: 'EVALSHA',
        reason: 'timeout',
      }),
    ).toBe(1);
    // Every request that reached the limits while Redis answered sent one EVALSHA.
    expect(
      valueOf(all, 'tollgate_redis_command_duration_seconds_count', { command: 'EVALSHA' }),
    ).toBeGreaterThanOrEqual(7);
    expect(valueOf(all, 'tollgate_rate_limit_degradations_total')).toBe(1);
    expect(valueOf(all, 'tollgate_rate_limit_degraded_seconds_total')).toBeGreaterThan(0);
    expect(
      valueOf(all, 'tollgate_rate_limit_state', { scope: 'payments', state: 'degraded' }),
    ).toBe(1);
    expect(valueOf(all, 'tollgate_rate_limit_state', { scope: 'payments', state: 'shared' })).toBe(
      0,
    );

    expect(valueOf(all, 'tollgate_keys_loaded')).toBe(fixtures.ring.records.length);
    expect(valueOf(all, 'tollgate_keys_age_seconds')).toBeGreaterThanOrEqual(0);
    expect(valueOf(all, 'tollgate_ready')).toBe(1);
    expect(valueOf(all, 'process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(valueOf(all, 'nodejs_heap_size_used_bytes')).toBeGreaterThan(0);

    // Cardinality: 10,000 distinct keys, accounts and client addresses, half of them unknown keys.
    const many = 10_000;
    const pairs = Array.from({ length: many / 2 }, (_, i) => ({
      account: `acct_card_${i}`,
      id: `key_card_${i}`,
      secretKey: generateKey('secret', 'test'),
    }));
    const ring = KeyRing.fromDocument({
      accounts: [
        ...fixtures.document.accounts,
        ...pairs.map((pair) => ({
          id: pair.account,
          keys: [
            {
              id: pair.id,
              publishableKey: generateKey('publishable', 'test'),
              secretKeySha256: sha256(pair.secretKey).toString('hex'),
              role: 'level-1',
            },
          ],
        })),
      ],
    });
    const crowd = await startTestGateway({
      fixtures: { ...fixtures, ring },
      redis,
      redisPrefix: uniquePrefix('metrics-cardinality'),
    });
    try {
      // Redis answers again (the pause is over): shared counters, as in production.
      const deadline = Date.now() + 5000;
      while (crowd.app.rateLimitState() !== 'shared' && Date.now() < deadline) {
        await crowd.send({ path: WALLETS, headers: bearer(keys.admin.secretKey) });
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(crowd.app.rateLimitState()).toBe('shared');
      // One allowed and one refused request make the series a request can make.
      await crowd.send({ path: WALLETS, headers: bearer(keys.admin.secretKey) });
      await crowd.send({ path: WALLETS, headers: bearer(generateKey('secret', 'test')) });
      const before = samples(await crowd.app.metrics.text());
      // On a busy machine a Redis command may miss its 100 ms and a few requests count in memory
      // (`rate_limits="degraded"`): sum over where they were counted.
      const decided = (all: Map<string, number>, outcome: string, code: string): number =>
        (['shared', 'degraded'] as const).reduce(
          (sum, state) =>
            sum +
            (valueOf(all, 'tollgate_decisions_total', {
              route: WALLETS,
              outcome,
              code,
              rate_limits: state,
            }) ?? 0),
          0,
        );

      const address = (i: number): string => `127.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < many) {
          const i = next++;
          const secret = i % 2 === 0 ? pairs[i >> 1]?.secretKey : generateKey('secret', 'test');
          await crowd.send({ path: WALLETS, headers: bearer(secret ?? ''), from: address(i) });
        }
      };
      await Promise.all(Array.from({ length: 8 }, worker));

      const text = await crowd.app.metrics.text();
      const after = samples(text);
      expect(decided(after, 'allowed', 'none')).toBe(decided(before, 'allowed', 'none') + many / 2);
      expect(decided(after, 'refused', 'invalid_api_key')).toBe(
        decided(before, 'refused', 'invalid_api_key') + many / 2,
      );
      // No series for any key, account or address: the only ones a crowd may add are those of a
      // slow Redis (a timeout, decisions counted in memory), from closed sets too.
      const added = seriesOf(after, 'tollgate_').filter((series) => !before.has(series));
      expect(
        added.filter(
          (series) =>
            !/rate_limits="degraded"|^tollgate_redis_command_failures_total\{command="EVALSHA",reason="timeout"\}/.test(
              series,
            ),
        ),
      ).toEqual([]);
      expect(added.length).toBeLessThanOrEqual(3);
      expect(text).not.toMatch(/acct_card_|key_card_|127\.10\d\./);
    } finally {
      await crowd.close();
    }
  }, 240_000);
});
