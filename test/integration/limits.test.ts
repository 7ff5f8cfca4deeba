import type { IncomingHttpHeaders } from 'node:http';
import type { LimitsConfig } from '../../gateway/config';
import { expectErrorBody } from '../helpers/error-body';
import { allSecrets } from '../helpers/fixtures';
import {
  bearer,
  type SendOptions,
  type SendResult,
  startTestGateway,
  type TestGateway,
} from '../helpers/gateway';
import { findLeaks } from '../helpers/logs';
import { exchange, sleep } from '../helpers/routes';

/**
 * Rate limits with in-memory counters: exact limits, Retry-After, the IETF RateLimit headers,
 * what each scope counts per (account or client IP), and the per-IP limit on failed authentication.
 */

const PK_HEADER = 'X-Service-Public-API-Key';

/** Small limits, so every boundary is reached in a few requests. */
const SMALL: LimitsConfig = {
  payments: 3,
  authenticated: 2,
  checkoutCreate: 2,
  checkoutRead: 4,
  publishablePayments: 5,
  authFailures: 3,
  windowMs: 60_000,
};

type ScopeName = 'payments' | 'authenticated' | 'checkout-create' | 'checkout-read';

interface Scope {
  /** The name in the `RateLimit` / `RateLimit-Policy` headers. */
  readonly name: ScopeName;
  readonly limitOf: (limits: LimitsConfig) => number;
  /** An admitted request of this scope, from `from`. */
  readonly request: (gateway: TestGateway, from?: string) => SendOptions;
}

const SCOPES: readonly Scope[] = [
  {
    name: 'payments',
    limitOf: (limits) => limits.payments,
    request: (g, from) => ({
      path: '/api/v1/wallets/',
      headers: bearer(g.fixtures.keys.admin.secretKey),
      ...(from === undefined ? {} : { from }),
    }),
  },
  {
    name: 'authenticated',
    limitOf: (limits) => limits.authenticated,
    request: (g, from) => ({
      path: '/api/v1/transactions/',
      headers: bearer(g.fixtures.keys.admin.secretKey),
      ...(from === undefined ? {} : { from }),
    }),
  },
  {
    name: 'checkout-create',
    limitOf: (limits) => limits.checkoutCreate,
    request: (g, from) => ({
      method: 'POST',
      path: '/api/v1/checkout/',
      headers: { [PK_HEADER]: g.fixtures.keys.level1.publishableKey },
      body: { amount: 100 },
      ...(from === undefined ? {} : { from }),
    }),
  },
  {
    name: 'checkout-read',
    limitOf: (limits) => limits.checkoutRead,
    request: (g, from) => ({
      path: '/api/v1/checkout/chk_1/',
      headers: { [PK_HEADER]: g.fixtures.keys.level1.publishableKey },
      ...(from === undefined ? {} : { from }),
    }),
  },
];

function scope(name: ScopeName): Scope {
  const found = SCOPES.find((candidate) => candidate.name === name);
  if (found === undefined) throw new Error(`no scope ${name}`);
  return found;
}

function headerText(headers: IncomingHttpHeaders, name: string): string {
  const value = headers[name];
  return Array.isArray(value) ? value.join(', ') : (value ?? '');
}

/** `q` and `w` of the scope's entry in `RateLimit-Policy`. */
function policyOf(
  headers: IncomingHttpHeaders,
  name: string,
): { q: number; w: number } | undefined {
  const match = new RegExp(`"${name}"; q=(\\d+); w=(\\d+)`).exec(
    headerText(headers, 'ratelimit-policy'),
  );
  return match === null ? undefined : { q: Number(match[1]), w: Number(match[2]) };
}

/** `r` and `t` of the scope's entry in `RateLimit`. */
function stateOf(headers: IncomingHttpHeaders, name: string): { r: number; t: number } | undefined {
  const match = new RegExp(`"${name}"; r=(\\d+); t=(\\d+)`).exec(headerText(headers, 'ratelimit'));
  return match === null ? undefined : { r: Number(match[1]), t: Number(match[2]) };
}

function retryAfterOf(result: SendResult): number {
  const value = result.headers['retry-after'];
  expect(value).toMatch(/^\d+$/);
  return Number(value);
}

