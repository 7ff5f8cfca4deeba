import type { IncomingHttpHeaders } from 'node:http';
import request from 'supertest';
import { createAdminApp } from '../../gateway/admin';
import { GATEWAY_LIMIT_SCOPES } from '../../gateway/keys-cli/limit-scopes';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { expectErrorBody } from '../helpers/error-body';
import { createFixtures, type Fixtures } from '../helpers/fixtures';
import { captureLogs } from '../helpers/logs';
import { bearer, type SendOptions, startTestGateway, type TestGateway } from '../helpers/gateway';
import { exchangeToken } from '../helpers/routes';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
} from '../helpers/redis';
import { waitUntil } from '../multiprocess/harness';

/**
 * Accounts' limit overrides through the gateway: an account with its own `payments` and
 * `authenticated` limits is admitted exactly that many, with its own quota in `RateLimit-Policy`,
 * while another account stays on the defaults; counted in memory and on a real Redis.
 */

/** The test fixtures with `acct_open` carrying `limits`, loaded as the gateway loads keys. */
function fixturesWithLimits(limits: Readonly<Record<string, number>>): Fixtures {
  const fixtures = createFixtures();
  const document = {
    accounts: fixtures.document.accounts.map((account) =>
      account.id === 'acct_open' ? { ...account, limits } : account,
    ),
  };
  const ring = KeyRing.fromDocument(document, 'test fixtures', {
    limitScopes: GATEWAY_LIMIT_SCOPES,
  });
  return { ...fixtures, document, ring };
}

function policyQuota(headers: IncomingHttpHeaders, scope: string): number | undefined {
  const value = headers['ratelimit-policy'];
  const text = Array.isArray(value) ? value.join(', ') : (value ?? '');
  const match = new RegExp(`"${scope}"; q=(\\d+);`).exec(text);
  return match === null ? undefined : Number(match[1]);
}

/** The statuses of `count` requests sent one after the other, and the last answer's headers. */
async function statuses(
  gateway: TestGateway,
  request: SendOptions,
  count: number,
): Promise<{ statuses: number[]; quotas: (number | undefined)[]; scope: string }> {
  const scope = request.path === '/api/v1/wallets/' ? 'payments' : 'authenticated';
  const answers = [];
  for (let i = 0; i < count; i++) answers.push(await gateway.send(request));
  const last = answers[answers.length - 1];
  if (last?.status === 429) {
    expectErrorBody(last, { status: 429, code: 'rate_limited', message: 'Too many requests' });
    expect(Number(last.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  }
  return {
    statuses: answers.map((answer) => answer.status),
    quotas: answers.map((answer) => policyQuota(answer.headers, scope)),
    scope,
  };
}

const ownPayments = (g: TestGateway): SendOptions => ({
  path: '/api/v1/wallets/',
  headers: bearer(g.fixtures.keys.admin.secretKey),
});
const otherPayments = (g: TestGateway): SendOptions => ({
  path: '/api/v1/wallets/',
  headers: bearer(g.fixtures.keys.walled.secretKey),
  from: '127.0.0.2',
});
const ownAuthenticated = (g: TestGateway): SendOptions => ({
  path: '/api/v1/transactions/',
  headers: bearer(g.fixtures.keys.level2.secretKey),
});

/** The behaviour, whatever counts: memory, or Redis. */
function itEnforcesTheOverride(start: () => Promise<TestGateway>): void {
  let gateway: TestGateway;
  beforeEach(async () => {
    gateway = await start();
  });
  afterEach(async () => {
    await gateway.close();
  });

  it('refuses an account with payments 3 at its 4th request, with q=3; another account on the default is not refused', async () => {
    expect(await statuses(gateway, ownPayments(gateway), 4)).toEqual({
      statuses: [200, 200, 200, 429],
      quotas: [3, 3, 3, 3],
      scope: 'payments',
    });
    expect(await statuses(gateway, otherPayments(gateway), 5)).toEqual({
      statuses: [200, 200, 200, 200, 200],
      quotas: [10, 10, 10, 10, 10],
      scope: 'payments',
    });
  });

  it('admits an account above the default when its override is higher (authenticated 5 over a default of 2)', async () => {
    expect(await statuses(gateway, ownAuthenticated(gateway), 6)).toEqual({
      statuses: [200, 200, 200, 200, 200, 429],
      quotas: [5, 5, 5, 5, 5, 5],
      scope: 'authenticated',
    });
  });

  it("holds a token minted from the account's key to the account's own limit", async () => {
    const token = await exchangeToken(gateway, gateway.fixtures.keys.level2);
    expect(
      await statuses(gateway, { path: '/api/v1/wallets/', headers: bearer(token) }, 4),
    ).toEqual({ statuses: [200, 200, 200, 429], quotas: [3, 3, 3, 3], scope: 'payments' });
  });

  it("counts every key of the account against the account's own limit", async () => {
    const { admin, level1 } = gateway.fixtures.keys;
    const first = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(admin.secretKey),
    });
    const second = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(level1.secretKey),
    });
    const third = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(admin.secretKey),
    });
    const fourth = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(level1.secretKey),
    });
    expect([first, second, third, fourth].map((answer) => answer.status)).toEqual([
      200, 200, 200, 429,
    ]);
  });
}

