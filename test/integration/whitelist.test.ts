import type { LimitsConfig } from '../../gateway/config';
import { DEFAULT_LIMITS } from '../../gateway/config';
import { expectErrorBody } from '../helpers/error-body';
import { allSecrets } from '../helpers/fixtures';
import { bearer, type SendOptions, startTestGateway, type TestGateway } from '../helpers/gateway';
import { findLeaks } from '../helpers/logs';
import { exchange, exchangeToken } from '../helpers/routes';

/**
 * Accounts' IP whitelists (secret keys, tokens, the token exchange; IPv4-mapped addresses) over
 * real source addresses: acct_walled allows 127.0.0.2, 127.0.10.0/24 and 2001:db8::/32.
 * Publishable keys are not restricted.
 */

const DENIED = {
  status: 403,
  code: 'ip_not_whitelisted',
  message: 'Access denied: IP not whitelisted.',
} as const;
const PK_HEADER = 'X-Service-Public-API-Key';
/** Whitelist refusals count as failed authentications; that limit is tested in limits.test.ts. */
const LIMITS: LimitsConfig = { ...DEFAULT_LIMITS, authFailures: 10_000 };

const ALLOWED_ADDRESSES = ['127.0.0.2', '127.0.10.7', '127.0.10.254'] as const;
const REFUSED_ADDRESSES = ['127.0.0.1', '127.0.0.3', '127.0.11.7'] as const;

function expectAccessLogIp(gateway: TestGateway, requestId: unknown, clientIp: string): void {
  const line = gateway.logs
    .entries()
    .find((entry) => entry.event === 'http.request' && entry.request_id === requestId);
  expect(line?.client_ip).toBe(clientIp);
}

