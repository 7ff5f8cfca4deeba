import { ROUTES, type RouteSpec } from '../../gateway/routes';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { allowedMethods, expectErrorBody } from '../helpers/error-body';
import { type TestKey, withLastCharacterChanged } from '../helpers/fixtures';
import {
  askAs,
  type ClientRequest,
  DIALECT_OF,
  PROXY_KINDS,
  type ProxyKind,
} from '../helpers/forward-auth';
import { bearer, type SendResult, startTestGateway, type TestGateway } from '../helpers/gateway';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
  untilShared,
} from '../helpers/redis';
import { exchangeToken } from '../helpers/routes';

/**
 * Forward authentication over real sockets: the forward-auth door asked the way Traefik, Caddy,
 * nginx and Envoy ask (test/helpers/forward-auth.ts), on the sample gateway's route table. The
 * gateway trusts 127.0.0.1 as its proxy; client addresses travel in X-Forwarded-For.
 */

const PUBLIC_KEY_HEADER = 'x-service-public-api-key';
const CLIENT = '198.51.100.7';
const IDENTITY = [
  'x-gateway-account-id',
  'x-gateway-key-id',
  'x-gateway-role',
  'x-gateway-credential',
] as const;

function concrete(path: string): string {
  return path.replace(':id', 'id_123');
}

/** The credential a route's test request carries, for `key`. */
function credentialFor(route: RouteSpec, key: TestKey): Record<string, string> {
  if (route.accept !== 'key-pair' && route.accept.includes('secret')) return bearer(key.secretKey);
  return { [PUBLIC_KEY_HEADER]: key.publishableKey };
}

function expectAllowed(answer: SendResult, key: TestKey, credential: string): void {
  expect({ status: answer.status, text: answer.text }).toEqual({ status: 200, text: '' });
  expect(answer.headers['cache-control']).toBe('no-store');
  expect(answer.headers['x-gateway-account-id']).toBe(key.accountId);
  expect(answer.headers['x-gateway-key-id']).toBe(key.id);
  expect(answer.headers['x-gateway-role']).toBe(key.role);
  expect(answer.headers['x-gateway-credential']).toBe(credential);
  expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  expect(answer.headers.ratelimit).toMatch(/r=\d+; t=\d+/);
  expect(answer.headers['ratelimit-policy']).toMatch(/q=\d+; w=60/);
}

/** A refusal as the proxy's client must see it, whatever the dialect carried it. */
function expectRefused(
  proxy: ProxyKind,
  answer: SendResult,
  expected: { status: number; code: string; message?: string },
): Record<string, unknown> {
  if (DIALECT_OF[proxy] !== 'auth-request' || expected.status === 401 || expected.status === 403) {
    return expectErrorBody(answer, expected);
  }
  // nginx passes only 401 and 403: the real refusal travels in headers, for the shipped config.
  expect(answer.status).toBe(403);
  expect(answer.headers['x-tollgate-status']).toBe(String(expected.status));
  expect(answer.headers['x-tollgate-code']).toBe(expected.code);
  const restored = JSON.parse(String(answer.headers['x-tollgate-body'])) as Record<string, unknown>;
  expect(restored).toEqual(JSON.parse(answer.text));
  expect(restored).toMatchObject({ status: expected.status, code: expected.code });
  expect(restored.request_id).toBe(answer.headers['x-request-id']);
  return restored;
}

