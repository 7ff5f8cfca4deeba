import express from 'express';
import request from 'supertest';
import { createAdminApp } from '../../gateway/admin';
import { ROUTES } from '../../gateway/routes';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import type { KeyRecord } from '../../lib/model/key-record';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { TokenService } from '../../lib/tokens/tokens';
import { tollgate } from '../../lib';
import { expectErrorBody, type HttpAnswer } from '../helpers/error-body';
import { createFixtures, type Fixtures, type TestKey, TOKEN_SECRET } from '../helpers/fixtures';
import { askAs, DIALECT_OF, PROXY_KINDS } from '../helpers/forward-auth';
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
import { generateKey } from '../../lib/model/key-format';

/**
 * Restricted keys through every door: the gateway's own routes, forward
 * authentication (as each proxy asks) and `protect()` in an app of one's own. A key with a list
 * may call only the routes whose permission it holds, on top of its role; a key without one all
 * its role allows; publishable keys are never restricted; tokens are restricted like their key,
 * and a change to the list applies to them at once, since the list is looked up, never in the
 * token.
 */

const PUBLIC_KEY_HEADER = 'x-service-public-api-key';

interface RestrictedKeys {
  /** administrator, may only read wallets and transactions. */
  readonly reader: TestKey;
  /** level-2, may only start payouts. */
  readonly payer: TestKey;
}

function testKey(id: string, role: TestKey['role']): TestKey {
  return {
    id,
    accountId: 'acct_open',
    role,
    publishableKey: generateKey('publishable', 'test'),
    secretKey: generateKey('secret', 'test'),
  };
}

/** The keys document of `fixtures` plus the restricted keys, each with the list given. */
function documentWith(
  fixtures: Fixtures,
  restricted: RestrictedKeys,
  lists: { reader: readonly string[] | null; payer: readonly string[] | null },
): unknown {
  const entry = (key: TestKey, permissions: readonly string[] | null) => ({
    id: key.id,
    publishableKey: key.publishableKey,
    secretKeySha256: sha256(key.secretKey).toString('hex'),
    role: key.role,
    ...(permissions === null ? {} : { permissions }),
  });
  return {
    accounts: fixtures.document.accounts.map((account) =>
      account.id === 'acct_open'
        ? {
            ...account,
            keys: [
              ...account.keys,
              entry(restricted.reader, lists.reader),
              entry(restricted.payer, lists.payer),
            ],
          }
        : account,
    ),
  };
}

/** A ring whose keys can be replaced while the gateway runs: what a reload does. */
class SwappableRing extends KeyRing {
  current: KeyRing;
  constructor(first: KeyRing) {
    super([]);
    this.current = first;
  }
  override keyRecords(): readonly KeyRecord[] {
    return this.current.keyRecords();
  }
  override findBySecretKey(secretKey: string): KeyRecord | undefined {
    return this.current.findBySecretKey(secretKey);
  }
  override findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined {
    return this.current.findByKeyPair(publishableKey, secretKey);
  }
  override findByPublishableKey(publishableKey: string): KeyRecord | undefined {
    return this.current.findByPublishableKey(publishableKey);
  }
  override findById(keyId: string): KeyRecord | undefined {
    return this.current.findById(keyId);
  }
}

interface Setup {
  readonly fixtures: Fixtures;
  readonly restricted: RestrictedKeys;
  readonly ring: SwappableRing;
  /** Replaces the reader's list (`null`: no restriction), as a reload of the keys would. */
  setReader(list: readonly string[] | null): void;
}

const READER = ['wallets:read', 'transactions:read'];
const PAYER = ['payouts:write'];

function restrictedSetup(): Setup {
  const fixtures = createFixtures();
  const restricted = {
    reader: testKey('key_reader', 'administrator'),
    payer: testKey('key_payer', 'level-2'),
  };
  const load = (reader: readonly string[] | null) =>
    KeyRing.fromDocument(documentWith(fixtures, restricted, { reader, payer: PAYER }), 'test');
  const ring = new SwappableRing(load(READER));
  return {
    fixtures: { ...fixtures, ring },
    restricted,
    ring,
    setReader: (list) => {
      ring.current = load(list);
    },
  };
}

/** Each gateway route, as a request with `key`'s secret key. */
function routeRequest(path: string, method: string, key: TestKey): SendOptions {
  return {
    method,
    path: path.replace(':id', 'id_1'),
    headers: bearer(key.secretKey),
    ...(method === 'POST' ? { body: { invoice_id: 'inv_1' } } : {}),
  };
}