describe('IP whitelist on a loopback IPv4 gateway', () => {
  let gateway: TestGateway;
  const tokens: string[] = [];

  beforeAll(async () => {
    gateway = await startTestGateway({ limits: LIMITS });
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    expect(
      findLeaks(gateway.logs.lines.join('\n'), [...allSecrets(gateway.fixtures), ...tokens]),
    ).toEqual([]);
  });

  const walled = () => gateway.fixtures.keys.walled;
  const wallets = (from: string, headers: Record<string, string>): SendOptions => ({
    path: '/api/v1/wallets/',
    headers,
    from,
  });

  it.each(ALLOWED_ADDRESSES.map((address) => [address]))(
    'a secret-key request from %s is allowed',
    async (address) => {
      const result = await gateway.send(wallets(address, bearer(walled().secretKey)));
      expect(result.status).toBe(200);
      expect(gateway.upstream.requests.at(-1)?.headers['x-gateway-account-id']).toBe('acct_walled');
      expectAccessLogIp(gateway, result.headers['x-request-id'], address);
    },
  );

  it.each(REFUSED_ADDRESSES.map((address) => [address]))(
    'a secret-key request from %s answers 403 and never reaches the upstream',
    async (address) => {
      const before = gateway.upstream.requests.length;
      expectErrorBody(await gateway.send(wallets(address, bearer(walled().secretKey))), DENIED);
      expectErrorBody(
        await gateway.send({
          method: 'POST',
          path: '/api/v1/payment/status/',
          headers: bearer(walled().secretKey),
          body: { invoice_id: 'inv_1' },
          from: address,
        }),
        DENIED,
      );
      expect(gateway.upstream.requests.length).toBe(before);
    },
  );

  it('applies to the token exchange, which carries the secret key', async () => {
    expect((await exchange(gateway, walled(), '127.0.0.2')).status).toBe(200);
    expect((await exchange(gateway, walled(), '127.0.10.7')).status).toBe(200);
    expectErrorBody(await exchange(gateway, walled(), '127.0.0.1'), DENIED);
  });

  it('applies to every request made with a token: minted from an allowed address, refused from another', async () => {
    const token = await exchangeToken(gateway, walled(), '127.0.0.2');
    tokens.push(token);
    const before = gateway.upstream.requests.length;
    expectErrorBody(await gateway.send(wallets('127.0.0.1', bearer(token))), DENIED);
    expect(gateway.upstream.requests.length).toBe(before);
    const allowed = await gateway.send(wallets('127.0.10.7', bearer(token)));
    expect(allowed.status).toBe(200);
    expect(gateway.upstream.requests.at(-1)?.headers['x-gateway-credential']).toBe('token');
  });

  it('does not apply to publishable keys (checkout and payment status from a browser anywhere)', async () => {
    const headers = { [PK_HEADER]: walled().publishableKey };
    expect(
      (
        await gateway.send({
          method: 'POST',
          path: '/api/v1/checkout/',
          headers,
          body: { amount: 5 },
          from: '127.0.0.1',
        })
      ).status,
    ).toBe(200);
    expect(
      (await gateway.send({ path: '/api/v1/checkout/chk_1/', headers, from: '127.0.0.3' })).status,
    ).toBe(200);
    const status = await gateway.send({
      method: 'POST',
      path: '/api/v1/payment/status/',
      headers,
      body: { invoice_id: 'inv_1' },
      from: '127.0.0.1',
    });
    expect(status.status).toBe(200);
    expect(gateway.upstream.requests.at(-1)?.headers['x-gateway-credential']).toBe('publishable');
    const inBody = await gateway.send({
      method: 'POST',
      path: '/api/v1/payment/status/',
      body: { public_key: walled().publishableKey, invoice_id: 'inv_1' },
      from: '127.0.0.1',
    });
    expect(inBody.status).toBe(200);
  });

  it('an account without a whitelist is not restricted', async () => {
    for (const address of [...ALLOWED_ADDRESSES, ...REFUSED_ADDRESSES]) {
      expect(
        (await gateway.send(wallets(address, bearer(gateway.fixtures.keys.admin.secretKey))))
          .status,
      ).toBe(200);
    }
  });

  describe('with no proxy trusted, forwarding headers are ignored', () => {
    it.each([
      ['X-Forwarded-For', { 'X-Forwarded-For': '127.0.0.2' }],
      ['X-Forwarded-For (IPv6 in the whitelist)', { 'X-Forwarded-For': '2001:db8::5' }],
      ['X-Forwarded-For with several hops', { 'X-Forwarded-For': '127.0.0.2, 127.0.10.7' }],
      ['X-Real-IP', { 'X-Real-IP': '127.0.0.2' }],
      ['Forwarded', { Forwarded: 'for=127.0.0.2;proto=https' }],
      ['Forwarded (IPv6)', { Forwarded: 'for="[2001:db8::5]"' }],
      [
        'all of them',
        {
          'X-Forwarded-For': '127.0.0.2',
          'X-Real-IP': '127.0.0.2',
          Forwarded: 'for=127.0.0.2',
          'X-Client-IP': '127.0.0.2',
        },
      ],
    ])('a spoofed %s from 127.0.0.1 still answers 403', async (_name, spoofed) => {
      const before = gateway.upstream.requests.length;
      const result = await gateway.send(
        wallets('127.0.0.1', { ...bearer(walled().secretKey), ...spoofed }),
      );
      expectErrorBody(result, DENIED);
      expectAccessLogIp(gateway, result.headers['x-request-id'], '127.0.0.1');
      expect(gateway.upstream.requests.length).toBe(before);
    });
  });
});

describe('IP whitelist on a dual-stack gateway (host "::")', () => {
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({ host: '::', limits: LIMITS });
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    expect(findLeaks(gateway.logs.lines.join('\n'), allSecrets(gateway.fixtures))).toEqual([]);
  });

  it('an IPv4 client seen as ::ffff:127.0.0.2 matches the IPv4 entry', async () => {
    const result = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(gateway.fixtures.keys.walled.secretKey),
      from: '127.0.0.2',
    });
    expect(result.status).toBe(200);
    expectAccessLogIp(gateway, result.headers['x-request-id'], '127.0.0.2');
  });

  it('an IPv4 client seen as ::ffff:127.0.10.9 matches the IPv4 CIDR entry', async () => {
    const result = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(gateway.fixtures.keys.walled.secretKey),
      from: '127.0.10.9',
    });
    expect(result.status).toBe(200);
  });

  it('an IPv4 client seen as ::ffff:127.0.0.1 is refused', async () => {
    const result = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(gateway.fixtures.keys.walled.secretKey),
      from: '127.0.0.1',
    });
    expectErrorBody(result, DENIED);
  });

  it('an IPv6 client ::1 is refused by a whitelist without it, and allowed for an account without a whitelist', async () => {
    const refused = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(gateway.fixtures.keys.walled.secretKey),
      from: '::1',
    });
    expectErrorBody(refused, DENIED);
    expectAccessLogIp(gateway, refused.headers['x-request-id'], '::1');
    const open = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(gateway.fixtures.keys.admin.secretKey),
      from: '::1',
    });
    expect(open.status).toBe(200);
  });
});

