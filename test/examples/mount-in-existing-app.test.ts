import { type ChildProcess, spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import request from 'supertest';
import {
  createDemoKeys,
  createExampleApp,
  type ExampleAppOptions,
  ORDERS_LIMIT,
} from '../../examples/mount-in-existing-app';
import { generateKey, KeyRing, TokenService } from '../../lib';
import { DEFAULT_AUTH_FAILURE_LIMIT } from '../../lib/rate-limit/auth-failures';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/entry/redis';
import { DEFAULT_WINDOW_MS } from '../../lib/rate-limit/window';
import { createFixtures, type Fixtures, type TestKey, TOKEN_SECRET } from '../helpers/fixtures';
import { childEnv, distScript, httpRequest, ROOT } from '../helpers/process';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
  untilShared,
} from '../helpers/redis';

/** The example app listening on 127.0.0.1 with the test fixtures' keys. */
interface RunningExample {
  readonly server: http.Server;
  readonly fixtures: Fixtures;
  readonly tokens: TokenService;
  close(): Promise<void>;
}

async function startExample(overrides: Partial<ExampleAppOptions> = {}): Promise<RunningExample> {
  const fixtures = createFixtures();
  const tokens = new TokenService({ secret: TOKEN_SECRET });
  const example = createExampleApp({ keyStore: fixtures.ring, tokens, ...overrides });
  const server = example.app.listen(0, '127.0.0.1');
  await new Promise<void>((resolve) => {
    server.once('listening', resolve);
  });
  return {
    server,
    fixtures,
    tokens,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
      });
      example.shutdown();
    },
  };
}

interface Reply {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Record<string, unknown>;
}