const LIMITS = { payments: 10, authenticated: 2 };
const OVERRIDES = { payments: 3, authenticated: 5 };

describe('per-account limits, counted in memory', () => {
  itEnforcesTheOverride(() =>
    startTestGateway({ fixtures: fixturesWithLimits(OVERRIDES), limits: LIMITS }),
  );
});

describeWithRedis('per-account limits, counted on Redis', () => {
  let redis: TestRedis;
  let connection: LimiterRedisConnection;

  beforeAll(async () => {
    const acquired = await acquireTestRedis();
    if (acquired === undefined) throw new Error('describeWithRedis ran without a Redis');
    redis = acquired;
    connection = createLimiterRedis({ url: redis.url });
    await waitUntil(() => connection.health.state === 'shared', 5000);
  });
  afterAll(async () => {
    await connection.close();
    await redis.close();
  });

  itEnforcesTheOverride(async () => {
    const gateway = await startTestGateway({
      fixtures: fixturesWithLimits(OVERRIDES),
      limits: LIMITS,
      redis: connection,
      redisPrefix: uniquePrefix('account-limits'),
    });
    expect(gateway.app.rateLimitState()).toBe('shared');
    return gateway;
  });
});

describe('the admin listener over a keys file with limits', () => {
  const token = 'admin-token-0123456789-abcdefghijklmnop';
  const app = createAdminApp({
    directory: fixturesWithLimits({ payments: 6000 }).ring,
    tokenSha256: sha256(token).toString('hex'),
    logger: captureLogs().logger,
    readOnlyReason: 'Keys come from a keys file here: change them with the key command',
  });
  afterAll(() => {
    app.shutdown();
  });

  it("lists each account's limits, null for an account on the defaults", async () => {
    const listed = await request(app)
      .get('/admin/v1/accounts')
      .set('authorization', `Bearer ${token}`);
    expect(listed.status).toBe(200);
    expect(
      (listed.body as { accounts: { id: string; limits: unknown }[] }).accounts.map(
        ({ id, limits }) => ({ id, limits }),
      ),
    ).toEqual([
      { id: 'acct_open', limits: { payments: 6000 } },
      { id: 'acct_walled', limits: null },
    ]);
  });

  it('answers 409 to a limit change: a keys file changes through the key command', async () => {
    const answer = await request(app)
      .put('/admin/v1/accounts/acct_open/limits')
      .set('authorization', `Bearer ${token}`)
      .send({ limits: { payments: 10 } });
    expectErrorBody(
      { status: answer.status, headers: answer.headers, text: answer.text },
      { status: 409, code: 'conflict' },
    );
  });
});
