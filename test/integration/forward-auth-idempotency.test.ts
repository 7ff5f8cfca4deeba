import { randomUUID } from 'node:crypto';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { expectErrorBody } from '../helpers/error-body';
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

/**
 * Idempotency keys asked about through forward authentication (contract sections 12 and 17): the
 * proxy forwards the request and the gateway never sees the answer, so a key is claimed once
 * and every retry within its lifetime is refused `409`, never allowed a second time; the same key
 * with another request is refused `422`; a request refused for its credential or role claims
 * nothing. Each dialect as its proxies ask it (test/helpers/forward-auth.ts), in memory and with
 * Redis.
 */

const CLIENT = '198.51.100.9';
const PAYOUTS = '/api/v1/payouts/';

/** A refusal as the proxy's client must see it; for auth-request, as nginx receives it. */
function expectRefused(
  proxy: ProxyKind,
  answer: SendResult,
  expected: { status: number; code: string; message?: string | RegExp },
): void {
  if (DIALECT_OF[proxy] !== 'auth-request' || expected.status === 401 || expected.status === 403) {
    expectErrorBody(answer, expected);
    return;
  }
  // nginx passes only 401 and 403 from an auth request: the real refusal travels in headers.
  expect({ status: answer.status, text: answer.text.slice(0, 300) }).toEqual({
    status: 403,
    text: expect.any(String) as unknown,
  });
  expect(answer.headers['x-tollgate-status']).toBe(String(expected.status));
  expect(answer.headers['x-tollgate-code']).toBe(expected.code);
  const restored = JSON.parse(String(answer.headers['x-tollgate-body'])) as Record<string, unknown>;
  expect(restored).toEqual(JSON.parse(answer.text));
  expect(restored).toMatchObject({ status: expected.status, code: expected.code });
  if (expected.message !== undefined) {
    expect(String(restored.message)).toMatch(expected.message);
  }
  expect(restored.request_id).toBe(answer.headers['x-request-id']);
}

function expectAllowed(answer: SendResult, accountId: string): void {
  expect({ status: answer.status, text: answer.text }).toEqual({ status: 200, text: '' });
  expect(answer.headers['x-gateway-account-id']).toBe(accountId);
  expect(answer.headers['x-tollgate-status']).toBeUndefined();
}

const MODES = [
  { label: 'in memory', describe, shared: false },
  { label: 'with Redis', describe: describeWithRedis, shared: true },
] as const;

