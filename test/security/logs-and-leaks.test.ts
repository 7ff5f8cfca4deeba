import { allSecrets } from '../helpers/fixtures';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { findLeaks } from '../helpers/logs';
import {
  auditEvents,
  bearer,
  type CaseContext,
  type CaseResult,
  describeHostileCases,
  type HostileCase,
  securityEvents,
  UNTHROTTLED,
} from './hostile-cases';

/**
 * What is logged: exactly one access line (`http.request`) per request, with the decision folded
 * in for every authentication or authorisation decision: outcome, reason, key id, account, client
 * IP, route, request id and an ISO UTC time; no decision for requests refused before any; credentials
 * in query strings refused and never logged; secrets pasted into paths redacted from the access log.
 */

const WALLETS = '/api/v1/wallets/';
const CHECKOUT = '/api/v1/checkout/';
const EXCHANGE = '/api/v1/auth/generate-token/';
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const EXPIRED_AGO_SECONDS = 3600;

/** Asserts one audit event for the request, with these fields, at an ISO UTC time close to now. */
const audited =
  (expected: Record<string, unknown>, absent: readonly string[] = []): HostileCase['then'] =>
  (result: CaseResult, ctx: CaseContext) => {
    const requestId = String(result.headers['x-request-id']);
    const events = auditEvents(ctx.gateway, requestId);
    expect(events).toHaveLength(1);
    const event = events[0] ?? {};
    expect(event).toMatchObject({
      event: 'http.request',
      request_id: requestId,
      client_ip: '127.0.0.1',
      ...expected,
    });
    for (const field of absent) expect(event).not.toHaveProperty(field);
    expect(String(event.time)).toMatch(ISO_UTC);
    expect(Math.abs(Date.parse(String(event.time)) - Date.now())).toBeLessThan(60_000);
  };

const notAudited: HostileCase['then'] = (result, ctx) => {
  expect(auditEvents(ctx.gateway, String(result.headers['x-request-id']))).toEqual([]);
};

const UNAUTHENTICATED = ['key_id', 'account_id'] as const;

