import express, { type Express, type RequestHandler } from 'express';
import request from 'supertest';
import { ConfigurationError, generateKey, type Logger, TokenService, tollgate } from '../../lib';
import {
  authenticate,
  clientIp,
  createAuthFailureLimiter,
  createRateLimiter,
  errorHandler,
  requestId,
  requireRole,
  requireWhitelistedIp,
} from '../../lib/entry/express';
import { createFixtures, TOKEN_SECRET } from '../helpers/fixtures';

/**
 * Five ways a new user mounted the single middlewares wrongly, each failing closed
 * (`500 internal_error` and a logged misconfiguration naming the missing step), and the same app
 * written with `tollgate().protect()`, where the mistake cannot be expressed. Requests
 * come from 127.0.0.1; the fixtures' `walled` account whitelists 127.0.0.2 and 127.0.10.0/24 only.
 */

interface LoggedError {
  readonly fields: { error?: { name?: string; code?: string } };
  readonly message: string | undefined;
}

function capturingLogger(): { logger: Logger; errors: LoggedError[] } {
  const errors: LoggedError[] = [];
  return {
    errors,
    logger: {
      info: () => undefined,
      warn: () => undefined,
      error: (fields, message) => {
        errors.push({ fields: fields, message });
      },
    },
  };
}

const answer: RequestHandler = (req, res) => {
  res.json({ account_id: req.auth?.accountId });
};

function appWith(chain: RequestHandler[], logger: Logger): Express {
  const app = express();
  app.use(requestId(), clientIp());
  app.get('/orders', ...chain, answer);
  app.use(errorHandler({ logger }));
  return app;
}

function bearer(secret: string): Record<string, string> {
  return { Authorization: `Bearer ${secret}` };
}

/** The response is `500 internal_error` and the log line names the misconfigured step. */
function expectFailedClosed(
  response: request.Response,
  errors: readonly LoggedError[],
  step: string,
): void {
  expect(response.status).toBe(500);
  expect(response.body).toEqual({
    status: 500,
    code: 'internal_error',
    message: 'Internal error',
    request_id: expect.any(String) as unknown,
  });
  expect(errors.map(({ fields }) => fields.error)).toContainEqual({
    name: 'TollgateMisconfiguration',
    code: step,
  });
}

describe('mis-mountings of the single middlewares fail closed', () => {
  const fixtures = createFixtures();
  const keyStore = fixtures.ring;

  it('requireWhitelistedIp() before authenticate(): 500, never the 200 it gave', async () => {
    const { logger, errors } = capturingLogger();
    const app = appWith(
      [requireWhitelistedIp(), authenticate({ keyStore, accept: ['secret'] })],
      logger,
    );
    const response = await request(app).get('/orders').set(bearer(fixtures.keys.walled.secretKey));
    expectFailedClosed(response, errors, 'requireWhitelistedIp_before_authenticate');
  });

  it('a per-account limiter before authenticate(): 500, never one bucket per IP', async () => {
    const { logger, errors } = capturingLogger();
    const limiter = createRateLimiter({ name: 'orders', limit: 5 });
    const app = appWith(
      [limiter.middleware, authenticate({ keyStore, accept: ['secret'] })],
      logger,
    );
    const response = await request(app).get('/orders').set(bearer(fixtures.keys.level2.secretKey));
    expectFailedClosed(response, errors, 'account_limiter_before_authenticate');
    limiter.store.shutdown();
  });

  it('recordFailure placed before the handler: the lockout still happens, since authenticate() counts', async () => {
    const { logger } = capturingLogger();
    const authFailures = createAuthFailureLimiter({ limit: 20 });
    const app = appWith(
      [
        authFailures.guard,
        authFailures.recordFailure as unknown as RequestHandler,
        authenticate({ keyStore, accept: ['secret'], authFailures }),
      ],
      logger,
    );
    for (let i = 0; i < 20; i++) {
      const wrong = await request(app)
        .get('/orders')
        .set(bearer(generateKey('secret')));
      expect(wrong.status).toBe(401);
    }
    const right = await request(app).get('/orders').set(bearer(fixtures.keys.level2.secretKey));
    expect(right.status).toBe(429);
    expect(right.body).toMatchObject({ code: 'rate_limited' });
    authFailures.shutdown();
  });

  it('a whitelist refusal counts against the budget where requireWhitelistedIp() is given it', async () => {
    const { logger } = capturingLogger();
    const authFailures = createAuthFailureLimiter({ limit: 2 });
    const app = appWith(
      [
        authenticate({ keyStore, accept: ['secret'], authFailures }),
        requireWhitelistedIp({ authFailures }),
      ],
      logger,
    );
    for (let i = 0; i < 2; i++) {
      const refused = await request(app).get('/orders').set(bearer(fixtures.keys.walled.secretKey));
      expect(refused.status).toBe(403);
    }
    const right = await request(app).get('/orders').set(bearer(fixtures.keys.level2.secretKey));
    expect(right.status).toBe(429);
    authFailures.shutdown();
  });

  it('requireRole() before authenticate(): 500, never a misleading 403 for a valid key', async () => {
    const { logger, errors } = capturingLogger();
    const app = appWith(
      [requireRole('level-2'), authenticate({ keyStore, accept: ['secret'] })],
      logger,
    );
    const response = await request(app).get('/orders').set(bearer(fixtures.keys.level2.secretKey));
    expectFailedClosed(response, errors, 'requireRole_before_authenticate');
  });

  it('two limiters of the same name on one route: 500, never a double count', async () => {
    const { logger, errors } = capturingLogger();
    const first = createRateLimiter({ name: 'orders', limit: 5 });
    const second = createRateLimiter({ name: 'orders', limit: 5 });
    const app = appWith(
      [authenticate({ keyStore, accept: ['secret'] }), first.middleware, second.middleware],
      logger,
    );
    const response = await request(app).get('/orders').set(bearer(fixtures.keys.level2.secretKey));
    expectFailedClosed(response, errors, 'limiter_counted_twice');
    first.store.shutdown();
    second.store.shutdown();
  });
});