describe('IP whitelist behind a trusted proxy (trustProxy: loopback)', () => {
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({
      trustProxy: ['loopback'],
      limits: { ...LIMITS, checkoutCreate: 2 },
    });
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    expect(findLeaks(gateway.logs.lines.join('\n'), allSecrets(gateway.fixtures))).toEqual([]);
  });

  const walledWallets = (forwardedFor: string): SendOptions => ({
    path: '/api/v1/wallets/',
    headers: { ...bearer(gateway.fixtures.keys.walled.secretKey), 'X-Forwarded-For': forwardedFor },
    from: '127.0.0.1',
  });

  it.each([
    ['2001:db8::5', '2001:db8::5'],
    ['127.0.0.2', '127.0.0.2'],
    ['203.0.113.9, 2001:db8::5', '2001:db8::5'],
  ])('X-Forwarded-For: %s from loopback is allowed (client %s)', async (forwardedFor, clientIp) => {
    const result = await gateway.send(walledWallets(forwardedFor));
    expect(result.status).toBe(200);
    expectAccessLogIp(gateway, result.headers['x-request-id'], clientIp);
  });

  it.each([
    ['203.0.113.9', '203.0.113.9'],
    ['2001:db8::5, 203.0.113.9', '203.0.113.9'],
    ['2001:db9::1', '2001:db9::1'],
  ])(
    'X-Forwarded-For: %s from loopback is refused (client %s, the right-most untrusted address)',
    async (forwardedFor, clientIp) => {
      const result = await gateway.send(walledWallets(forwardedFor));
      expectErrorBody(result, DENIED);
      expectAccessLogIp(gateway, result.headers['x-request-id'], clientIp);
    },
  );

  it('X-Real-IP and Forwarded are still ignored', async () => {
    const result = await gateway.send({
      path: '/api/v1/wallets/',
      headers: {
        ...bearer(gateway.fixtures.keys.walled.secretKey),
        'X-Real-IP': '127.0.0.2',
        Forwarded: 'for=127.0.0.2',
      },
      from: '127.0.0.1',
    });
    expectErrorBody(result, DENIED);
  });

  it.each([['garbage'], ['1.2.3.4:80'], ['167772161'], ['010.0.0.1'], ['127.0.0.2 garbage']])(
    'a forwarded value that is not an IP address (%s) answers 400 and passes nothing',
    async (value) => {
      const before = gateway.upstream.requests.length;
      const result = await gateway.send(walledWallets(value));
      expectErrorBody(result, { status: 400, code: 'invalid_request' });
      expect(gateway.upstream.requests.length).toBe(before);
    },
  );

  it('garbage forwarded values never become rate-limit keys: rotating them admits nothing', async () => {
    const checkout = (forwardedFor: string): SendOptions => ({
      method: 'POST',
      path: '/api/v1/checkout/',
      headers: {
        [PK_HEADER]: gateway.fixtures.keys.level1.publishableKey,
        'X-Forwarded-For': forwardedFor,
      },
      body: { amount: 1 },
      from: '127.0.0.1',
    });
    const before = gateway.upstream.requests.length;
    for (let i = 0; i < 6; i++) {
      const result = await gateway.send(checkout(`garbage-${i}`));
      expectErrorBody(result, { status: 400, code: 'invalid_request' });
      expect(result.headers.ratelimit).toBeUndefined();
    }
    expect(gateway.upstream.requests.length).toBe(before);
    const accessLines = gateway.logs.entries().filter((entry) => entry.event === 'http.request');
    expect(
      accessLines.some(
        (entry) => typeof entry.client_ip === 'string' && entry.client_ip.startsWith('garbage'),
      ),
    ).toBe(false);
    // A real forwarded address is counted: the limit of 2 holds for it.
    expect((await gateway.send(checkout('198.51.100.7'))).status).toBe(200);
    expect((await gateway.send(checkout('198.51.100.7'))).status).toBe(200);
    expect((await gateway.send(checkout('198.51.100.7'))).status).toBe(429);
  });
});
