import { DEFAULT_PUBLIC_KEY_HEADER } from '../../lib/entry/core';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/entry/redis';
import { expectErrorBody } from '../helpers/error-body';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
  untilShared,
} from '../helpers/redis';
import { replyWith } from '../helpers/upstream';
import { rawRequest, sendRaw } from './raw-http';

/**
 * What a client smuggles towards the upstream, and what an upstream smuggles back towards the
 * client.
 *
 * - Request headers whose name holds `_` (read as the identity headers by CGI, WSGI and PHP) and
 *   method or URL overrides never reach the upstream, on a request that is otherwise allowed.
 * - A target holding `#` is refused (400) before routing; the upstream receives only the routed
 *   path and the query.
 * - More header lines than Node's parser keeps (so a second `Authorization` could hide past the
 *   limit) answers 431 `headers_too_large`.
 * - Hop-by-hop headers of a response, those named by `Connection` included, never reach the
 *   client, and a status outside 100 to 599 becomes 502.
 *
 * Every case runs over real sockets against the sample gateway and the recording upstream, on a
 * gateway counting in memory and on one sharing a real Redis (its own key prefix).
 */

const WALLETS = '/api/v1/wallets/';
const STATUS = '/api/v1/payment/status/';
/** Node keeps 1,000 header lines (2,000 raw entries); a line past them is silently dropped. */
const PAST_THE_KEPT_LINES = 2_100;
const WITHIN_THE_KEPT_LINES = 900;

interface Mode {
  readonly label: string;
  readonly describe: jest.Describe;
  readonly shared: boolean;
}

const MODES: readonly Mode[] = [
  { label: 'counting in memory', describe, shared: false },
  { label: 'sharing Redis', describe: describeWithRedis, shared: true },
];

/** `count` short filler lines (`F: a`), so that 2,100 of them stay under Node's 16 KB head limit. */
function fillerLines(count: number): [string, string][] {
  return Array.from({ length: count }, (): [string, string] => ['F', 'a']);
}