/** Sends `count` copies of a request, `concurrency` at a time; returns the statuses in order. */
async function sendMany(
  gateway: TestGateway,
  options: SendOptions,
  count: number,
  concurrency = 1,
): Promise<number[]> {
  const statuses: number[] = [];
  for (let sent = 0; sent < count; sent += concurrency) {
    const batch = Array.from({ length: Math.min(concurrency, count - sent) }, () =>
      gateway.send(options),
    );
    for (const result of await Promise.all(batch)) statuses.push(result.status);
  }
  return statuses;
}

function expectLimited(result: SendResult, name: string, limit: number, windowMs: number): void {
  expectErrorBody(result, { status: 429, code: 'rate_limited', message: 'Too many requests' });
  const retryAfter = retryAfterOf(result);
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(retryAfter).toBeLessThanOrEqual(Math.ceil(windowMs / 1000));
  expect(policyOf(result.headers, name)).toEqual({ q: limit, w: Math.ceil(windowMs / 1000) });
  expect(stateOf(result.headers, name)?.r).toBe(0);
}

describe('rate limits in memory', () => {
  let gateway: TestGateway;

  beforeEach(async () => {
    gateway = await startTestGateway({ limits: SMALL });
  });
  afterEach(async () => {
    expect(findLeaks(gateway.logs.lines.join('\n'), allSecrets(gateway.fixtures))).toEqual([]);
    await gateway.close();
  });

  describe.each(SCOPES.map((entry) => [entry.name, entry] as const))('scope %s', (name, entry) => {
    const limit = entry.limitOf(SMALL);
    const windowSeconds = SMALL.windowMs / 1000;

    it(`admits exactly the limit; the next request is the first 429 and never reaches the upstream`, async () => {
      for (let i = 1; i <= limit; i++) {
        const result = await gateway.send(entry.request(gateway));
        expect(result.status).toBeLessThan(300);
        expect(policyOf(result.headers, name)).toEqual({ q: limit, w: windowSeconds });
        const state = stateOf(result.headers, name);
        expect(state?.r).toBe(limit - i);
        expect(state?.t).toBeGreaterThanOrEqual(1);
        expect(state?.t).toBeLessThanOrEqual(windowSeconds);
      }
      expect(gateway.upstream.requests).toHaveLength(limit);

      for (let extra = 0; extra < 2; extra++) {
        expectLimited(await gateway.send(entry.request(gateway)), name, limit, SMALL.windowMs);
      }
      expect(gateway.upstream.requests).toHaveLength(limit);
    });
  });

  describe('counted per account: payments and authenticated', () => {
    it.each([['payments'], ['authenticated']] as const)(
      '%s: the keys and tokens of one account share the limit; another account does not',
      async (name) => {
        const limit = scope(name).limitOf(SMALL);
        const path = name === 'payments' ? '/api/v1/wallets/' : '/api/v1/transactions/';
        const { level1, level2, admin, walled } = gateway.fixtures.keys;
        // Minted by the gateway's token service directly: an exchange would count in `authenticated`.
        const token = gateway.tokens.issue({
          id: level2.id,
          accountId: level2.accountId,
          role: level2.role,
        }).token;
        const credentials = [level1.secretKey, token, admin.secretKey];
        for (let i = 0; i < limit; i++) {
          const secret = credentials[i % credentials.length] ?? '';
          expect(
            (
              await gateway.send({
                path,
                headers: bearer(secret),
                from: i % 2 === 0 ? '127.0.0.1' : '127.0.0.3',
              })
            ).status,
          ).toBe(200);
        }
        const upstreamCalls = gateway.upstream.requests.length;
        // Another key of the same account, from yet another address: the account's count is spent.
        expectLimited(
          await gateway.send({
            path,
            headers: bearer(gateway.fixtures.keys.level3.secretKey),
            from: '127.0.0.4',
          }),
          name,
          limit,
          SMALL.windowMs,
        );
        expect(gateway.upstream.requests).toHaveLength(upstreamCalls);
        // Another account, from the same address: its own count.
        const other = await gateway.send({
          path,
          headers: bearer(walled.secretKey),
          from: '127.0.0.2',
        });
        expect(other.status).toBe(200);
        expect(stateOf(other.headers, name)?.r).toBe(limit - 1);
      },
    );

    it("the token exchange counts in the account's authenticated scope", async () => {
      const limit = SMALL.authenticated;
      for (let i = 0; i < limit; i++)
        expect((await exchange(gateway, gateway.fixtures.keys.admin)).status).toBe(200);
      expectLimited(
        await exchange(gateway, gateway.fixtures.keys.level1),
        'authenticated',
        limit,
        SMALL.windowMs,
      );
      expectLimited(
        await gateway.send({
          path: '/api/v1/transactions/',
          headers: bearer(gateway.fixtures.keys.level2.secretKey),
        }),
        'authenticated',
        limit,
        SMALL.windowMs,
      );
      expect(gateway.upstream.requests).toHaveLength(0);
    });

    it('payments and authenticated are counted separately', async () => {
      const headers = bearer(gateway.fixtures.keys.admin.secretKey);
      const payments = await sendMany(
        gateway,
        { path: '/api/v1/wallets/', headers },
        SMALL.payments + 1,
      );
      expect(payments.at(-1)).toBe(429);
      expect((await gateway.send({ path: '/api/v1/transactions/', headers })).status).toBe(200);
    });
  });

  describe('counted per client IP: the public checkout scopes', () => {
    it.each([['checkout-create'], ['checkout-read']] as const)(
      '%s: every key from one address shares the limit; another address does not',
      async (name) => {
        const entry = scope(name);
        const limit = entry.limitOf(SMALL);
        const { level1, admin, walled } = gateway.fixtures.keys;
        const keys = [level1, admin];
        for (let i = 0; i < limit; i++) {
          const request = entry.request(gateway, '127.0.0.1');
          const key = keys[i % keys.length] ?? level1;
          expect(
            (await gateway.send({ ...request, headers: { [PK_HEADER]: key.publishableKey } }))
              .status,
          ).toBeLessThan(300);
        }
        // Another account's publishable key from the same address: the address's count is spent.
        const same = entry.request(gateway, '127.0.0.1');
        expectLimited(
          await gateway.send({ ...same, headers: { [PK_HEADER]: walled.publishableKey } }),
          name,
          limit,
          SMALL.windowMs,
        );
        expect(gateway.upstream.requests).toHaveLength(limit);
        // The same key from another address: a count of its own.
        const other = await gateway.send(entry.request(gateway, '127.0.0.3'));
        expect(other.status).toBeLessThan(300);
        expect(stateOf(other.headers, name)?.r).toBe(limit - 1);
      },
    );

    it('checkout create (POST) and checkout read (GET) are counted separately', async () => {
      const create = scope('checkout-create');
      const read = scope('checkout-read');
      const creates = await sendMany(gateway, create.request(gateway), SMALL.checkoutCreate + 1);
      expect(creates).toEqual([...Array<number>(SMALL.checkoutCreate).fill(200), 429]);
      const reads = await sendMany(gateway, read.request(gateway), SMALL.checkoutRead + 1);
      expect(reads).toEqual([...Array<number>(SMALL.checkoutRead).fill(200), 429]);
      expect((await gateway.send(create.request(gateway))).status).toBe(429);
      expect(gateway.upstream.requests).toHaveLength(SMALL.checkoutCreate + SMALL.checkoutRead);
    });
  });
});