describe('forward authentication', () => {
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({ trustProxy: ['127.0.0.1'] });
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    expect(gateway.upstream.requests).toEqual([]);
  });

  const ask = (proxy: ProxyKind, request: Partial<ClientRequest> & { target: string }) =>
    askAs(proxy, gateway, { method: 'GET', clientIp: CLIENT, ...request });

  describe.each(PROXY_KINDS)('asked as %s does', (proxy) => {
    const routes = ROUTES.filter((route) => route.accept !== 'key-pair');

    it.each(routes.map((route) => [`${route.method} ${route.path}`, route] as const))(
      'allows %s with the identity headers, never calling the upstream',
      async (_name, route) => {
        const key = gateway.fixtures.keys.admin;
        const answer = await ask(proxy, {
          method: route.method,
          target: concrete(route.path),
          headers: credentialFor(route, key),
        });
        const credential =
          route.accept !== 'key-pair' && route.accept.includes('secret') ? 'secret' : 'publishable';
        expectAllowed(answer, key, credential);
        expect(answer.headers.ratelimit).toContain(`"${route.scope}"`);
        if (DIALECT_OF[proxy] === 'ext-authz') {
          expect(answer.headers['x-envoy-auth-headers-to-remove']).toBe(
            `authorization,${PUBLIC_KEY_HEADER}`,
          );
        } else {
          expect(answer.headers['x-envoy-auth-headers-to-remove']).toBeUndefined();
        }
      },
    );

    it('allows a token, with the key of the token', async () => {
      const key = gateway.fixtures.keys.level3;
      const token = await exchangeToken(gateway, key);
      const answer = await ask(proxy, {
        method: 'POST',
        target: '/api/v1/otp/confirm/',
        headers: bearer(token),
      });
      expectAllowed(answer, key, 'token');
    });

    it('refuses a request without credentials: 401 with WWW-Authenticate', async () => {
      const answer = await ask(proxy, { target: '/api/v1/wallets/' });
      expectRefused(proxy, answer, {
        status: 401,
        code: 'missing_credentials',
        message: 'Authentication required',
      });
      expect(answer.headers['www-authenticate']).toBe('Bearer');
      for (const name of IDENTITY) expect(answer.headers[name]).toBeUndefined();
    });

    it('refuses a wrong key (401) and a role too low (403)', async () => {
      expectRefused(
        proxy,
        await ask(proxy, {
          target: '/api/v1/wallets/',
          headers: bearer(withLastCharacterChanged(gateway.fixtures.keys.admin.secretKey)),
        }),
        { status: 401, code: 'invalid_api_key' },
      );
      expectRefused(
        proxy,
        await ask(proxy, {
          method: 'POST',
          target: '/api/v1/payouts/id_1/approve/',
          headers: bearer(gateway.fixtures.keys.level2.secretKey),
        }),
        { status: 403, code: 'insufficient_role' },
      );
    });

    it('applies the whitelist to the client address the proxy forwards', async () => {
      const key = gateway.fixtures.keys.walled;
      const inside = await ask(proxy, {
        target: '/api/v1/wallets/',
        headers: bearer(key.secretKey),
        clientIp: '127.0.10.9',
      });
      expectAllowed(inside, key, 'secret');
      const outside = await ask(proxy, {
        target: '/api/v1/wallets/',
        headers: bearer(key.secretKey),
        clientIp: '127.0.11.9',
      });
      expectRefused(proxy, outside, {
        status: 403,
        code: 'ip_not_whitelisted',
        message: 'Access denied: IP not whitelisted.',
      });
    });

    it('answers 404 for no route and 405 with Allow for another method', async () => {
      const headers = bearer(gateway.fixtures.keys.admin.secretKey);
      for (const target of [
        '/api/v1/nowhere/',
        '/api/v1/wallets/../payouts/',
        '/api/v1//wallets/',
        '/api/v1/%77allets/',
        '/api/v1/transactions/a%2Fb/',
      ]) {
        expectRefused(proxy, await ask(proxy, { method: 'POST', target, headers }), {
          status: 404,
          code: 'not_found',
        });
      }
      const wrongMethod = await ask(proxy, {
        method: 'DELETE',
        target: '/api/v1/wallets',
        headers,
      });
      expectRefused(proxy, wrongMethod, { status: 405, code: 'method_not_allowed' });
      expect(allowedMethods(wrongMethod.headers)).toEqual(['GET', 'HEAD']);
    });

    it('refuses credentials in the original query string (400)', async () => {
      const key = gateway.fixtures.keys.admin;
      const answer = await ask(proxy, {
        target: `/api/v1/wallets/?api_key=${key.secretKey}`,
        headers: bearer(key.secretKey),
      });
      expectRefused(proxy, answer, { status: 400, code: 'invalid_request' });
    });

    it('tells a proxy that asks about the token exchange to route it to the gateway (400)', async () => {
      const answer = await ask(proxy, {
        method: 'POST',
        target: '/api/v1/auth/generate-token/',
      });
      const body = expectRefused(proxy, answer, { status: 400, code: 'invalid_request' });
      expect(body.message).toMatch(/token exchange/);
    });

    it('does not see a publishable key in the body, which proxies do not forward (401)', async () => {
      const answer = await ask(proxy, { method: 'POST', target: '/api/v1/checkout/' });
      expectRefused(proxy, answer, { status: 401, code: 'missing_credentials' });
    });
  });

  it('counts a request once, in the same counter as the gateway’s own proxy', async () => {
    const key = gateway.fixtures.keys.level1;
    const remaining = (answer: SendResult): number =>
      Number(/r=(\d+)/.exec(String(answer.headers.ratelimit))?.[1]);
    const first = await ask('nginx', {
      target: '/api/v1/transactions/',
      headers: bearer(key.secretKey),
    });
    const second = await ask('traefik', {
      target: '/api/v1/transactions/',
      headers: bearer(key.secretKey),
    });
    const third = await ask('envoy', {
      target: '/api/v1/transactions/tx_1/',
      headers: bearer(key.secretKey),
    });
    expect([remaining(second), remaining(third)]).toEqual([
      remaining(first) - 1,
      remaining(first) - 2,
    ]);
    const direct = await gateway.send({
      path: '/api/v1/transactions/',
      headers: bearer(key.secretKey),
    });
    expect(direct.status).toBe(200);
    expect(remaining(direct)).toBe(remaining(first) - 3);
    gateway.upstream.reset();
  });

  it('refuses a description it cannot read with 400', async () => {
    const send = (path: string, headers: Record<string, string | string[]>) =>
      gateway.send({ path, headers, from: '127.0.0.1' });
    const cases: [string, Record<string, string | string[]>][] = [
      ['/authz/forward-auth', { 'x-forwarded-method': 'GET' }],
      ['/authz/forward-auth', { 'x-forwarded-uri': '/api/v1/wallets/' }],
      [
        '/authz/forward-auth',
        { 'x-forwarded-method': 'get', 'x-forwarded-uri': '/api/v1/wallets/' },
      ],
      [
        '/authz/forward-auth',
        { 'x-forwarded-method': 'GET', 'x-forwarded-uri': 'api/v1/wallets/' },
      ],
      [
        '/authz/forward-auth',
        { 'x-forwarded-method': 'GET', 'x-forwarded-uri': '/api/v1/wallets/#x' },
      ],
      [
        '/authz/forward-auth',
        { 'x-forwarded-method': 'GET', 'x-forwarded-uri': '/api/v1/wal lets/' },
      ],
      [
        '/authz/forward-auth',
        { 'x-forwarded-method': ['GET', 'POST'], 'x-forwarded-uri': '/api/v1/wallets/' },
      ],
      ['/authz/ext-authz', {}],
    ];
    for (const [path, headers] of cases) {
      expectErrorBody(await send(path, headers), { status: 400, code: 'invalid_request' });
    }
    const nginx = await send('/authz/auth-request', { 'x-original-method': 'GET' });
    expect(nginx.status).toBe(403);
    expect(nginx.headers['x-tollgate-status']).toBe('400');
  });

  it('reads the target from X-Original-URL when nginx sends no X-Original-URI (ingress-nginx)', async () => {
    const key = gateway.fixtures.keys.admin;
    const answer = await gateway.send({
      path: '/authz/auth-request',
      headers: {
        ...bearer(key.secretKey),
        'x-original-method': 'GET',
        'x-original-url': 'https://api.example.test/api/v1/wallets/',
        'x-forwarded-for': CLIENT,
      },
    });
    expectAllowed(answer, key, 'secret');
  });

  it('refuses a right key once the client address has spent its failure budget', async () => {
    const key = gateway.fixtures.keys.admin;
    const clientIp = '198.51.100.99';
    for (let attempt = 0; attempt < 20; attempt++) {
      const wrong = await ask('caddy', {
        target: '/api/v1/wallets/',
        headers: bearer(withLastCharacterChanged(key.secretKey)),
        clientIp,
      });
      expect(wrong.status).toBe(401);
    }
    const right = await ask('caddy', {
      target: '/api/v1/wallets/',
      headers: bearer(key.secretKey),
      clientIp,
    });
    expectErrorBody(right, { status: 429, code: 'rate_limited' });
    expect(Number(right.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    const otherClient = await ask('caddy', {
      target: '/api/v1/wallets/',
      headers: bearer(key.secretKey),
    });
    expectAllowed(otherClient, key, 'secret');
  });
});