for (const mode of MODES) {
  mode.describe(`smuggling past the gateway, ${mode.label}`, () => {
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
    });
    beforeEach(async () => {
      gateway = await startTestGateway(
        connection === undefined
          ? {}
          : { redis: connection, redisPrefix: uniquePrefix('smuggling') },
      );
    });
    afterEach(async () => {
      const state = gateway.app.rateLimitState();
      await gateway.close();
      // With Redis, every answer must have been counted there, not in degraded memory.
      expect(state).toBe(mode.shared ? 'shared' : 'memory');
    });
    afterAll(async () => {
      await connection?.close();
      await testRedis?.close();
    });

    describe('request headers', () => {
      it('drops every header whose name holds `_`, and the upstream sees only the real identity', async () => {
        const { level1 } = gateway.fixtures.keys;
        const smuggled = {
          X_Gateway_Role: 'administrator',
          X_Gateway_Account_Id: 'acct_forged',
          'X-Gateway_Key_Id': 'key_forged',
          X_Forwarded_For: '203.0.113.66',
          X_Request_Id: 'forged-request-id',
        };

        const result = await gateway.send({
          path: WALLETS,
          headers: { ...bearer(level1.secretKey), ...smuggled, 'X-Page-Size': '20' },
        });

        expect(result.status).toBe(200);
        expect(gateway.upstream.requests).toHaveLength(1);
        const { headers } = gateway.upstream.requests[0]!;
        expect(Object.keys(headers).filter((name) => name.includes('_'))).toEqual([]);
        const values = Object.values(headers).flat();
        for (const forged of Object.values(smuggled)) expect(values).not.toContain(forged);
        expect(headers).toMatchObject({
          'x-gateway-role': 'level-1',
          'x-gateway-account-id': 'acct_open',
          'x-gateway-key-id': 'key_l1',
          'x-gateway-credential': 'secret',
          'x-request-id': result.headers['x-request-id'],
          // An ordinary header still goes through: only the `_` names were dropped.
          'x-page-size': '20',
        });
      });

      it('drops method and URL overrides on an allowed GET', async () => {
        const overrides = {
          'X-HTTP-Method-Override': 'DELETE',
          'X-HTTP-Method': 'PUT',
          'X-Method-Override': 'PATCH',
          'X-Original-URL': '/api/v1/payouts/po_1/approve/',
          'X-Rewrite-URL': '/admin/keys/',
        };

        const result = await gateway.send({
          path: WALLETS,
          headers: { ...bearer(gateway.fixtures.keys.level1.secretKey), ...overrides },
        });

        expect(result.status).toBe(200);
        expect(gateway.upstream.requests).toHaveLength(1);
        const received = gateway.upstream.requests[0]!;
        expect({ method: received.method, url: received.url }).toEqual({
          method: 'GET',
          url: WALLETS,
        });
        const names = Object.keys(received.headers);
        for (const name of Object.keys(overrides)) expect(names).not.toContain(name.toLowerCase());
        const values = Object.values(received.headers).flat();
        for (const value of Object.values(overrides)) expect(values).not.toContain(value);
      });
    });

    describe('request target', () => {
      it('refuses a target holding `#` with 400 invalid_request, and forwards nothing', async () => {
        const result = await sendRaw({
          port: gateway.port,
          bytes: rawRequest({
            method: 'POST',
            target: `${STATUS}#/../../payouts/po_1/approve/`,
            headers: [
              [DEFAULT_PUBLIC_KEY_HEADER, gateway.fixtures.keys.admin.publishableKey],
              ['Content-Type', 'application/json'],
            ],
            body: '{"invoice_id":"inv_1"}',
          }),
        });

        expectErrorBody(result, { status: 400, code: 'invalid_request' });
        expect(gateway.upstream.requests).toEqual([]);
      });

      it('control: the same publishable-key POST without `#` reaches the upstream at the routed path and query', async () => {
        const result = await sendRaw({
          port: gateway.port,
          bytes: rawRequest({
            method: 'POST',
            target: `${STATUS}?page=2`,
            headers: [
              [DEFAULT_PUBLIC_KEY_HEADER, gateway.fixtures.keys.admin.publishableKey],
              ['Content-Type', 'application/json'],
            ],
            body: '{"invoice_id":"inv_1"}',
          }),
        });

        expect(result.status).toBe(200);
        expect(
          gateway.upstream.requests.map(({ method, url, headers, body }) => ({
            method,
            url,
            credential: headers['x-gateway-credential'],
            body: body.toString('utf8'),
          })),
        ).toEqual([
          {
            method: 'POST',
            url: `${STATUS}?page=2`,
            credential: 'publishable',
            body: '{"invoice_id":"inv_1"}',
          },
        ]);
      });
    });

    describe('header lines', () => {
      it(`answers 431 headers_too_large to two Authorization headers ${PAST_THE_KEPT_LINES} lines apart, and forwards nothing`, async () => {
        const { admin, level1 } = gateway.fixtures.keys;
        const bytes = rawRequest({
          target: WALLETS,
          headers: [
            ['Authorization', `Bearer ${level1.secretKey}`],
            ...fillerLines(PAST_THE_KEPT_LINES),
            ['Authorization', `Bearer ${admin.secretKey}`],
          ],
        });
        // Under Node's 16 KB limit for a head: only the number of lines can be at fault.
        expect(bytes.length).toBeLessThan(16 * 1024);

        const result = await sendRaw({ port: gateway.port, bytes });

        expectErrorBody(result, {
          status: 431,
          code: 'headers_too_large',
          message: 'Request headers too large',
        });
        expect(gateway.upstream.requests).toEqual([]);
      });

      it(`control: ${WITHIN_THE_KEPT_LINES} filler lines and one Authorization are allowed`, async () => {
        const result = await sendRaw({
          port: gateway.port,
          bytes: rawRequest({
            target: WALLETS,
            headers: [
              ...fillerLines(WITHIN_THE_KEPT_LINES),
              ['Authorization', `Bearer ${gateway.fixtures.keys.level1.secretKey}`],
            ],
          }),
        });

        expect(result.status).toBe(200);
        expect(gateway.upstream.requests.map(({ headers }) => headers['x-gateway-key-id'])).toEqual(
          ['key_l1'],
        );
      });
    });

    describe('responses from the upstream', () => {
      it('drops a header that the upstream names in Connection, and relays the rest', async () => {
        gateway.upstream.respond = replyWith(
          200,
          {
            'Content-Type': 'application/json',
            Connection: 'X-Internal-Debug',
            'X-Internal-Debug': 'db=secret',
            'X-Payment-State': 'settled',
          },
          '{"ok":true}',
        );

        const result = await gateway.send({
          path: WALLETS,
          headers: bearer(gateway.fixtures.keys.level1.secretKey),
        });

        expect({ status: result.status, text: result.text }).toEqual({
          status: 200,
          text: '{"ok":true}',
        });
        expect(gateway.upstream.requests).toHaveLength(1);
        expect(result.headers['x-payment-state']).toBe('settled');
        expect(result.headers['x-internal-debug']).toBeUndefined();
        expect(result.headers.connection ?? '').not.toMatch(/x-internal-debug/i);
      });

      it('answers 502 upstream_unavailable to an upstream status of 600', async () => {
        gateway.upstream.respond = replyWith(
          600,
          { 'Content-Type': 'application/json', 'X-Internal-Debug': 'db=secret' },
          '{"internal":"db=secret"}',
        );

        const result = await gateway.send({
          path: WALLETS,
          headers: bearer(gateway.fixtures.keys.level1.secretKey),
        });

        expect(gateway.upstream.requests).toHaveLength(1);
        expectErrorBody(result, { status: 502, code: 'upstream_unavailable' });
        expect(result.text).not.toContain('db=secret');
      });
    });
  });
}