function expectPermissionRefusal(answer: HttpAnswer, permission: string): void {
  expectErrorBody(answer, {
    status: 403,
    code: 'insufficient_permission',
    message: `This action requires the permission ${permission}`,
  });
}

const BEARER_ROUTES = ROUTES.filter(
  (route) => route.accept !== 'key-pair' && route.accept.includes('secret'),
);

/** The rules, whatever counts the limits: memory or Redis. */
function itRestrictsKeys(start: (setup: Setup) => Promise<TestGateway>): void {
  let setup: Setup;
  let gateway: TestGateway;
  beforeEach(async () => {
    setup = restrictedSetup();
    gateway = await start(setup);
  });
  afterEach(async () => {
    await gateway.close();
  });

  it('gives every route that takes a secret key its permission, from the route table', () => {
    expect(
      Object.fromEntries(
        BEARER_ROUTES.map((route) => [`${route.method} ${route.path}`, route.permission]),
      ),
    ).toEqual({
      'GET /api/v1/wallets/': 'wallets:read',
      'GET /api/v1/transactions/': 'transactions:read',
      'GET /api/v1/transactions/:id/': 'transactions:read',
      'POST /api/v1/payment/status/': 'payments:read',
      'POST /api/v1/payouts/': 'payouts:write',
      'POST /api/v1/payouts/:id/approve/': 'payouts:approve',
      'POST /api/v1/otp/confirm/': 'otp:confirm',
      'POST /api/v1/chargebacks/': 'chargebacks:write',
    });
  });

  it('lets a restricted key call exactly the routes of its list, and refuses every other with 403 insufficient_permission naming the permission, the upstream never called', async () => {
    const { reader } = setup.restricted;
    for (const route of BEARER_ROUTES) {
      const answer = await gateway.send(routeRequest(route.path, route.method, reader));
      const permission = route.permission ?? '';
      if (READER.includes(permission)) {
        expect({ route: route.path, status: answer.status }).toEqual({
          route: route.path,
          status: 200,
        });
      } else {
        expectPermissionRefusal(answer, permission);
      }
    }
    expect(gateway.upstream.requests.map((recorded) => recorded.url)).toEqual([
      '/api/v1/wallets/',
      '/api/v1/transactions/',
      '/api/v1/transactions/id_1/',
    ]);
  });

  it('checks the role first: a level-2 key holding payouts:write starts payouts, is refused approvals for its role and wallets for its list', async () => {
    const { payer } = setup.restricted;
    expect((await gateway.send(routeRequest('/api/v1/payouts/', 'POST', payer))).status).toBe(200);
    expectErrorBody(
      await gateway.send(routeRequest('/api/v1/payouts/:id/approve/', 'POST', payer)),
      {
        status: 403,
        code: 'insufficient_role',
      },
    );
    expectPermissionRefusal(
      await gateway.send(routeRequest('/api/v1/wallets/', 'GET', payer)),
      'wallets:read',
    );
  });

  it('leaves a key without a list all its role allows', async () => {
    for (const route of BEARER_ROUTES) {
      const answer = await gateway.send(
        routeRequest(route.path, route.method, setup.fixtures.keys.admin),
      );
      expect({ route: route.path, status: answer.status }).toEqual({
        route: route.path,
        status: 200,
      });
    }
  });

  it("never restricts a publishable key: payment status with the restricted key pair's publishable key passes", async () => {
    const answer = await gateway.send({
      method: 'POST',
      path: '/api/v1/payment/status/',
      headers: { [PUBLIC_KEY_HEADER]: setup.restricted.reader.publishableKey },
      body: { invoice_id: 'inv_1' },
    });
    expect(answer.status).toBe(200);
    expectPermissionRefusal(
      await gateway.send(routeRequest('/api/v1/payment/status/', 'POST', setup.restricted.reader)),
      'payments:read',
    );
  });

  it('lets a restricted key exchange its pair for a token, which is restricted the same way and carries no list', async () => {
    const token = await exchangeToken(gateway, setup.restricted.reader);
    const payload = JSON.parse(
      Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8'),
    ) as Record<string, unknown>;
    expect(JSON.stringify(payload)).not.toMatch(/wallets|permission/);
    expect((await gateway.send({ path: '/api/v1/wallets/', headers: bearer(token) })).status).toBe(
      200,
    );
    expectPermissionRefusal(
      await gateway.send({
        method: 'POST',
        path: '/api/v1/payouts/',
        headers: bearer(token),
        body: {},
      }),
      'payouts:write',
    );
  });

  it("applies a change to the key's list to its tokens already issued, at once", async () => {
    const token = await exchangeToken(gateway, setup.restricted.reader);
    const wallets = async () =>
      (await gateway.send({ path: '/api/v1/wallets/', headers: bearer(token) })).status;
    const payouts = async () =>
      (
        await gateway.send({
          method: 'POST',
          path: '/api/v1/payouts/',
          headers: bearer(token),
          body: {},
        })
      ).status;
    expect([await wallets(), await payouts()]).toEqual([200, 403]);
    setup.setReader(['payouts:write']);
    expect([await wallets(), await payouts()]).toEqual([403, 200]);
    setup.setReader(null);
    expect([await wallets(), await payouts()]).toEqual([200, 200]);
  });

  it('spends no limit on a refusal for a missing permission (authenticated limit 4)', async () => {
    const { reader } = setup.restricted;
    for (let i = 0; i < 4; i++) {
      expectPermissionRefusal(
        await gateway.send(routeRequest('/api/v1/otp/confirm/', 'POST', reader)),
        'otp:confirm',
      );
    }
    const allowed = [];
    for (let i = 0; i < 5; i++) {
      allowed.push(
        (await gateway.send(routeRequest('/api/v1/transactions/', 'GET', reader))).status,
      );
    }
    expect(allowed).toEqual([200, 200, 200, 200, 429]);
  });

  it('logs the refusal on the access line with reason insufficient_permission', async () => {
    await gateway.send(routeRequest('/api/v1/payouts/', 'POST', setup.restricted.reader));
    const line = gateway.logs
      .entries()
      .find((logged) => logged.event === 'http.request' && logged.path === '/api/v1/payouts/');
    expect(line).toMatchObject({
      key_id: 'key_reader',
      reason: 'insufficient_permission',
      refusal_status: 403,
      outcome: 'refused',
    });
  });
}