const decisions: HostileCase[] = [
  {
    name: 'a secret key allowed on wallets: one "allowed" event naming key, account, role and route',
    request: ({ keys }) => ({ path: WALLETS, headers: bearer(keys.admin.secretKey) }),
    status: 200,
    code: null,
    upstream: true,
    then: audited({
      outcome: 'allowed',
      key_id: 'key_admin',
      account_id: 'acct_open',
      credential: 'secret',
      role: 'administrator',
      route: 'GET /api/v1/wallets/',
    }),
  },
  {
    name: 'a token allowed: one event with credential "token"',
    request: (ctx) => ({
      path: '/api/v1/transactions/txn_1/',
      headers: bearer(ctx.token(ctx.keys.level1)),
    }),
    status: 200,
    code: null,
    upstream: true,
    then: audited({
      outcome: 'allowed',
      key_id: 'key_l1',
      credential: 'token',
      role: 'level-1',
      route: 'GET /api/v1/transactions/:id/',
    }),
  },
  {
    name: 'a token exchange allowed: one event on the exchange route',
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.level2.publishableKey, api_secret: keys.level2.secretKey },
    }),
    status: 200,
    code: null,
    upstream: false,
    answerHoldsToken: true,
    then: audited({
      outcome: 'allowed',
      key_id: 'key_l2',
      account_id: 'acct_open',
      route: `POST ${EXCHANGE}`,
    }),
  },
  {
    name: 'a publishable key allowed on checkout: one event with credential "publishable"',
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: { 'x-service-public-api-key': keys.level3.publishableKey },
    }),
    status: 200,
    code: null,
    upstream: true,
    then: audited({
      outcome: 'allowed',
      key_id: 'key_l3',
      credential: 'publishable',
      route: `POST ${CHECKOUT}`,
    }),
  },
  {
    name: 'HEAD allowed: the event names the HEAD route',
    request: ({ keys }) => ({
      method: 'HEAD',
      path: WALLETS,
      headers: bearer(keys.admin.secretKey),
    }),
    status: 200,
    code: null,
    upstream: true,
    then: audited({ outcome: 'allowed', route: 'HEAD /api/v1/wallets/' }),
  },
  {
    name: 'missing credentials: one "refused" line with the reason and no key',
    request: () => ({ path: WALLETS }),
    status: 401,
    code: 'missing_credentials',
    upstream: false,
    then: audited(
      { outcome: 'refused', reason: 'missing_credentials', status: 401 },
      UNAUTHENTICATED,
    ),
  },
  {
    name: 'an unknown secret key: one "refused" line, invalid_api_key',
    request: () => ({ path: WALLETS, headers: bearer('sk_test_unknown_0123456789abcdef') }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
    then: audited({ outcome: 'refused', reason: 'invalid_api_key' }, UNAUTHENTICATED),
  },
  {
    name: 'an expired token: one "refused" line, expired_token',
    request: (ctx) => {
      const iat = Math.floor(Date.now() / 1000) - EXPIRED_AGO_SECONDS;
      return { path: WALLETS, headers: bearer(ctx.sign({ ...ctx.claims(), iat, exp: iat + 60 })) };
    },
    status: 401,
    code: 'expired_token',
    upstream: false,
    then: audited({ outcome: 'refused', reason: 'expired_token' }, UNAUTHENTICATED),
  },
  {
    name: 'a wrong key pair: one "refused" line on the exchange route',
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.admin.publishableKey, api_secret: keys.level1.secretKey },
    }),
    status: 401,
    code: 'invalid_credentials',
    upstream: false,
    then: audited(
      { outcome: 'refused', reason: 'invalid_credentials', route: `POST ${EXCHANGE}` },
      UNAUTHENTICATED,
    ),
  },
  {
    name: 'a publishable key on a secret-key route: one "refused" line, credential_not_allowed',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { 'x-service-public-api-key': keys.admin.publishableKey },
    }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
    then: audited({ outcome: 'refused', reason: 'credential_not_allowed' }),
  },
  {
    name: 'a role below the minimum: one "refused" line naming the key that asked',
    request: ({ keys }) => ({
      method: 'POST',
      path: '/api/v1/payouts/',
      headers: bearer(keys.level1.secretKey),
    }),
    status: 403,
    code: 'insufficient_role',
    upstream: false,
    then: audited({
      outcome: 'refused',
      reason: 'insufficient_role',
      status: 403,
      key_id: 'key_l1',
      account_id: 'acct_open',
    }),
  },
  {
    name: 'an address outside the whitelist: one "refused" line naming the key',
    request: ({ keys }) => ({ path: WALLETS, headers: bearer(keys.walled.secretKey) }),
    status: 403,
    code: 'ip_not_whitelisted',
    upstream: false,
    then: audited({
      outcome: 'refused',
      reason: 'ip_not_whitelisted',
      key_id: 'key_walled',
      account_id: 'acct_walled',
    }),
  },
  {
    name: 'a secret key from a browser: one "refused" line besides the leaked-key event',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { ...bearer(keys.admin.secretKey), origin: 'https://shop.example' },
    }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
    then: async (result, ctx) => {
      await audited({ outcome: 'refused', reason: 'credential_not_allowed' })?.(result, ctx);
      expect(securityEvents(ctx.gateway, String(result.headers['x-request-id']))).toHaveLength(1);
    },
  },
  {
    name: 'an unknown path: no decision, no audit event',
    request: () => ({ path: '/api/v2/wallets/' }),
    status: 404,
    code: 'not_found',
    upstream: false,
    then: notAudited,
  },
  {
    name: 'a wrong method: no decision, no audit event',
    request: () => ({ method: 'DELETE', path: WALLETS }),
    status: 405,
    code: 'method_not_allowed',
    upstream: false,
    then: notAudited,
  },
  {
    name: 'a wrong content type on the exchange: no decision, no audit event',
    request: () => ({
      method: 'POST',
      path: EXCHANGE,
      headers: { 'content-type': 'text/plain' },
      body: 'x',
    }),
    status: 415,
    code: 'unsupported_media_type',
    upstream: false,
    then: notAudited,
  },
];