describe('failed authentication, limited per client IP', () => {
  /** Scope limits out of reach: only the failure limit is under test. */
  const limits: LimitsConfig = { ...SMALL, payments: 1000, authenticated: 1000 };
  let gateway: TestGateway;

  beforeEach(async () => {
    gateway = await startTestGateway({ limits });
  });
  afterEach(async () => {
    expect(findLeaks(gateway.logs.lines.join('\n'), allSecrets(gateway.fixtures))).toEqual([]);
    await gateway.close();
  });

  const attacker = '127.0.0.4';
  const bystander = '127.0.0.5';

  const wrongPair = (g: TestGateway): SendOptions => ({
    method: 'POST',
    path: '/api/v1/auth/generate-token/',
    body: {
      api_key: g.fixtures.keys.admin.publishableKey,
      api_secret: g.fixtures.keys.level1.secretKey,
    },
    from: attacker,
  });

  it(`after the configured number of wrong secrets, the next attempt, even with a valid key, is refused with 429`, async () => {
    for (let i = 0; i < limits.authFailures; i++) {
      expectErrorBody(await gateway.send(wrongPair(gateway)), {
        status: 401,
        code: 'invalid_credentials',
        message: 'Invalid API key or secret',
      });
    }
    const { admin } = gateway.fixtures.keys;
    const validExchange = await exchange(gateway, admin, attacker);
    expectErrorBody(validExchange, {
      status: 429,
      code: 'rate_limited',
      message: 'Too many requests',
    });
    const retryAfter = retryAfterOf(validExchange);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(limits.windowMs / 1000);
    expect(policyOf(validExchange.headers, 'auth-failures')).toEqual({
      q: limits.authFailures,
      w: limits.windowMs / 1000,
    });

    const validSecret = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(admin.secretKey),
      from: attacker,
    });
    expectErrorBody(validSecret, {
      status: 429,
      code: 'rate_limited',
      message: 'Too many requests',
    });
    expect(gateway.upstream.requests).toHaveLength(0);

    // Another address is not affected.
    expect((await exchange(gateway, admin, bystander)).status).toBe(200);
    expect(
      (
        await gateway.send({
          path: '/api/v1/wallets/',
          headers: bearer(admin.secretKey),
          from: bystander,
        })
      ).status,
    ).toBe(200);
    expect(gateway.upstream.requests).toHaveLength(1);
  });

  it('wrong secret keys, forged tokens and wrong pairs all count; successful requests do not', async () => {
    const { admin } = gateway.fixtures.keys;
    const successes = 3;
    const failures: SendOptions[] = [
      {
        path: '/api/v1/wallets/',
        headers: bearer(`${admin.secretKey.slice(0, -3)}abc`),
        from: attacker,
      },
      {
        path: '/api/v1/wallets/',
        headers: bearer('eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJrZXlfYWRtaW4ifQ.c2lnbmF0dXJl'),
        from: attacker,
      },
      wrongPair(gateway),
    ];
    expect(failures).toHaveLength(limits.authFailures);
    for (const [index, failure] of failures.entries()) {
      expect((await gateway.send(failure)).status).toBe(401);
      if (index < failures.length - 1) {
        // Successes in between neither count nor forgive.
        for (let i = 0; i < successes; i++) {
          expect(
            (
              await gateway.send({
                path: '/api/v1/transactions/id_1/',
                headers: bearer(admin.secretKey),
                from: attacker,
              })
            ).status,
          ).toBe(200);
        }
      }
    }
    expect(
      (
        await gateway.send({
          path: '/api/v1/payment/status/',
          method: 'POST',
          headers: { [PK_HEADER]: admin.publishableKey },
          body: { invoice_id: 'x' },
          from: attacker,
        })
      ).status,
    ).toBe(429);
  });
});