const LIMITS = { payments: 50, authenticated: 4 };

describe('restricted keys on the gateway, limits in memory', () => {
  itRestrictsKeys((setup) => startTestGateway({ fixtures: setup.fixtures, limits: LIMITS }));
});

describeWithRedis('restricted keys on the gateway, limits on Redis', () => {
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

  itRestrictsKeys(async (setup) => {
    const gateway = await startTestGateway({
      fixtures: setup.fixtures,
      limits: LIMITS,
      redis: connection,
      redisPrefix: uniquePrefix('permissions'),
    });
    expect(gateway.app.rateLimitState()).toBe('shared');
    return gateway;
  });
});

describe('restricted keys through forward authentication', () => {
  let setup: Setup;
  let gateway: TestGateway;
  beforeAll(async () => {
    setup = restrictedSetup();
    gateway = await startTestGateway({ fixtures: setup.fixtures, trustProxy: ['127.0.0.1'] });
  });
  afterAll(async () => {
    await gateway.close();
  });

  describe.each(PROXY_KINDS)('asked as %s does', (proxy) => {
    it('allows a route of the list and refuses one outside it with 403 insufficient_permission', async () => {
      const { reader } = setup.restricted;
      const allowed = await askAs(proxy, gateway, {
        method: 'GET',
        target: '/api/v1/transactions/id_9/',
        headers: bearer(reader.secretKey),
        clientIp: '198.51.100.7',
      });
      expect(allowed.status).toBe(200);
      expect(allowed.headers['x-gateway-key-id']).toBe('key_reader');
      const refused = await askAs(proxy, gateway, {
        method: 'POST',
        target: '/api/v1/chargebacks/',
        headers: bearer(reader.secretKey),
        clientIp: '198.51.100.7',
      });
      expectPermissionRefusal(refused, 'chargebacks:write');
      expect(DIALECT_OF[proxy]).toBeDefined();
      expect(gateway.upstream.requests).toEqual([]);
    });
  });

  it('restricts a token asked about, and follows a change of the list at once', async () => {
    setup.setReader(READER);
    const token = await exchangeToken(gateway, setup.restricted.reader);
    const ask = (target: string, method = 'GET') =>
      askAs('traefik', gateway, {
        method,
        target,
        headers: bearer(token),
        clientIp: '198.51.100.7',
      });
    expectPermissionRefusal(await ask('/api/v1/otp/confirm/', 'POST'), 'otp:confirm');
    setup.setReader(['otp:confirm']);
    expect((await ask('/api/v1/otp/confirm/', 'POST')).status).toBe(200);
    expectPermissionRefusal(await ask('/api/v1/wallets/'), 'wallets:read');
  });
});

