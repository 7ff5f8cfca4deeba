import { DEFAULT_LIMITS } from '../../gateway/config';
import type { SendOptions } from '../helpers/gateway';
import {
  auditEvents,
  bearer,
  describeHostileCases,
  type CaseContext,
  type CaseResult,
  type HostileCase,
} from './hostile-cases';

/**
 * Limits under attack: credential guessing is throttled per client IP (and then refuses even the
 * right key), public routes are limited per IP, authenticated ones per account. Every 429 carries
 * an integer `Retry-After` within the window, the JSON error body, never reaches the upstream and
 * is audited once. Each row runs on a fresh gateway with small limits.
 */

const LIMITS = { authFailures: 3, checkoutCreate: 2, authenticated: 2, payments: 3 } as const;
const WINDOW_SECONDS = DEFAULT_LIMITS.windowMs / 1000;
const WALLETS = '/api/v1/wallets/';
const CHECKOUT = '/api/v1/checkout/';
const EXCHANGE = '/api/v1/auth/generate-token/';

async function repeat(ctx: CaseContext, times: number, request: SendOptions): Promise<void> {
  for (let i = 0; i < times; i++) await ctx.gateway.send(request);
}

/** What every 429 must carry, and exactly one audit event saying why. */
function limited(result: CaseResult, ctx: CaseContext): void {
  const retryAfter = String(result.headers['retry-after']);
  expect(retryAfter).toMatch(/^\d+$/);
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
  expect(Number(retryAfter)).toBeLessThanOrEqual(WINDOW_SECONDS);
  // The body's scope is the limit the headers describe.
  const scope = String(result.body?.scope);
  expect(result.headers.ratelimit).toMatch(new RegExp(`^"${scope}"; r=0; t=\\d+$`));
  expect(result.headers['ratelimit-policy']).toMatch(new RegExp(`^"${scope}"; q=\\d+; w=\\d+`));
  expect(auditEvents(ctx.gateway, String(result.headers['x-request-id']))).toEqual([
    expect.objectContaining({ outcome: 'limited', reason: 'rate_limited', status: 429 }),
  ]);
}

const RATE_LIMITED = {
  status: 429,
  code: 'rate_limited',
  message: 'Too many requests',
  upstream: false,
  then: limited,
} as const;
const wrongKey = (from: string): SendOptions => ({
  path: WALLETS,
  headers: bearer('sk_test_guess_0123456789abcdef'),
  from,
});