const QUERY_REFUSED = { status: 400, code: 'invalid_request', upstream: false } as const;
const queryCredentials: HostileCase[] = [
  {
    name: '?api_key=<secret key> beside a valid Bearer key: 400, reported as leaked, the upstream never sees it',
    request: ({ keys }) => ({
      path: `${WALLETS}?api_key=${keys.admin.secretKey}`,
      headers: bearer(keys.admin.secretKey),
    }),
    ...QUERY_REFUSED,
    then: (result, ctx) => {
      expect(securityEvents(ctx.gateway, String(result.headers['x-request-id']))).toEqual([
        expect.objectContaining({
          event: 'security.leaked_secret_key',
          reason: 'sent_in_query_string',
          key_id: 'key_admin',
        }),
      ]);
    },
  },
  {
    name: '?api_key=<secret key> alone never authenticates: 400',
    request: ({ keys }) => ({ path: `${WALLETS}?api_key=${keys.admin.secretKey}` }),
    ...QUERY_REFUSED,
  },
  {
    name: '?access_token=<token>: 400',
    request: (ctx) => ({ path: `${WALLETS}?access_token=${ctx.token()}` }),
    ...QUERY_REFUSED,
  },
  {
    name: '?token=<token>: 400',
    request: (ctx) => ({ path: `/api/v1/transactions/?token=${ctx.token()}` }),
    ...QUERY_REFUSED,
  },
  {
    name: '?api_secret=…&api_key=… on the exchange: 400',
    request: ({ keys }) => ({
      method: 'POST',
      path: `${EXCHANGE}?api_key=${keys.admin.publishableKey}&api_secret=${keys.admin.secretKey}`,
    }),
    ...QUERY_REFUSED,
  },
  {
    name: '?public_key=<publishable key> on checkout: 400',
    request: ({ keys }) => ({
      method: 'POST',
      path: `${CHECKOUT}?public_key=${keys.admin.publishableKey}`,
    }),
    ...QUERY_REFUSED,
  },
  {
    name: '?API_KEY[]=… in another case and array form: 400',
    request: ({ keys }) => ({ path: `${WALLETS}?API_KEY[]=${keys.level1.secretKey}` }),
    ...QUERY_REFUSED,
  },
  {
    name: '?Access-Token=… with a hyphen: 400',
    request: (ctx) => ({ path: `${WALLETS}?Access-Token=${ctx.token()}` }),
    ...QUERY_REFUSED,
  },
  {
    name: 'a secret key under an innocent name (?ref=…): 400',
    request: ({ keys }) => ({
      path: `${WALLETS}?ref=${keys.level2.secretKey}`,
      headers: bearer(keys.level2.secretKey),
    }),
    ...QUERY_REFUSED,
  },
  {
    name: 'a credential hidden behind ";" (?page=1;secret=…): 400',
    request: ({ keys }) => ({ path: `${WALLETS}?page=1;secret=${keys.admin.secretKey}` }),
    ...QUERY_REFUSED,
  },
  {
    name: 'a percent-encoded parameter name (?api%5Fkey=…): 400',
    request: ({ keys }) => ({ path: `${WALLETS}?api%5Fkey=${keys.admin.secretKey}` }),
    ...QUERY_REFUSED,
  },
  {
    name: '?token= on the health check: 400',
    request: () => ({ path: '/healthz?token=abc' }),
    ...QUERY_REFUSED,
  },
  {
    name: 'an ordinary query string is forwarded unchanged',
    request: ({ keys }) => ({
      path: `${WALLETS}?page=2&currency=EUR`,
      headers: bearer(keys.admin.secretKey),
    }),
    status: 200,
    code: null,
    upstream: true,
    then: (_result, ctx) => {
      expect(ctx.gateway.upstream.requests.at(-1)?.url).toBe(`${WALLETS}?page=2&currency=EUR`);
    },
  },
];

describeHostileCases('audit events, one per decision', decisions, UNTHROTTLED);
describeHostileCases('credentials in the query string', queryCredentials, UNTHROTTLED);

const LIMITS = { authFailures: 1, authenticated: 1 } as const;
const throttled: HostileCase[] = [
  {
    name: 'a 429 from the account limit: one "refused" line, rate_limited, naming the key',
    prepare: async (ctx) => {
      await ctx.gateway.send({
        path: '/api/v1/transactions/',
        headers: bearer(ctx.keys.level1.secretKey),
      });
    },
    request: ({ keys }) => ({
      path: '/api/v1/transactions/',
      headers: bearer(keys.level1.secretKey),
    }),
    status: 429,
    code: 'rate_limited',
    upstream: false,
    then: audited({ outcome: 'limited', reason: 'rate_limited', status: 429, key_id: 'key_l1' }),
  },
  {
    name: 'a 429 from the failed-authentication limit: one "refused" line, rate_limited',
    prepare: async (ctx) => {
      await ctx.gateway.send({ path: WALLETS, headers: bearer('sk_test_guess_0123456789abcdef') });
    },
    request: () => ({ path: WALLETS, headers: bearer('sk_test_guess_0123456789abcdef') }),
    status: 429,
    code: 'rate_limited',
    upstream: false,
    then: audited({ outcome: 'limited', reason: 'rate_limited' }, UNAUTHENTICATED),
  },
  {
    name: 'a 429 on the token exchange: one "refused" line on the exchange route',
    prepare: async (ctx) => {
      await ctx.gateway.send({
        method: 'POST',
        path: EXCHANGE,
        body: { api_key: ctx.keys.admin.publishableKey, api_secret: ctx.keys.admin.secretKey },
      });
    },
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.admin.publishableKey, api_secret: keys.admin.secretKey },
    }),
    status: 429,
    code: 'rate_limited',
    upstream: false,
    then: audited({
      outcome: 'limited',
      reason: 'rate_limited',
      route: `POST ${EXCHANGE}`,
      key_id: 'key_admin',
    }),
  },
];

