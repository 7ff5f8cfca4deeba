import { loadConfig } from '../../gateway/config';
import { createGate } from '../../lib/core/gate';
import { ConfigurationError } from '../../lib/errors';
import { createFixtures } from '../helpers/fixtures';
import { bearer, type SendResult, startTestGateway, type TestGateway } from '../helpers/gateway';

/**
 * Shadow mode: a limit scope or an account's IP whitelist set in shadow is decided,
 * logged and counted as `would_refuse`, and the request passes. Credentials and roles are never in
 * shadow: an unauthenticated or under-privileged request is refused whatever is configured.
 */

const CHECKOUT = '/api/v1/checkout/';
const WALLETS = '/api/v1/wallets/';

async function decisions(gateway: TestGateway, route: string, outcome: string, code: string) {
  const text = await gateway.app.metrics.text();
  const line = text
    .split('\n')
    .find(
      (entry) =>
        entry.startsWith('tollgate_decisions_total{') &&
        entry.includes(`route="${route}"`) &&
        entry.includes(`outcome="${outcome}"`) &&
        entry.includes(`code="${code}"`),
    );
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('a limit scope in shadow mode', () => {
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({
      shadow: { scopes: ['checkout-create'], ipWhitelistAccounts: [] },
    });
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('lets the 31st checkout through, and logs and counts it as would_refuse', async () => {
    const request = {
      method: 'POST',
      path: CHECKOUT,
      headers: { 'x-service-public-api-key': gateway.fixtures.keys.level2.publishableKey },
      body: { amount: 10 },
      from: '127.0.0.4',
    };
    const results: SendResult[] = [];
    for (let i = 0; i < 31; i++) results.push(await gateway.send(request));
    expect(results.map((result) => result.status)).toEqual(Array.from({ length: 31 }, () => 200));
    expect(gateway.upstream.requests).toHaveLength(31);
    // The scope is not enforced: its quota is not advertised.
    for (const result of results) expect(result.headers.ratelimit).toBeUndefined();

    const lines = results.map((result) =>
      gateway.logs
        .entries()
        .find(
          (entry) =>
            entry.event === 'http.request' && entry.request_id === result.headers['x-request-id'],
        ),
    );
    expect(lines.slice(0, 30).map((line) => line?.outcome)).toEqual(
      Array.from({ length: 30 }, () => 'allowed'),
    );
    expect(lines[30]).toMatchObject({
      level: 'info',
      status: 200,
      outcome: 'would_refuse',
      reason: 'rate_limited',
      shadow: [{ rule: 'limit', scope: 'checkout-create', code: 'rate_limited' }],
    });
    expect(await decisions(gateway, CHECKOUT, 'would_refuse', 'rate_limited')).toBe(1);
    expect(await decisions(gateway, CHECKOUT, 'allowed', 'none')).toBe(30);
    expect(await decisions(gateway, CHECKOUT, 'limited', 'rate_limited')).toBe(0);
  });

  it('still enforces the scopes that are not in shadow', async () => {
    const { keys } = gateway.fixtures;
    const request = {
      path: '/api/v1/checkout/chk_1/',
      headers: { 'x-service-public-api-key': keys.level2.publishableKey },
      from: '127.0.0.5',
    };
    const statuses = [];
    for (let i = 0; i < 46; i++) statuses.push((await gateway.send(request)).status);
    expect(statuses.slice(0, 45).every((status) => status === 200)).toBe(true);
    expect(statuses[45]).toBe(429);
  });
});

describe("an account's IP whitelist in shadow mode", () => {
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({
      shadow: { scopes: [], ipWhitelistAccounts: ['acct_walled'] },
    });
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('lets a request from outside the whitelist through, logs and counts it, and spends no failure budget', async () => {
    const { keys } = gateway.fixtures;
    const results: SendResult[] = [];
    // More than the failed-authentication budget (20): none is counted as a failure.
    for (let i = 0; i < 25; i++) {
      results.push(await gateway.send({ path: WALLETS, headers: bearer(keys.walled.secretKey) }));
    }
    expect(results.map((result) => result.status)).toEqual(Array.from({ length: 25 }, () => 200));
    const line = gateway.logs
      .entries()
      .find(
        (entry) =>
          entry.event === 'http.request' &&
          entry.request_id === results[0]?.headers['x-request-id'],
      );
    expect(line).toMatchObject({
      outcome: 'would_refuse',
      reason: 'ip_not_whitelisted',
      account_id: 'acct_walled',
      key_id: 'key_walled',
      shadow: [{ rule: 'ip_whitelist', code: 'ip_not_whitelisted' }],
    });
    expect(await decisions(gateway, WALLETS, 'would_refuse', 'ip_not_whitelisted')).toBe(25);
  });
});

describe('what is never in shadow mode', () => {
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({
      shadow: {
        scopes: [
          'payments',
          'authenticated',
          'checkout-create',
          'checkout-read',
          'payments-publishable',
        ],
        ipWhitelistAccounts: ['acct_open', 'acct_walled'],
      },
    });
  });
  afterAll(async () => {
    await gateway.close();
  });

  it.each([
    ['no credentials', {}, 401, 'missing_credentials'],
    ['an unknown secret key', bearer('sk_test_not-a-key-0123456789abcdef'), 401, 'invalid_api_key'],
  ] as const)('%s is refused', async (_name, headers, status, code) => {
    const result = await gateway.send({ path: WALLETS, headers });
    expect(result.status).toBe(status);
    expect(result.body?.code).toBe(code);
    expect(gateway.upstream.requests).toHaveLength(0);
  });

  it('a role below the minimum is refused', async () => {
    const result = await gateway.send({
      method: 'POST',
      path: '/api/v1/payouts/',
      headers: bearer(gateway.fixtures.keys.level1.secretKey),
      body: { amount: 5 },
    });
    expect(result.status).toBe(403);
    expect(result.body?.code).toBe('insufficient_role');
    expect(gateway.upstream.requests).toHaveLength(0);
  });

  it('the configuration takes only limit scopes and account ids', () => {
    expect(() => loadConfig({ TOLLGATE_SHADOW_SCOPES: 'auth-failures' })).toThrow(
      /^TOLLGATE_SHADOW_SCOPES entry "auth-failures" is not a limit scope/,
    );
    expect(() => loadConfig({ TOLLGATE_SHADOW_SCOPES: 'payments,payments' })).toThrow(
      ConfigurationError,
    );
    expect(() => loadConfig({ TOLLGATE_SHADOW_IP_WHITELISTS: 'acct a' })).toThrow(
      /^TOLLGATE_SHADOW_IP_WHITELISTS entry "acct a" is not an account id$/,
    );
    expect(
      loadConfig({
        TOLLGATE_SHADOW_SCOPES: 'checkout-create, payments',
        TOLLGATE_SHADOW_IP_WHITELISTS: 'acct_a',
      }).shadow,
    ).toEqual({ scopes: ['checkout-create', 'payments'], ipWhitelistAccounts: ['acct_a'] });
    expect(() =>
      createGate({
        keyStore: createFixtures().ring,
        scopes: { orders: { limit: 5 } },
        shadow: { scopes: ['order'] },
      }),
    ).toThrow(/shadow\.scopes: unknown scope "order"; declared: orders/);
  });
});
