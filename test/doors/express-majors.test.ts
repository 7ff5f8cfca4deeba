import http from 'node:http';
import type { Express, RequestHandler } from 'express';
import express5 from 'express';
import request from 'supertest';
import {
  expressServerOptions,
  generateKey,
  type KeyStore,
  notFound,
  TokenService,
  tollgate,
} from '../../lib';
import { type LimiterRedis } from '../../lib/entry/redis';
import {
  authenticate,
  authenticateKeyPair,
  clientIp,
  createAuthFailureLimiter,
  createRateLimiter,
  errorHandler,
  issueToken,
  jsonBody,
  methodNotAllowed,
  requestId,
  requireRole,
  requireWhitelistedIp,
} from '../../lib/entry/express';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/entry/redis';
import { createFixtures, type Fixtures, TOKEN_SECRET } from '../helpers/fixtures';
import { recordBirths } from '../helpers/births';
import { freePort } from '../helpers/redis';

/**
 * The Express door on both majors: Express 4 does not catch a promise rejected by a
 * middleware, so a kit middleware that returned one would turn a wrong key into an unhandled
 * rejection and end the process. Each case below runs on Express 4 and on Express 5, on an app
 * built with `tollgate()` and on one built from the single middlewares, answers its documented
 * status and JSON body, and the app still answers the next request. The suite listens for
 * `unhandledRejection` and `uncaughtException`, and neither may fire.
 *
 * Each app is served twice: by a plain `http.createServer(app)`, as `app.listen()` does, and by a
 * server built with `expressServerOptions(app)`, whose requests and responses are born with the
 * app's Express prototypes; the same answers are expected from both.
 */

// An npm alias of express@4 (package.json devDependencies), next to Express 5.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const express4 = require('express4') as typeof express5;

const MAJORS = [
  { label: 'Express 4', express: express4 },
  { label: 'Express 5', express: express5 },
] as const;

interface Built {
  readonly app: Express;
  close(): void;
}

type Builder = (
  express: typeof express5,
  fixtures: Fixtures,
  tokens: TokenService,
  redis?: LimiterRedis,
) => Built;

const answer: RequestHandler = (req, res) => {
  res.json({ account: req.auth?.accountId });
};

/** A key store that cannot answer: every lookup throws, as a database store might. */
const BROKEN_STORE: KeyStore = {
  findBySecretKey: () => {
    throw new Error('key store down: password hunter2');
  },
  findByKeyPair: () => undefined,
  findByPublishableKey: () => undefined,
  findById: () => undefined,
};

const SCOPES = {
  orders: { limit: 1000, per: 'account' },
  limited: { limit: 2, per: 'account' },
  'auth-token': { limit: 1000, per: 'account' },
} as const;

const withTollgate: Builder = (express, fixtures, tokens, redis) => {
  const gate = tollgate({ keyStore: fixtures.ring, tokens, scopes: SCOPES, redis });
  const app = express();
  app.use(gate.context());
  const policy = { accept: ['secret', 'token'], role: 'level-2' } as const;
  app.get('/orders', gate.protect({ ...policy, limit: 'orders' }), answer);
  app.get('/limited', gate.protect({ ...policy, limit: 'limited' }), answer);
  app.all('/orders', methodNotAllowed(['GET']));
  app.post('/token', gate.tokenExchange({ limit: 'auth-token' }));
  const broken = tollgate({ keyStore: BROKEN_STORE, tokens, scopes: SCOPES });
  app.get('/broken', broken.protect({ ...policy, limit: 'orders' }), answer);
  app.use(notFound());
  app.use(gate.errorHandler());
  return {
    app,
    close: () => {
      gate.close();
      broken.close();
    },
  };
};

const withSingleMiddlewares: Builder = (express, fixtures, tokens, redis) => {
  const keyStore = fixtures.ring;
  const authFailures = createAuthFailureLimiter({ redis });
  const limiters = Object.entries(SCOPES).map(([name, scope]) =>
    createRateLimiter({ name, limit: scope.limit, key: scope.per, redis }),
  );
  const [orders, limited, tokenLimit] = limiters;
  if (orders === undefined || limited === undefined || tokenLimit === undefined) {
    throw new Error('three limiters expected');
  }
  const checks = (limiter: RequestHandler): RequestHandler[] => [
    authFailures.guard,
    authenticate({ keyStore, tokens, accept: ['secret', 'token'], authFailures }),
    requireWhitelistedIp({ authFailures }),
    requireRole('level-2'),
    limiter,
  ];
  const app = express();
  app.use(requestId(), clientIp());
  app.get('/orders', ...checks(orders.middleware), answer);
  app.all('/orders', methodNotAllowed(['GET']));
  app.get('/limited', ...checks(limited.middleware), answer);
  app.get(
    '/broken',
    authenticate({ keyStore: BROKEN_STORE, tokens, accept: ['secret', 'token'] }),
    answer,
  );
  app.post(
    '/token',
    authFailures.guard,
    jsonBody(),
    authenticateKeyPair({ keyStore, authFailures }),
    requireWhitelistedIp({ authFailures }),
    tokenLimit.middleware,
    issueToken({ tokens }),
  );
  app.use(notFound());
  app.use(errorHandler());
  return {
    app,
    close: () => {
      authFailures.shutdown();
      for (const limiter of limiters) limiter.store.shutdown();
    },
  };
};

