import { ROUTES, type RouteSpec } from '../../gateway/routes';
import { allowedMethods, expectErrorBody } from '../helpers/error-body';
import type { TestKey } from '../helpers/fixtures';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import { type HttpResult, httpRequest } from '../helpers/process';
import {
  describeWithProxy,
  type RealProxy,
  type RunningProxy,
  startProxy,
} from '../helpers/proxies';

/**
 * nginx and Caddy, run for real from the files in `deploy/`, in front of the sample gateway (asked
 * through its forward-auth endpoints) and a recording payments upstream. Every route of the sample
 * gateway, each credential kind, roles, the whitelist and a spent limit, as a client of the proxy
 * sees them; the upstream must receive exactly the allowed requests, with the gateway's identity
 * headers and without the client's credentials or forged identity.
 */

const PUBLIC_KEY_HEADER = 'x-service-public-api-key';
const PROXIES: readonly RealProxy[] = ['nginx', 'caddy'];

function concrete(path: string): string {
  return path.replace(':id', 'id_42');
}

function acceptsSecret(route: RouteSpec): boolean {
  return route.accept !== 'key-pair' && route.accept.includes('secret');
}

for (const proxy of PROXIES) {
  describeWithProxy(proxy)(`${proxy} from deploy/ in front of the gateway`, () => {
    let gateway: TestGateway;
    let running: RunningProxy;

    const send = (request: {
      method?: string;
      path: string;
      headers?: Record<string, string>;
      json?: unknown;
      from?: string;
    }): Promise<HttpResult> => httpRequest({ port: running.port, ...request });

    beforeAll(async () => {
      gateway = await startTestGateway({ trustProxy: ['127.0.0.1'] });
      running = await startProxy(proxy, {
        gateway: `127.0.0.1:${gateway.port}`,
        payments: new URL(gateway.upstream.url).host,
      });
    });
    afterAll(async () => {
      await running.stop();
      await gateway.close();
    });
    beforeEach(() => {
      gateway.upstream.reset();
    });

    const expectForwarded = (
      answer: HttpResult,
      expected: { method: string; url: string; key: TestKey; credential: string; body?: string },
    ): void => {
      expect({ status: answer.status, text: answer.text }).toEqual({
        status: 200,
        text: JSON.stringify({ ok: true, method: expected.method, path: expected.url }),
      });
      expect(gateway.upstream.requests).toHaveLength(1);
      const [received] = gateway.upstream.requests;
      expect(received?.method).toBe(expected.method);
      expect(received?.url).toBe(expected.url);
      expect(received?.headers['x-gateway-account-id']).toBe(expected.key.accountId);
      expect(received?.headers['x-gateway-key-id']).toBe(expected.key.id);
      expect(received?.headers['x-gateway-role']).toBe(expected.key.role);
      expect(received?.headers['x-gateway-credential']).toBe(expected.credential);
      expect(received?.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
      expect(received?.headers.authorization).toBeUndefined();
      expect(received?.headers[PUBLIC_KEY_HEADER]).toBeUndefined();
      expect(received?.body.toString('utf8')).toBe(expected.body ?? '');
    };

    it.each(
      ROUTES.filter((route) => route.accept !== 'key-pair').map(
        (route) => [`${route.method} ${route.path}`, route] as const,
      ),
    )('forwards %s, allowed, with the identity and without the credential', async (_n, route) => {
      const key = gateway.fixtures.keys.admin;
      const url = `${concrete(route.path)}?page=2&sort=desc`;
      const body = route.method === 'POST' ? '{"invoice_id":"inv_1","amount":10.5}' : undefined;
      const answer = await send({
        method: route.method,
        path: url,
        headers: {
          ...(acceptsSecret(route)
            ? bearer(key.secretKey)
            : { [PUBLIC_KEY_HEADER]: key.publishableKey }),
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          // A client's forged identity never reaches the upstream.
          'x-gateway-role': 'forged',
          'x-gateway-account-id': 'acct_forged',
        },
        ...(body === undefined ? {} : { json: JSON.parse(body) as unknown }),
      });
      expectForwarded(answer, {
        method: route.method,
        url,
        key,
        credential: acceptsSecret(route) ? 'secret' : 'publishable',
        ...(body === undefined ? {} : { body }),
      });
    });

    it('serves the token exchange itself, and forwards a request made with the token', async () => {
      const key = gateway.fixtures.keys.level3;
      const exchanged = await send({
        method: 'POST',
        path: '/api/v1/auth/generate-token/',
        json: { api_key: key.publishableKey, api_secret: key.secretKey },
      });
      expect(exchanged.status).toBe(200);
      expect(gateway.upstream.requests).toEqual([]);
      const token = String(exchanged.body?.token);
      const answer = await send({
        method: 'POST',
        path: '/api/v1/otp/confirm/',
        headers: { ...bearer(token), 'content-type': 'application/json' },
        json: { otp: '123456' },
      });
      expectForwarded(answer, {
        method: 'POST',
        url: '/api/v1/otp/confirm/',
        key,
        credential: 'token',
        body: '{"otp":"123456"}',
      });
    });

    it('answers 401 with WWW-Authenticate and the JSON body, forwarding nothing', async () => {
      const missing = await send({ path: '/api/v1/wallets/' });
      expectErrorBody(missing, {
        status: 401,
        code: 'missing_credentials',
        message: 'Authentication required',
      });
      expect(missing.headers['www-authenticate']).toBe('Bearer');
      const wrong = await send({
        path: '/api/v1/wallets/',
        headers: bearer(`${gateway.fixtures.keys.admin.secretKey}x`),
      });
      expectErrorBody(wrong, { status: 401, code: 'invalid_api_key', message: 'Invalid API key' });
      expect(gateway.upstream.requests).toEqual([]);
    });

    it('answers 403 for a role too low and for an address off the whitelist', async () => {
      const low = await send({
        method: 'POST',
        path: '/api/v1/payouts/',
        headers: bearer(gateway.fixtures.keys.level1.secretKey),
      });
      expectErrorBody(low, { status: 403, code: 'insufficient_role' });
      const walled = gateway.fixtures.keys.walled;
      const outside = await send({
        path: '/api/v1/wallets/',
        headers: bearer(walled.secretKey),
        from: '127.0.0.3',
      });
      expectErrorBody(outside, {
        status: 403,
        code: 'ip_not_whitelisted',
        message: 'Access denied: IP not whitelisted.',
      });
      expect(gateway.upstream.requests).toEqual([]);
      const inside = await send({
        path: '/api/v1/wallets/',
        headers: bearer(walled.secretKey),
        from: '127.0.0.2',
      });
      expectForwarded(inside, {
        method: 'GET',
        url: '/api/v1/wallets/',
        key: walled,
        credential: 'secret',
      });
    });

    it('answers 404 for no route and 405 with Allow for another method', async () => {
      const headers = bearer(gateway.fixtures.keys.admin.secretKey);
      expectErrorBody(await send({ path: '/api/v1/nowhere/', headers }), {
        status: 404,
        code: 'not_found',
      });
      const wrongMethod = await send({ method: 'DELETE', path: '/api/v1/wallets/', headers });
      expectErrorBody(wrongMethod, { status: 405, code: 'method_not_allowed' });
      expect(allowedMethods(wrongMethod.headers)).toEqual(['GET', 'HEAD']);
      expect(gateway.upstream.requests).toEqual([]);
    });

    it('answers 400 for credentials in the query string', async () => {
      const key = gateway.fixtures.keys.admin;
      const answer = await send({
        path: `/api/v1/wallets/?api_key=${key.secretKey}`,
        headers: bearer(key.secretKey),
      });
      expectErrorBody(answer, { status: 400, code: 'invalid_request' });
      expect(gateway.upstream.requests).toEqual([]);
    });

    it('answers 429 with Retry-After and the JSON body once a limit is spent', async () => {
      const key = gateway.fixtures.keys.admin;
      const from = proxy === 'nginx' ? '127.0.61.1' : '127.0.62.1';
      const checkout = {
        method: 'POST',
        path: '/api/v1/checkout/',
        headers: { [PUBLIC_KEY_HEADER]: key.publishableKey },
        from,
      };
      for (let request = 0; request < 30; request++) {
        expect((await send(checkout)).status).toBe(200);
      }
      expect(gateway.upstream.requests).toHaveLength(30);
      const limited = await send(checkout);
      expectErrorBody(limited, { status: 429, code: 'rate_limited', message: 'Too many requests' });
      const retryAfter = Number(limited.headers['retry-after']);
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
      expect(limited.headers.ratelimit).toMatch(/^"checkout-create"; r=0; t=\d+$/);
      expect(gateway.upstream.requests).toHaveLength(30);
    });

    it('forwards a payout with an Idempotency-Key once; its retry answers 409 with the JSON body', async () => {
      const key = gateway.fixtures.keys.level2;
      const idempotencyKey = `payout-${proxy}-${String(Date.now())}`;
      const payout = {
        method: 'POST',
        path: '/api/v1/payouts/',
        headers: { ...bearer(key.secretKey), 'idempotency-key': idempotencyKey },
        json: { amount: 125, currency: 'EUR' },
      };
      const first = await send(payout);
      expectForwarded(first, {
        method: 'POST',
        url: '/api/v1/payouts/',
        key,
        credential: 'secret',
        body: '{"amount":125,"currency":"EUR"}',
      });
      // The header reaches the payments service as the client sent it.
      expect(gateway.upstream.requests[0]?.headers['idempotency-key']).toBe(idempotencyKey);

      for (let retry = 0; retry < 2; retry++) {
        const again = await send(payout);
        const body = expectErrorBody(again, { status: 409, code: 'idempotency_key_in_use' });
        expect(body.request_id).toBe(again.headers['x-request-id']);
        expect(again.headers['cache-control']).toBe('no-store');
        expect(again.headers['x-gateway-account-id']).toBeUndefined();
      }
      // The same key on another route: 422, forwarded neither.
      const reused = await send({
        ...payout,
        path: '/api/v1/chargebacks/',
      });
      expectErrorBody(reused, { status: 422, code: 'idempotency_key_reused' });
      expect(gateway.upstream.requests).toHaveLength(1);

      // A malformed key: 400, nothing forwarded, nothing claimed.
      const malformed = await send({
        ...payout,
        headers: { ...bearer(key.secretKey), 'idempotency-key': 'a b' },
      });
      expectErrorBody(malformed, { status: 400, code: 'idempotency_key_invalid' });
      expect(gateway.upstream.requests).toHaveLength(1);
    });

    it('claims no key for a payout refused by its role: the right key then goes through', async () => {
      const idempotencyKey = `refused-${proxy}-${String(Date.now())}`;
      const refused = await send({
        method: 'POST',
        path: '/api/v1/payouts/',
        headers: {
          ...bearer(gateway.fixtures.keys.level1.secretKey),
          'idempotency-key': idempotencyKey,
        },
      });
      expectErrorBody(refused, { status: 403, code: 'insufficient_role' });
      expect(gateway.upstream.requests).toEqual([]);
      const key = gateway.fixtures.keys.level2;
      const allowed = await send({
        method: 'POST',
        path: '/api/v1/payouts/',
        headers: { ...bearer(key.secretKey), 'idempotency-key': idempotencyKey },
      });
      expectForwarded(allowed, {
        method: 'POST',
        url: '/api/v1/payouts/',
        key,
        credential: 'secret',
      });
    });
  });

  describeWithProxy(proxy)(`${proxy} from deploy/ when the gateway is down`, () => {
    it('answers 503 and never passes the request on', async () => {
      const gateway = await startTestGateway({ trustProxy: ['127.0.0.1'] });
      const running = await startProxy(proxy, {
        gateway: `127.0.0.1:${gateway.port}`,
        payments: new URL(gateway.upstream.url).host,
      });
      const upstream = gateway.upstream;
      const key = gateway.fixtures.keys.admin;
      try {
        const before = await httpRequest({
          port: running.port,
          path: '/api/v1/wallets/',
          headers: bearer(key.secretKey),
        });
        expect(before.status).toBe(200);
        upstream.requests.length = 0;
        await gateway.closeGatewayOnly();
        const answer = await httpRequest({
          port: running.port,
          path: '/api/v1/wallets/',
          headers: bearer(key.secretKey),
        });
        expect({ status: answer.status, code: answer.body?.code }).toEqual({
          status: 503,
          code: 'upstream_unavailable',
        });
        expect(answer.headers['content-type']).toMatch(/^application\/json/);
        expect(upstream.requests).toEqual([]);
      } finally {
        await running.stop();
        await gateway.close();
      }
    });
  });
}