/** A request from a chosen loopback source address (supertest always connects from 127.0.0.1). */
function sendFrom(
  server: http.Server,
  from: string,
  method: string,
  path: string,
  options: { headers?: Record<string, string>; json?: unknown } = {},
): Promise<Reply> {
  const { port } = server.address() as AddressInfo;
  const payload =
    options.json === undefined ? undefined : Buffer.from(JSON.stringify(options.json));
  const headers = {
    ...options.headers,
    ...(payload === undefined
      ? {}
      : { 'content-type': 'application/json', 'content-length': String(payload.length) }),
  };
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method, path, headers, localAddress: from, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<
            string,
            unknown
          >;
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

const bearer = (value: string): Record<string, string> => ({ Authorization: `Bearer ${value}` });
const keyPair = (key: TestKey): Record<string, string> => ({
  api_key: key.publishableKey,
  api_secret: key.secretKey,
});
const windowSeconds = DEFAULT_WINDOW_MS / 1000;

/** The kit's error body, whose request id is the one sent back in `X-Request-Id`. */
function expectErrorBody(
  response: { status: number; headers: Record<string, unknown>; body: unknown },
  status: number,
  code: string,
): void {
  expect(response.status).toBe(status);
  expect(response.headers['content-type']).toMatch(/^application\/json/);
  expect(response.body).toEqual({
    status,
    code,
    message: expect.any(String) as unknown,
    request_id: response.headers['x-request-id'],
    // A 429 names the limit that refused.
    ...(status === 429 ? { scope: expect.stringMatching(/^[a-z][a-z0-9-]*$/) as unknown } : {}),
  });
}

describe('the kit mounted in an existing Express app (examples/mount-in-existing-app.ts)', () => {
  let example: RunningExample;
  beforeEach(async () => {
    example = await startExample();
  });
  afterEach(async () => {
    await example.close();
  });

  it('exchanges a key pair for a token at POST /auth/token and serves /orders to that token', async () => {
    const { level2 } = example.fixtures.keys;
    const exchange = await request(example.server).post('/auth/token').send(keyPair(level2));
    expect(exchange.status).toBe(200);
    expect(exchange.headers['cache-control']).toBe('no-store');
    expect(exchange.body).toEqual({
      token: expect.stringMatching(/^[\w-]+\.[\w-]+\.[\w-]+$/) as unknown,
      token_type: 'Bearer',
      expires_in: example.tokens.ttlSeconds,
    });

    const orders = await request(example.server)
      .get('/orders')
      .set(bearer((exchange.body as { token: string }).token));
    expect(orders.status).toBe(200);
    expect(orders.body).toMatchObject({ account_id: level2.accountId });
  });

  it.each([
    ['level1', 403],
    ['level2', 200],
    ['level3', 200],
    ['admin', 200],
  ] as const)(
    'answers GET /orders (minimum level-2) to the %s secret key and its token with %i',
    async (name, status) => {
      const key = example.fixtures.keys[name];
      const token = example.tokens.issue({
        id: key.id,
        accountId: key.accountId,
        role: key.role,
      }).token;
      for (const credential of [key.secretKey, token]) {
        const response = await request(example.server).get('/orders').set(bearer(credential));
        if (status === 403) expectErrorBody(response, 403, 'insufficient_role');
        else expect(response.status).toBe(status);
      }
    },
  );

  it.each([
    ['no credential', 'missing_credentials', {}],
    ['an unknown secret key', 'invalid_api_key', bearer(generateKey('secret'))],
    [
      'a token with a forged signature',
      'invalid_token',
      bearer('eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl'),
    ],
    [
      'a publishable key',
      'credential_not_allowed',
      { 'X-Service-Public-API-Key': generateKey('publishable') },
    ],
  ] as const)(
    'refuses /orders with %s: 401 %s in the kit error body',
    async (_label, code, headers) => {
      const response = await request(example.server).get('/orders').set(headers);
      expectErrorBody(response, 401, code);
      expect(response.headers['www-authenticate']).toBe('Bearer');
    },
  );

  it.each([
    ['a text/plain body', 415, 'unsupported_media_type', 'text/plain', 'x'],
    ['a body without api_secret', 400, 'invalid_request', 'application/json', '{"api_key":"pk_x"}'],
    ['a key pair that does not match', 401, 'invalid_credentials', 'application/json', 'MISMATCH'],
  ] as const)(
    'refuses the token exchange with %s: %i %s',
    async (_label, status, code, contentType, body) => {
      const { level1, level2 } = example.fixtures.keys;
      const text =
        body === 'MISMATCH'
          ? JSON.stringify({ api_key: level1.publishableKey, api_secret: level2.secretKey })
          : body;
      const response = await request(example.server)
        .post('/auth/token')
        .set('Content-Type', contentType)
        .send(text);
      expectErrorBody(response, status, code);
    },
  );

  it('applies the account whitelist to the token exchange: 403 from outside, a token from inside', async () => {
    const { walled } = example.fixtures.keys; // acct_walled allows 127.0.0.2, 127.0.10.0/24, 2001:db8::/32
    const outside = await sendFrom(example.server, '127.0.0.1', 'POST', '/auth/token', {
      json: keyPair(walled),
    });
    expectErrorBody(outside, 403, 'ip_not_whitelisted');
    expect(outside.body.message).toBe('Access denied: IP not whitelisted.');

    const inside = await sendFrom(example.server, '127.0.0.2', 'POST', '/auth/token', {
      json: keyPair(walled),
    });
    expect(inside.status).toBe(200);
    const token = inside.body.token as string;
    const fromInside = await sendFrom(example.server, '127.0.10.9', 'GET', '/orders', {
      headers: bearer(token),
    });
    expect(fromInside.status).toBe(200);
    const fromOutside = await sendFrom(example.server, '127.0.0.3', 'GET', '/orders', {
      headers: bearer(token),
    });
    expectErrorBody(fromOutside, 403, 'ip_not_whitelisted');
  });

  it('counts /orders per account and answers 429 with Retry-After once ORDERS_LIMIT is spent', async () => {
    const { level2, level3 } = example.fixtures.keys; // two keys of the same account, acct_open
    for (let sent = 1; sent <= ORDERS_LIMIT; sent++) {
      const key = sent % 2 === 0 ? level2 : level3;
      const response = await request(example.server).get('/orders').set(bearer(key.secretKey));
      expect(response.status).toBe(200);
      expect(response.headers['ratelimit-policy']).toMatch(
        new RegExp(`^"orders"; q=${ORDERS_LIMIT}; w=${windowSeconds}(;|$)`),
      );
      expect(response.headers.ratelimit).toMatch(
        new RegExp(`^"orders"; r=${ORDERS_LIMIT - sent}; t=\\d+$`),
      );
    }

    const refused = await request(example.server).get('/orders').set(bearer(level2.secretKey));
    expectErrorBody(refused, 429, 'rate_limited');
    expect((refused.body as { message: string }).message).toBe('Too many requests');
    const retryAfter = Number(refused.headers['retry-after']);
    expect(Number.isInteger(retryAfter)).toBe(true);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(windowSeconds);
  });

  it('after the failed-authentication limit, refuses every attempt from that IP, even a valid key, but not other IPs', async () => {
    const { level2 } = example.fixtures.keys;
    for (let attempt = 1; attempt <= DEFAULT_AUTH_FAILURE_LIMIT; attempt++) {
      const wrong = await request(example.server)
        .get('/orders')
        .set(bearer(generateKey('secret')));
      expectErrorBody(wrong, 401, 'invalid_api_key');
    }
    const overLimit = await request(example.server)
      .get('/orders')
      .set(bearer(generateKey('secret')));
    expectErrorBody(overLimit, 429, 'rate_limited');

    const valid = await request(example.server).get('/orders').set(bearer(level2.secretKey));
    expectErrorBody(valid, 429, 'rate_limited');
    expect(valid.headers['ratelimit-policy']).toBe(
      `"auth-failures"; q=${DEFAULT_AUTH_FAILURE_LIMIT}; w=${windowSeconds}`,
    );
    expect(Number(valid.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    const exchange = await request(example.server).post('/auth/token').send(keyPair(level2));
    expectErrorBody(exchange, 429, 'rate_limited');

    const elsewhere = await sendFrom(example.server, '127.0.0.3', 'GET', '/orders', {
      headers: bearer(level2.secretKey),
    });
    expect(elsewhere.status).toBe(200);
  });

  it('serves the browser route to a publishable key in the header or the body, with CORS, and refuses a secret key there', async () => {
    const { publishableKey, secretKey } = example.fixtures.keys.level1;
    const preflight = await request(example.server)
      .options('/checkout')
      .set('Origin', 'https://shop.example')
      .set('Access-Control-Request-Method', 'POST')
      .set('Access-Control-Request-Headers', 'content-type, x-service-public-api-key');
    expect(preflight.status).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe('*');
    expect(preflight.headers['access-control-allow-headers']).toMatch(/X-Service-Public-API-Key/i);
    expect(preflight.headers['access-control-allow-credentials']).toBeUndefined();

    const inHeader = await request(example.server)
      .post('/checkout')
      .set('Origin', 'https://shop.example')
      .set('X-Service-Public-API-Key', publishableKey);
    expect(inHeader.status).toBe(201);
    expect(inHeader.body).toEqual({ account_id: 'acct_open', checkout_id: 'chk_1001' });
    expect(inHeader.headers['access-control-allow-origin']).toBe('*');
    expect(inHeader.headers['ratelimit-policy']).toMatch(/^"checkout"; q=30; w=60;/);

    const inBody = await request(example.server)
      .post('/checkout')
      .send({ public_key: publishableKey, amount: '10.00' });
    expect(inBody.status).toBe(201);

    const secret = await request(example.server)
      .post('/checkout')
      .set('Authorization', `Bearer ${secretKey}`);
    expectErrorBody(secret, 401, 'credential_not_allowed');
  });

  it("leaves the app's own routes alone and answers unknown paths with 404 not_found", async () => {
    const home = await request(example.server).get('/');
    expect(home.status).toBe(200);
    expect(home.body).toMatchObject({ service: 'shop' });
    expect(home.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);

    expectErrorBody(await request(example.server).get('/api/v1/wallets/'), 404, 'not_found');
  });
});

describe('createDemoKeys', () => {
  it('builds a keys document the KeyRing accepts, holding digests and never the secrets', () => {
    const { document, keyPairs } = createDemoKeys('acct_demo_shop', ['level-1', 'administrator']);
    const ring = KeyRing.fromDocument(document, 'demo');
    const text = JSON.stringify(document);
    expect(keyPairs.map((pair) => pair.role)).toEqual(['level-1', 'administrator']);
    for (const pair of keyPairs) {
      expect(text).not.toContain(pair.secretKey);
      expect(ring.findByKeyPair(pair.publishableKey, pair.secretKey)).toMatchObject({
        accountId: 'acct_demo_shop',
        id: pair.keyId,
        role: pair.role,
      });
    }
  });
});

describeWithRedis('the example app with Redis limits', () => {
  let redis: TestRedis | undefined;
  const connections: LimiterRedisConnection[] = [];
  const running: RunningExample[] = [];

  beforeAll(async () => {
    redis = await acquireTestRedis();
  });
  afterAll(async () => {
    await Promise.all(running.map((instance) => instance.close()));
    await Promise.all(connections.map((connection) => connection.close()));
    await redis?.close();
  });

  async function connect(url: string): Promise<LimiterRedisConnection> {
    const connection = createLimiterRedis({ url });
    connections.push(connection);
    await untilShared(connection);
    return connection;
  }

  it('shares the /orders limit between two instances: ORDERS_LIMIT in total, then 429 on both', async () => {
    if (redis === undefined) throw new Error('no Redis');
    const redisPrefix = uniquePrefix('example');
    const fixtures = createFixtures();
    const tokens = new TokenService({ secret: TOKEN_SECRET });
    for (let i = 0; i < 2; i++) {
      const example = createExampleApp({
        keyStore: fixtures.ring,
        tokens,
        redis: await connect(redis.url),
        redisPrefix,
      });
      const server = example.app.listen(0, '127.0.0.1');
      await new Promise<void>((resolve) => {
        server.once('listening', resolve);
      });
      running.push({
        server,
        fixtures,
        tokens,
        close: async () => {
          server.closeAllConnections();
          await new Promise<void>((resolve) => {
            server.close(() => {
              resolve();
            });
          });
          example.shutdown();
        },
      });
    }
    const [first, second] = running as [RunningExample, RunningExample];
    const secret = fixtures.keys.level2.secretKey;
    for (let sent = 1; sent <= ORDERS_LIMIT; sent++) {
      const instance = sent % 2 === 0 ? first : second;
      expect((await request(instance.server).get('/orders').set(bearer(secret))).status).toBe(200);
    }
    for (const instance of [first, second]) {
      expectErrorBody(
        await request(instance.server).get('/orders').set(bearer(secret)),
        429,
        'rate_limited',
      );
    }
  });
});

describe('the example as `npm run example` runs it, on Express 4', () => {
  let child: ChildProcess | undefined;
  afterAll(() => {
    child?.kill('SIGKILL');
  });

  it('honours PORT and HOST, prints its demo keys, and protects /orders on Express 4', async () => {
    // As after `npm install --no-save express@4`: the preload resolves `express` to Express 4.
    const started = spawn(
      process.execPath,
      [
        '-r',
        path.join(ROOT, 'test', 'helpers', 'express4-preload.cjs'),
        distScript('examples/mount-in-existing-app.js'),
      ],
      { env: childEnv({ PORT: '0', HOST: '127.0.0.1' }), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = started;
    let output = '';
    started.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    started.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    const waitForListening = async (): Promise<RegExpExecArray> => {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const line = /listening on http:\/\/127\.0\.0\.1:(\d+) \(Express (\d+)/.exec(output);
        if (line !== null) return line;
        if (Date.now() > deadline || started.exitCode !== null) {
          throw new Error(`the example did not start:\n${output}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    };
    const listening = await waitForListening();
    expect(listening[2]).toBe('4');
    const port = Number(listening[1]);
    const level2 = /level-2 +publishable \S+ +secret (\S+)/.exec(output)?.[1] ?? '';
    expect(level2).toMatch(/^sk_test_/);

    const served = await httpRequest({
      port,
      path: '/orders',
      headers: { Authorization: `Bearer ${level2}` },
    });
    expect(served.status).toBe(200);
    const refused = await httpRequest({
      port,
      path: '/orders',
      headers: { Authorization: `Bearer ${generateKey('secret', 'test')}` },
    });
    expect(refused.status).toBe(401);
    expect(refused.body).toMatchObject({ code: 'invalid_api_key' });
    const again = await httpRequest({
      port,
      path: '/orders',
      headers: { Authorization: `Bearer ${level2}` },
    });
    expect(again.status).toBe(200);
    expect(started.exitCode).toBeNull();
  });
});