describe('the same app with tollgate().protect(): the mistakes cannot be made', () => {
  const fixtures = createFixtures();
  const tokens = new TokenService({ secret: TOKEN_SECRET });
  const gates: { close(): void }[] = [];
  afterAll(() => {
    for (const gate of gates) gate.close();
  });

  function gateApp(options: { ordersLimit?: number; ipWhitelist?: boolean } = {}): Express {
    const gate = tollgate({
      keyStore: fixtures.ring,
      tokens,
      scopes: { orders: { limit: options.ordersLimit ?? 100, per: 'account' } },
    });
    gates.push(gate);
    const app = express();
    app.use(gate.context());
    app.get(
      '/orders',
      gate.protect({
        accept: ['secret', 'token'],
        role: 'level-2',
        limit: 'orders',
        ipWhitelist: options.ipWhitelist,
      }),
      answer,
    );
    app.use(gate.errorHandler());
    return app;
  }

  it('applies the whitelist after the credential: 403 ip_not_whitelisted from 127.0.0.1', async () => {
    const response = await request(gateApp())
      .get('/orders')
      .set(bearer(fixtures.keys.walled.secretKey));
    expect(response.status).toBe(403);
    expect(response.body).toMatchObject({ code: 'ip_not_whitelisted' });
  });

  it('counts per account: two accounts have their own buckets', async () => {
    const app = gateApp({ ordersLimit: 1, ipWhitelist: false });
    const open = bearer(fixtures.keys.level2.secretKey);
    const walled = bearer(fixtures.keys.walled.secretKey);
    expect((await request(app).get('/orders').set(open)).status).toBe(200);
    expect((await request(app).get('/orders').set(walled)).status).toBe(200);
    expect((await request(app).get('/orders').set(open)).status).toBe(429);
  });

  it('locks an IP out after 20 failures, the right key included', async () => {
    const app = gateApp();
    for (let i = 0; i < 20; i++) {
      expect(
        (
          await request(app)
            .get('/orders')
            .set(bearer(generateKey('secret')))
        ).status,
      ).toBe(401);
    }
    const right = await request(app).get('/orders').set(bearer(fixtures.keys.level2.secretKey));
    expect(right.status).toBe(429);
  });

  it('checks the role of the authenticated key: a level-2 key passes role level-2, level-1 does not', async () => {
    const app = gateApp();
    expect(
      (await request(app).get('/orders').set(bearer(fixtures.keys.level2.secretKey))).status,
    ).toBe(200);
    const low = await request(app).get('/orders').set(bearer(fixtures.keys.level1.secretKey));
    expect(low.status).toBe(403);
    expect(low.body).toMatchObject({ code: 'insufficient_role' });
  });

  it("warns once, naming the setting, when the app trusts every proxy ('trust proxy' true)", async () => {
    const warnings: unknown[] = [];
    const gate = tollgate({
      keyStore: fixtures.ring,
      scopes: { orders: { limit: 10 } },
      logger: {
        info: () => undefined,
        warn: (fields) => warnings.push(fields),
        error: () => undefined,
      },
    });
    gates.push(gate);
    const app = express();
    app.set('trust proxy', true);
    app.use(gate.context());
    app.get('/', (_req, res) => {
      res.json({});
    });
    for (let i = 0; i < 2; i++) expect((await request(app).get('/')).status).toBe(200);
    expect(warnings).toEqual([{ event: 'tollgate.misconfiguration', setting: 'trust proxy' }]);
  });

  it('declares each scope once and refuses, at start, a scope or an option it does not know', () => {
    const gate = tollgate({
      keyStore: fixtures.ring,
      scopes: { orders: { limit: 10 } },
    });
    gates.push(gate);
    expect(() => gate.protect({ accept: ['secret'], limit: 'nope' as 'orders' })).toThrow(
      ConfigurationError,
    );
    expect(() => gate.protect({ accept: ['secret'], limit: 'nope' as 'orders' })).toThrow(
      /unknown scope "nope"; declared: orders/,
    );
    expect(() =>
      gate.protect({ accept: ['secret'], limit: 'orders', rol: 'level-2' } as never),
    ).toThrow(/unknown option "rol"/);
    expect(() => tollgate({ keyStore: fixtures.ring, scopes: {}, redisUrl: 'x' } as never)).toThrow(
      /tollgate\(\): unknown option "redisUrl"/,
    );
    expect(() => tollgate({ keyStore: fixtures.ring, scopes: { orders: { limit: 0 } } })).toThrow(
      /scope orders: limit/,
    );
    expect(() => tollgate({ keyStore: fixtures.ring, scopes: {}, expectedInstances: 0 })).toThrow(
      /expectedInstances/,
    );
    expect(() => tollgate({ keyStore: fixtures.ring, scopes: {}, windowMs: -1 })).toThrow(
      /windowMs/,
    );
  });
});