describeHostileCases('audit events for 429s', throttled, { limits: LIMITS, freshGateway: true });

describe('the access log', () => {
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await startTestGateway(UNTHROTTLED);
    gateway.upstream.respond = (_request, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    };
  });
  afterAll(async () => {
    await gateway.close();
  });

  const accessLogPath = (requestId: string): unknown =>
    gateway.logs
      .entries()
      .find((entry) => entry.event === 'http.request' && entry.request_id === requestId)?.path;

  it.each([
    ['a secret key', (keys: TestGateway['fixtures']['keys']) => keys.admin.secretKey],
    [
      'a percent-encoded secret key',
      (keys: TestGateway['fixtures']['keys']) => keys.admin.secretKey.replaceAll('_', '%5F'),
    ],
  ])('redacts %s pasted into a path segment', async (_name, segment) => {
    const { keys } = gateway.fixtures;
    const result = await gateway.send({
      path: `/api/v1/transactions/${segment(keys)}/`,
      headers: bearer(keys.admin.secretKey),
    });
    expect(result.status).toBe(200);
    expect(accessLogPath(String(result.headers['x-request-id']))).toBe(
      '/api/v1/transactions/[redacted]/',
    );
    expect(findLeaks(gateway.logs.lines.join('\n'), allSecrets(gateway.fixtures))).toEqual([]);
  });

  it('redacts a token pasted into a path segment of an unknown route', async () => {
    const token = gateway.tokens.issue({
      id: 'key_admin',
      accountId: 'acct_open',
      role: 'administrator',
    }).token;
    const result = await gateway.send({ path: `/api/v1/tokens/${token}/revoke` });
    expect(result.status).toBe(404);
    expect(accessLogPath(String(result.headers['x-request-id']))).toBe(
      '/api/v1/tokens/[redacted]/revoke',
    );
    expect(gateway.logs.lines.join('\n')).not.toContain(token);
  });

  it('keeps ordinary ids readable', async () => {
    const result = await gateway.send({
      path: '/api/v1/transactions/txn_risk_score_42/',
      headers: bearer(gateway.fixtures.keys.admin.secretKey),
    });
    expect(accessLogPath(String(result.headers['x-request-id']))).toBe(
      '/api/v1/transactions/txn_risk_score_42/',
    );
  });

  it('never logs the query string', async () => {
    const result = await gateway.send({
      path: `${WALLETS}?page=secret-page-marker`,
      headers: bearer(gateway.fixtures.keys.admin.secretKey),
    });
    expect(result.status).toBe(200);
    expect(gateway.logs.lines.join('\n')).not.toContain('secret-page-marker');
  });

  it('ignores a client-sent X-Request-Id: the gateway makes its own and sends it upstream', async () => {
    const result = await gateway.send({
      path: WALLETS,
      headers: {
        ...bearer(gateway.fixtures.keys.admin.secretKey),
        'x-request-id': 'forged-request-id',
      },
    });
    const requestId = String(result.headers['x-request-id']);
    expect(requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(gateway.upstream.requests.at(-1)?.headers['x-request-id']).toBe(requestId);
    expect(gateway.logs.lines.join('\n')).not.toContain('forged-request-id');
  });

  it('writes every line with an ISO UTC time', () => {
    const times = gateway.logs.entries().map((entry) => entry.time);
    expect(times.length).toBeGreaterThan(0);
    for (const time of times) expect(String(time)).toMatch(ISO_UTC);
  });
});