describe('forward authentication answers only trusted proxies', () => {
  it.each([
    ['no proxy is trusted', false as const, '127.0.0.1'],
    ['the peer is not a trusted proxy', ['127.0.0.1'], '127.0.0.3'],
    ['trust is a hop count, which trusts any peer', 1, '127.0.0.1'],
  ])('answers 404 when %s', async (_name, trustProxy, from) => {
    const gateway = await startTestGateway({ trustProxy });
    try {
      const key = gateway.fixtures.keys.admin;
      for (const proxy of PROXY_KINDS) {
        const answer = await askAs(
          proxy,
          gateway,
          {
            method: 'GET',
            target: '/api/v1/wallets/',
            headers: bearer(key.secretKey),
            clientIp: CLIENT,
          },
          from,
        );
        expectErrorBody(answer, { status: 404, code: 'not_found' });
        for (const name of IDENTITY) expect(answer.headers[name]).toBeUndefined();
      }
      const warnings = gateway.logs
        .entries()
        .filter((entry) => entry.event === 'tollgate.misconfiguration');
      expect(warnings.length).toBe(typeof trustProxy === 'number' ? 1 : 0);
    } finally {
      await gateway.close();
    }
  });
});

const MODES = [
  { label: 'in memory', describe, shared: false },
  { label: 'with Redis', describe: describeWithRedis, shared: true },
] as const;