describe('restricted keys through protect() in an app of its own', () => {
  const fixtures = createFixtures();
  const reports = testKey('key_reports', 'level-1');
  const orders = testKey('key_orders', 'level-1');
  const entry = (key: TestKey, permissions: readonly string[]) => ({
    id: key.id,
    publishableKey: key.publishableKey,
    secretKeySha256: sha256(key.secretKey).toString('hex'),
    role: key.role,
    permissions,
  });
  const document = {
    accounts: [
      ...fixtures.document.accounts,
      {
        id: 'acct_shop',
        keys: [entry(reports, ['reports:read']), entry(orders, ['wallets:read'])],
      },
    ],
  };
  const keyStore = KeyRing.fromDocument(document, 'shop keys', { permissions: ['reports:read'] });
  const tokens = new TokenService({ secret: TOKEN_SECRET, ttlSeconds: 600 });
  const gate = tollgate({
    keyStore,
    tokens,
    scopes: { shop: { limit: 100 } },
    permissions: ['reports:read'],
  });
  const app = express();
  app.use(gate.context());
  app.post('/token', gate.tokenExchange({ limit: 'shop' }));
  app.get(
    '/reports',
    gate.protect({ accept: ['secret', 'token'], limit: 'shop', permission: 'reports:read' }),
    (_req, res) => {
      res.json({ ok: true });
    },
  );
  app.get(
    '/reports/admin',
    gate.protect({
      accept: ['secret', 'token'],
      limit: 'shop',
      role: 'level-3',
      permission: 'reports:read',
    }),
    (_req, res) => {
      res.json({ ok: true });
    },
  );
  app.get('/open', gate.protect({ accept: ['secret'], limit: 'shop' }), (req, res) => {
    res.json({
      permissions: req.auth?.permissions === undefined ? null : [...req.auth.permissions],
    });
  });
  app.use(gate.errorHandler());
  afterAll(() => {
    gate.close();
  });

  it('admits a key holding the permission a kit user declared, and refuses one without it', async () => {
    expect((await request(app).get('/reports').set(bearer(reports.secretKey))).status).toBe(200);
    const refused = await request(app).get('/reports').set(bearer(orders.secretKey));
    expectPermissionRefusal(
      { status: refused.status, headers: refused.headers, text: refused.text },
      'reports:read',
    );
  });

  it('checks the role before the permission', async () => {
    const refused = await request(app).get('/reports/admin').set(bearer(orders.secretKey));
    expectErrorBody(
      { status: refused.status, headers: refused.headers, text: refused.text },
      { status: 403, code: 'insufficient_role' },
    );
  });

  it('restricts a token like its key; a route without a permission takes any key and shows its list', async () => {
    const minted = await request(app)
      .post('/token')
      .send({ api_key: orders.publishableKey, api_secret: orders.secretKey });
    const token = (minted.body as { token: string }).token;
    expect((await request(app).get('/reports').set(bearer(token))).status).toBe(403);
    const open = await request(app).get('/open').set(bearer(orders.secretKey));
    expect(open.body).toEqual({ permissions: ['wallets:read'] });
    const unrestricted = await request(app).get('/open').set(bearer(fixtures.keys.admin.secretKey));
    expect(unrestricted.body).toEqual({ permissions: null });
  });
});

describe('the admin listener over a keys file with restricted keys', () => {
  const token = 'admin-token-0123456789-abcdefghijklmnop';
  const setup = restrictedSetup();
  const app = createAdminApp({
    directory: setup.ring,
    tokenSha256: sha256(token).toString('hex'),
    logger: captureLogs().logger,
    readOnlyReason: 'Keys come from a keys file here: change them with the key command',
  });
  afterAll(() => {
    app.shutdown();
  });

  it("lists each key's permissions, null for a key without a list", async () => {
    const listed = await request(app)
      .get('/admin/v1/accounts')
      .set('authorization', `Bearer ${token}`);
    const keys = (
      listed.body as { accounts: { keys: { id: string; permissions: unknown }[] }[] }
    ).accounts
      .flatMap((account) => account.keys)
      .map(({ id, permissions }) => ({ id, permissions }));
    expect(keys).toContainEqual({ id: 'key_reader', permissions: READER });
    expect(keys).toContainEqual({ id: 'key_payer', permissions: PAYER });
    expect(keys).toContainEqual({ id: 'key_admin', permissions: null });
  });

  it('answers 409 to a permission change: a keys file changes through the key command', async () => {
    const answer = await request(app)
      .patch('/admin/v1/keys/key_reader')
      .set('authorization', `Bearer ${token}`)
      .send({ permissions: null });
    expectErrorBody(
      { status: answer.status, headers: answer.headers, text: answer.text },
      { status: 409, code: 'conflict' },
    );
  });
});