const cases: HostileCase[] = [
  {
    name: 'wrong secret keys past the failure limit from one address: 429',
    prepare: (ctx) => repeat(ctx, LIMITS.authFailures, wrongKey('127.0.20.1')),
    request: () => wrongKey('127.0.20.1'),
    ...RATE_LIMITED,
    scope: 'auth-failures',
  },
  {
    name: 'past the failure limit even the right key is refused from that address: 429',
    prepare: (ctx) => repeat(ctx, LIMITS.authFailures + 1, wrongKey('127.0.20.2')),
    request: ({ keys }) => ({
      path: WALLETS,
      headers: bearer(keys.admin.secretKey),
      from: '127.0.20.2',
    }),
    ...RATE_LIMITED,
    scope: 'auth-failures',
  },
  {
    name: 'past the failure limit a 10 KB Authorization is refused by the limit first: 429',
    prepare: (ctx) => repeat(ctx, LIMITS.authFailures + 1, wrongKey('127.0.20.3')),
    request: () => ({ path: WALLETS, headers: bearer('k'.repeat(10 * 1024)), from: '127.0.20.3' }),
    ...RATE_LIMITED,
    scope: 'auth-failures',
  },
  {
    name: "another address is not throttled by one address's failures",
    prepare: (ctx) => repeat(ctx, LIMITS.authFailures + 1, wrongKey('127.0.20.4')),
    request: ({ keys }) => ({
      path: WALLETS,
      headers: bearer(keys.admin.secretKey),
      from: '127.0.20.5',
    }),
    status: 200,
    code: null,
    upstream: true,
  },
  {
    name: 'missing credentials are not counted as guesses: still 401',
    prepare: (ctx) => repeat(ctx, LIMITS.authFailures + 1, { path: WALLETS, from: '127.0.20.6' }),
    request: () => ({ path: WALLETS, from: '127.0.20.6' }),
    status: 401,
    code: 'missing_credentials',
    upstream: false,
  },
  {
    name: 'forged tokens are counted as guesses: 429',
    prepare: (ctx) =>
      repeat(ctx, LIMITS.authFailures, {
        path: WALLETS,
        headers: bearer('eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.forged'),
        from: '127.0.20.7',
      }),
    request: () => ({
      path: WALLETS,
      headers: bearer('eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.forged'),
      from: '127.0.20.7',
    }),
    ...RATE_LIMITED,
    scope: 'auth-failures',
  },
  {
    name: 'wrong key pairs on the token exchange are counted: 429',
    prepare: (ctx) =>
      repeat(ctx, LIMITS.authFailures, {
        method: 'POST',
        path: EXCHANGE,
        body: {
          api_key: ctx.keys.admin.publishableKey,
          api_secret: 'sk_test_guess_0123456789abcdef',
        },
        from: '127.0.20.8',
      }),
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.admin.publishableKey, api_secret: keys.admin.secretKey },
      from: '127.0.20.8',
    }),
    ...RATE_LIMITED,
    scope: 'auth-failures',
  },
  {
    name: 'whitelist refusals are counted: 429',
    prepare: (ctx) =>
      repeat(ctx, LIMITS.authFailures, {
        path: WALLETS,
        headers: bearer(ctx.keys.walled.secretKey),
        from: '127.0.20.9',
      }),
    request: ({ keys }) => ({
      path: WALLETS,
      headers: bearer(keys.walled.secretKey),
      from: '127.0.20.9',
    }),
    ...RATE_LIMITED,
    scope: 'auth-failures',
  },
  {
    name: 'checkout past its per-address limit: 429, the upstream not called',
    prepare: (ctx) =>
      repeat(ctx, LIMITS.checkoutCreate, {
        method: 'POST',
        path: CHECKOUT,
        headers: { 'x-service-public-api-key': ctx.keys.admin.publishableKey },
        from: '127.0.21.1',
      }),
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: { 'x-service-public-api-key': keys.admin.publishableKey },
      from: '127.0.21.1',
    }),
    ...RATE_LIMITED,
    scope: 'checkout-create',
  },
  {
    name: 'checkout counts the address, not the key: another key from the same address, 429',
    prepare: (ctx) =>
      repeat(ctx, LIMITS.checkoutCreate, {
        method: 'POST',
        path: CHECKOUT,
        headers: { 'x-service-public-api-key': ctx.keys.admin.publishableKey },
        from: '127.0.21.2',
      }),
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: { 'x-service-public-api-key': keys.level1.publishableKey },
      from: '127.0.21.2',
    }),
    ...RATE_LIMITED,
    scope: 'checkout-create',
  },
  {
    name: 'transactions past the per-account limit, with another key of the account: 429',
    prepare: (ctx) =>
      repeat(ctx, LIMITS.authenticated, {
        path: '/api/v1/transactions/',
        headers: bearer(ctx.keys.admin.secretKey),
      }),
    request: ({ keys }) => ({
      path: '/api/v1/transactions/',
      headers: bearer(keys.level1.secretKey),
      from: '127.0.21.3',
    }),
    ...RATE_LIMITED,
    scope: 'authenticated',
  },
  {
    name: 'wallets past the payments limit, with a token: 429',
    prepare: (ctx) =>
      repeat(ctx, LIMITS.payments, { path: WALLETS, headers: bearer(ctx.keys.level2.secretKey) }),
    request: (ctx) => ({ path: WALLETS, headers: bearer(ctx.token(ctx.keys.level3)) }),
    ...RATE_LIMITED,
    scope: 'payments',
  },
  {
    name: "the token exchange past the account's limit: 429",
    prepare: (ctx) =>
      repeat(ctx, LIMITS.authenticated, {
        method: 'POST',
        path: EXCHANGE,
        body: { api_key: ctx.keys.admin.publishableKey, api_secret: ctx.keys.admin.secretKey },
      }),
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.level1.publishableKey, api_secret: keys.level1.secretKey },
    }),
    ...RATE_LIMITED,
    scope: 'authenticated',
  },
  {
    name: "one account's limit leaves another account alone",
    prepare: (ctx) =>
      repeat(ctx, LIMITS.payments + 1, {
        path: WALLETS,
        headers: bearer(ctx.keys.admin.secretKey),
      }),
    request: ({ keys }) => ({
      path: WALLETS,
      headers: bearer(keys.walled.secretKey),
      from: '127.0.0.2',
    }),
    status: 200,
    code: null,
    upstream: true,
  },
];

describeHostileCases('limits under attack', cases, { limits: LIMITS, freshGateway: true });

const rotating: HostileCase[] = [
  {
    name: 'rotating non-address X-Forwarded-For values behind a trusted proxy never make new limit keys: 400',
    prepare: async (ctx) => {
      for (const value of ['garbage-1', 'garbage-2', '167772161', '10.1', '1.2.3.4:80']) {
        const result = await ctx.gateway.send({
          method: 'POST',
          path: CHECKOUT,
          headers: {
            'x-service-public-api-key': ctx.keys.admin.publishableKey,
            'x-forwarded-for': value,
          },
        });
        expect(result.status).toBe(400);
      }
    },
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: {
        'x-service-public-api-key': keys.admin.publishableKey,
        'x-forwarded-for': 'garbage-3',
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'zone ids on a forwarded address do not make new limit keys: 429',
    prepare: async (ctx) => {
      for (let i = 0; i < LIMITS.checkoutCreate; i++) {
        await ctx.gateway.send({
          method: 'POST',
          path: CHECKOUT,
          headers: {
            'x-service-public-api-key': ctx.keys.admin.publishableKey,
            'x-forwarded-for': `fe80::1%${i}`,
          },
        });
      }
    },
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: {
        'x-service-public-api-key': keys.admin.publishableKey,
        'x-forwarded-for': 'fe80::1%zz',
      },
    }),
    ...RATE_LIMITED,
    scope: 'checkout-create',
  },
];

describeHostileCases('limit keys behind a trusted proxy', rotating, {
  limits: LIMITS,
  trustProxy: ['127.0.0.1'],
  freshGateway: true,
});