for (const mode of MODES) {
  mode.describe(`forward authentication at the limit, ${mode.label}`, () => {
    let testRedis: TestRedis | undefined;
    let connection: LimiterRedisConnection | undefined;
    const gateways: TestGateway[] = [];

    beforeAll(async () => {
      if (!mode.shared) return;
      testRedis = await acquireTestRedis();
      if (testRedis === undefined) throw new Error('describeWithRedis ran without a Redis');
      connection = createLimiterRedis({ url: testRedis.url });
      await untilShared(connection);
    });
    afterEach(async () => {
      await Promise.all(gateways.splice(0).map((gateway) => gateway.close()));
    });
    afterAll(async () => {
      await connection?.close();
      await testRedis?.close();
    });

    it.each(PROXY_KINDS)(
      'a spent limit reaches a client of %s as 429 with Retry-After',
      async (proxy) => {
        const gateway = await startTestGateway({
          trustProxy: ['127.0.0.1'],
          limits: { payments: 3 },
          ...(connection === undefined
            ? {}
            : { redis: connection, redisPrefix: uniquePrefix('fa') }),
        });
        gateways.push(gateway);
        const key = gateway.fixtures.keys.level1;
        const request = {
          method: 'GET',
          target: '/api/v1/wallets/',
          headers: bearer(key.secretKey),
          clientIp: CLIENT,
        };
        for (let allowed = 0; allowed < 3; allowed++) {
          expectAllowed(await askAs(proxy, gateway, request), key, 'secret');
        }
        const limited = await askAs(proxy, gateway, request);
        expectRefused(proxy, limited, {
          status: 429,
          code: 'rate_limited',
          message: 'Too many requests',
        });
        const retryAfter = Number(limited.headers['retry-after']);
        expect(retryAfter).toBeGreaterThanOrEqual(1);
        expect(retryAfter).toBeLessThanOrEqual(60);
        expect(limited.headers.ratelimit).toMatch(/^"payments"; r=0; t=\d+$/);
        if (mode.shared) expect(gateway.app.rateLimitState()).toBe('shared');
        expect(gateway.upstream.requests).toEqual([]);
      },
    );
  });
}