const SERVINGS = [
  { label: 'a plain server', born: false, options: (): http.ServerOptions => ({}) },
  {
    label: 'expressServerOptions(app)',
    born: true,
    options: (app: Express): http.ServerOptions => expressServerOptions(app),
  },
] as const;

interface Served {
  readonly server: http.Server;
  /** Of every request, whether Node built it with the app's prototypes before Express saw it. */
  readonly born: boolean[];
}

/** Listens on loopback with the serving's options, noting how each request was built. */
async function serve(app: Express, options: http.ServerOptions): Promise<Served> {
  const server = http.createServer(options, app);
  const { born } = recordBirths(server, app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, born };
}

async function closeServer(server: http.Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => {
    server.close(() => {
      resolve();
    });
  });
}

const STYLES = [
  { label: 'tollgate().protect()', build: withTollgate },
  { label: 'the single middlewares', build: withSingleMiddlewares },
] as const;

function expectErrorAnswer(response: request.Response, status: number, code: string): void {
  expect({ status: response.status, body: response.body as unknown }).toEqual({
    status,
    body: {
      status,
      code,
      message: expect.any(String) as unknown,
      request_id: expect.any(String) as unknown,
      // A 429 names the limit that refused.
      ...(status === 429 ? { scope: expect.stringMatching(/^[a-z][a-z0-9-]*$/) as unknown } : {}),
    },
  });
  expect(response.headers['content-type']).toMatch(/^application\/json/);
  expect(response.text).not.toContain('hunter2');
}

const faults: unknown[] = [];
const onFault = (error: unknown): void => {
  faults.push(error);
};
beforeAll(() => {
  process.on('unhandledRejection', onFault);
  process.on('uncaughtException', onFault);
});
afterAll(() => {
  process.off('unhandledRejection', onFault);
  process.off('uncaughtException', onFault);
  expect(faults).toEqual([]);
});