for (const mode of MODES) {
  mode.describe(`Idempotency-Key through forward authentication, ${mode.label}`, () => {
    let testRedis: TestRedis | undefined;
    let connection: LimiterRedisConnection | undefined;
    let gateway: TestGateway;

    beforeAll(async () => {
      if (mode.shared) {
        testRedis = await acquireTestRedis();
        if (testRedis === undefined) throw new Error('describeWithRedis ran without a Redis');
        connection = createLimiterRedis({ url: testRedis.url });
        await untilShared(connection);
      }
      gateway = await startTestGateway({
        trustProxy: ['127.0.0.1'],
        ...(connection === undefined
          ? {}
          : { redis: connection, redisPrefix: uniquePrefix('fa-idem') }),
      });
    });
    afterAll(async () => {
      await gateway.close();
      await connection?.close();
      await testRedis?.close();
    });
    beforeEach(() => {
      gateway.upstream.reset();
    });

    const ask = (
      proxy: ProxyKind,
      request: Partial<ClientRequest> & { target: string },
    ): Promise<SendResult> =>
      askAs(proxy, gateway, { method: 'POST', clientIp: CLIENT, ...request });

    describe.each(PROXY_KINDS)('asked as %s does', (proxy) => {
      it('allows a first use once; its retry is refused 409 idempotency_key_in_use, again and again', async () => {
        const key = gateway.fixtures.keys.level2;
        const headers = { ...bearer(key.secretKey), 'idempotency-key': randomUUID() };
        expectAllowed(await ask(proxy, { target: PAYOUTS, headers }), key.accountId);
        for (let retry = 0; retry < 2; retry++) {
          const again = await ask(proxy, { target: PAYOUTS, headers });
          expectRefused(proxy, again, { status: 409, code: 'idempotency_key_in_use' });
          for (const name of ['x-gateway-account-id', 'x-gateway-key-id', 'x-gateway-role']) {
            expect(again.headers[name]).toBeUndefined();
          }
        }
        // A key is the account's: the same value under another account is its own first use.
        const walled = gateway.fixtures.keys.walled;
        expectAllowed(
          await ask(proxy, {
            target: PAYOUTS,
            headers: { ...bearer(walled.secretKey), 'idempotency-key': headers['idempotency-key'] },
            clientIp: '127.0.0.2',
          }),
          walled.accountId,
        );
        expect(gateway.upstream.requests).toEqual([]);
      });

      it('refuses the same key with another method or path: 422 idempotency_key_reused', async () => {
        const key = gateway.fixtures.keys.level3;
        const headers = { ...bearer(key.secretKey), 'idempotency-key': randomUUID() };
        expectAllowed(await ask(proxy, { target: PAYOUTS, headers }), key.accountId);
        expectRefused(
          proxy,
          await ask(proxy, { target: '/api/v1/payouts/po_1/approve/', headers }),
          { status: 422, code: 'idempotency_key_reused' },
        );
        expectRefused(proxy, await ask(proxy, { target: '/api/v1/chargebacks/', headers }), {
          status: 422,
          code: 'idempotency_key_reused',
        });
        // And the first request's retry is still refused 409, not 422 and not allowed.
        expectRefused(proxy, await ask(proxy, { target: PAYOUTS, headers }), {
          status: 409,
          code: 'idempotency_key_in_use',
        });
      });

      it('claims nothing for a request refused by its role or its credential', async () => {
        const idempotencyKey = randomUUID();
        const low = gateway.fixtures.keys.level1;
        expectRefused(
          proxy,
          await ask(proxy, {
            target: PAYOUTS,
            headers: { ...bearer(low.secretKey), 'idempotency-key': idempotencyKey },
          }),
          { status: 403, code: 'insufficient_role' },
        );
        expectRefused(
          proxy,
          await ask(proxy, {
            target: PAYOUTS,
            headers: {
              ...bearer(`${gateway.fixtures.keys.level2.secretKey}x`),
              'idempotency-key': idempotencyKey,
            },
          }),
          { status: 401, code: 'invalid_api_key' },
        );
        // level-1 and level-2 share the account: the key is still new to it.
        const key = gateway.fixtures.keys.level2;
        expect(key.accountId).toBe(low.accountId);
        expectAllowed(
          await ask(proxy, {
            target: PAYOUTS,
            headers: { ...bearer(key.secretKey), 'idempotency-key': idempotencyKey },
          }),
          key.accountId,
        );
      });

      it('refuses 409, never allows, a key first answered through the gateway’s own proxy', async () => {
        const key = gateway.fixtures.keys.level2;
        const headers = { ...bearer(key.secretKey), 'idempotency-key': randomUUID() };
        // Proxies send no body to the auth service: the gateway's request has none either, so
        // both are the same request.
        const first = await gateway.send({ method: 'POST', path: PAYOUTS, headers });
        expect(first.status).toBe(200);
        expect(gateway.upstream.requests).toHaveLength(1);
        expect(gateway.upstream.requests[0]?.headers['idempotency-key']).toBe(
          headers['idempotency-key'],
        );
        const replayed = await gateway.send({ method: 'POST', path: PAYOUTS, headers });
        expect({ status: replayed.status, text: replayed.text }).toEqual({
          status: first.status,
          text: first.text,
        });
        expect(replayed.headers['idempotent-replayed']).toBe('true');
        expect(gateway.upstream.requests).toHaveLength(1);

        const asked = await ask(proxy, { target: PAYOUTS, headers });
        expectRefused(proxy, asked, {
          status: 409,
          code: 'idempotency_key_in_use',
          message: /answered already/,
        });
        expect(asked.headers['x-gateway-account-id']).toBeUndefined();

        // With a body the proxy does not send, the key is refused all the same.
        const withBody = { ...headers, 'idempotency-key': randomUUID() };
        const answered = await gateway.send({
          method: 'POST',
          path: PAYOUTS,
          headers: withBody,
          body: { amount: 10 },
        });
        expect(answered.status).toBe(200);
        const refused = await ask(proxy, { target: PAYOUTS, headers: withBody });
        expect(refused.status).not.toBe(200);
        expect(refused.headers['x-gateway-account-id']).toBeUndefined();
        expect(gateway.upstream.requests).toHaveLength(2);
      });

      it('a key claimed through forward authentication is never forwarded by the gateway’s own proxy', async () => {
        const key = gateway.fixtures.keys.level2;
        const headers = { ...bearer(key.secretKey), 'idempotency-key': randomUUID() };
        expectAllowed(await ask(proxy, { target: PAYOUTS, headers }), key.accountId);
        const through = await gateway.send({ method: 'POST', path: PAYOUTS, headers });
        expectErrorBody(through, { status: 409, code: 'idempotency_key_in_use' });
        expect(gateway.upstream.requests).toEqual([]);
      });
    });
  });
}