describe('Retry-After against the real reset (short window)', () => {
  const windowMs = 2000;
  const limits: LimitsConfig = { ...SMALL, payments: 2, windowMs };
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({ limits });
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('is a whole number of seconds, at least 1, at most the window, and never earlier than the reset', async () => {
    const request = scope('payments').request(gateway);
    const windowOpenedBefore = Date.now();
    expect(await sendMany(gateway, request, limits.payments)).toEqual([200, 200]);
    const limited = await gateway.send(request);
    const limitedAt = Date.now();
    expectLimited(limited, 'payments', limits.payments, windowMs);
    const retryAfter = retryAfterOf(limited);
    // The window opened no earlier than `windowOpenedBefore`, so it resets no earlier than this:
    expect(retryAfter * 1000).toBeGreaterThanOrEqual(windowOpenedBefore + windowMs - limitedAt);

    await sleep(retryAfter * 1000);
    const admitted = await gateway.send(request);
    expect(admitted.status).toBe(200);
    expect(gateway.upstream.requests).toHaveLength(limits.payments + 1);
  });
});

describe('the default limits (1500 / 100 / 30 / 45 per minute)', () => {
  /** The documented limits per minute, written out independently of the gateway's config. */
  const DOCUMENTED_LIMITS: Record<ScopeName, number> = {
    payments: 1500,
    authenticated: 100,
    'checkout-create': 30,
    'checkout-read': 45,
  };
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway();
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('admit exactly the documented numbers per scope, then 429', async () => {
    for (const entry of SCOPES) {
      const limit = DOCUMENTED_LIMITS[entry.name];
      const before = gateway.upstream.requests.length;
      const statuses = await sendMany(gateway, entry.request(gateway), limit, 25);
      expect(statuses.filter((status) => status >= 300)).toEqual([]);
      const limited = await gateway.send(entry.request(gateway));
      expectLimited(limited, entry.name, limit, 60_000);
      expect(gateway.upstream.requests.length - before).toBe(limit);
    }
  }, 60_000);
});