for (const major of MAJORS) {
  for (const [style, serving] of STYLES.flatMap((s) => SERVINGS.map((v) => [s, v] as const))) {
    describe(`${major.label}, ${style.label}, ${serving.label}`, () => {
      const fixtures = createFixtures();
      const tokens = new TokenService({ secret: TOKEN_SECRET });
      let built: Built;
      let served: Served;
      let server: http.Server;
      beforeAll(async () => {
        built = style.build(major.express, fixtures, tokens);
        served = await serve(built.app, serving.options(built.app));
        server = served.server;
      });
      afterAll(async () => {
        await closeServer(server);
        built.close();
      });

      const secret = (key: { secretKey: string }): Record<string, string> => ({
        Authorization: `Bearer ${key.secretKey}`,
      });

      /** The app still serves a right key after the case. */
      const stillServes = async (): Promise<void> => {
        const next = await request(server).get('/orders').set(secret(fixtures.keys.level2));
        expect({ status: next.status, body: next.body as unknown }).toEqual({
          status: 200,
          body: { account: 'acct_open' },
        });
      };

      const cases: [string, () => request.Test, number, string][] = [
        [
          'a wrong key',
          () =>
            request(server)
              .get('/orders')
              .set('Authorization', `Bearer ${generateKey('secret', 'test')}`),
          401,
          'invalid_api_key',
        ],
        [
          'a forged token',
          () => {
            const forger = new TokenService({ secret: 'not-the-token-secret-0123456789-abcdefgh' });
            const { token } = forger.issue({
              id: 'key_admin',
              accountId: 'acct_open',
              role: 'administrator',
            });
            return request(server).get('/orders').set('Authorization', `Bearer ${token}`);
          },
          401,
          'invalid_token',
        ],
        [
          'a wrong key pair',
          () =>
            request(server)
              .post('/token')
              .send({
                api_key: fixtures.keys.level2.publishableKey,
                api_secret: generateKey('secret', 'test'),
              }),
          401,
          'invalid_credentials',
        ],
        ['a missing credential', () => request(server).get('/orders'), 401, 'missing_credentials'],
        [
          'malformed JSON',
          () =>
            request(server)
              .post('/token')
              .set('Content-Type', 'application/json')
              .send('{"api_key": '),
          400,
          'invalid_request',
        ],
        [
          'an address outside the whitelist',
          () => request(server).get('/orders').set(secret(fixtures.keys.walled)),
          403,
          'ip_not_whitelisted',
        ],
        [
          'an expired token',
          () => {
            const past = new TokenService({
              secret: TOKEN_SECRET,
              ttlSeconds: 60,
              now: () => Date.now() - 3_600_000,
            });
            const { token } = past.issue({ id: 'key_l2', accountId: 'acct_open', role: 'level-2' });
            return request(server).get('/orders').set('Authorization', `Bearer ${token}`);
          },
          401,
          'expired_token',
        ],
        [
          'a publishable key where a secret key or token is needed',
          () =>
            request(server)
              .get('/orders')
              .set('X-Service-Public-API-Key', fixtures.keys.level2.publishableKey),
          401,
          'credential_not_allowed',
        ],
        ['an unknown path', () => request(server).get('/nowhere'), 404, 'not_found'],
        [
          'a method the route lacks',
          () => request(server).delete('/orders'),
          405,
          'method_not_allowed',
        ],
        [
          'a body over the limit',
          () =>
            request(server)
              .post('/token')
              .set('Content-Type', 'application/json')
              .send(JSON.stringify({ api_key: 'x'.repeat(70_000), api_secret: 'y' })),
          413,
          'payload_too_large',
        ],
        [
          'a body that is not JSON',
          () => request(server).post('/token').set('Content-Type', 'text/plain').send('api_key=x'),
          415,
          'unsupported_media_type',
        ],
        [
          'a key store that throws',
          () => request(server).get('/broken').set(secret(fixtures.keys.level2)),
          500,
          'internal_error',
        ],
        [
          'a role below the route',
          () => request(server).get('/orders').set(secret(fixtures.keys.level1)),
          403,
          'insufficient_role',
        ],
      ];

      it.each(cases)(
        '%s: its error answer, then the app serves the next request',
        async (_name, send, status, code) => {
          expectErrorAnswer(await send(), status, code);
          await stillServes();
        },
      );

      it('over the limit: 429 rate_limited with Retry-After, then the app serves the next request', async () => {
        for (let i = 0; i < 2; i++) {
          expect(
            (await request(server).get('/limited').set(secret(fixtures.keys.admin))).status,
          ).toBe(200);
        }
        const over = await request(server).get('/limited').set(secret(fixtures.keys.admin));
        expectErrorAnswer(over, 429, 'rate_limited');
        expect(Number(over.headers['retry-after'])).toBeGreaterThanOrEqual(1);
        await stillServes();
      });

      it(`requests reach the app ${serving.born ? 'born with' : 'without'} its prototypes`, async () => {
        const before = served.born.length;
        await stillServes();
        expect(served.born.slice(before)).toEqual([serving.born]);
      });

      it('a key pair exchanged for a token that the protected route accepts', async () => {
        const exchanged = await request(server).post('/token').send({
          api_key: fixtures.keys.level2.publishableKey,
          api_secret: fixtures.keys.level2.secretKey,
        });
        expect(exchanged.status).toBe(200);
        const token = (exchanged.body as { token: string }).token;
        const served = await request(server).get('/orders').set('Authorization', `Bearer ${token}`);
        expect(served.status).toBe(200);
      });
    });

    describe(`${major.label}, ${style.label}, ${serving.label}, Redis down`, () => {
      const fixtures = createFixtures();
      const tokens = new TokenService({ secret: TOKEN_SECRET });
      let redis: LimiterRedisConnection;
      let built: Built;
      let server: http.Server;
      beforeAll(async () => {
        // Nothing listens on this port: every command fails, and the limits count in memory.
        redis = createLimiterRedis({
          url: `redis://127.0.0.1:${await freePort()}`,
          connectTimeoutMs: 200,
        });
        built = style.build(major.express, fixtures, tokens, redis);
        server = (await serve(built.app, serving.options(built.app))).server;
      });
      afterAll(async () => {
        await closeServer(server);
        built.close();
        await redis.close();
        // ioredis leaves its connect timer (200 ms) running after a disconnect while connecting.
        await new Promise((resolve) => setTimeout(resolve, 250));
      });

      it('serves right keys, refuses wrong ones with their error answers, and stays up', async () => {
        for (let i = 0; i < 3; i++) {
          const served = await request(server)
            .get('/orders')
            .set('Authorization', `Bearer ${fixtures.keys.level2.secretKey}`);
          expect(served.status).toBe(200);
        }
        expectErrorAnswer(
          await request(server)
            .get('/orders')
            .set('Authorization', `Bearer ${generateKey('secret', 'test')}`),
          401,
          'invalid_api_key',
        );
        const afterwards = await request(server)
          .get('/orders')
          .set('Authorization', `Bearer ${fixtures.keys.level2.secretKey}`);
        expect(afterwards.status).toBe(200);
        expect(redis.health.state).not.toBe('shared');
      });
    });
  }
}
