import { randomBytes } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { DEFAULT_PUBLIC_KEY_HEADER } from '../../lib/entry/core';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/entry/redis';
import { expectErrorBody } from '../helpers/error-body';
import { createFixtures, type TestKey, TOKEN_SECRET, withExtraKey } from '../helpers/fixtures';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
  untilShared,
} from '../helpers/redis';
import { rawRequest, sendRaw } from './raw-http';

/**
 * How a request is framed, what a token's JOSE header may hold, what reaches the log, and how many
 * `payments` calls one browser with a merchant's publishable key can make.
 *
 * - A declared `Content-Length` over the 64 KB body limit answers 413 at once, from the header,
 *   and the connection is closed (the body is never waited for).
 * - An HTTP/1.1 request without `Host` gets the JSON error body, like every other error.
 * - A correctly signed token whose header holds anything besides `alg` and `typ` is invalid.
 * - A path segment or query value that is a known key, whatever its shape, is never logged.
 * - Publishable-key requests in the `payments` scope count per client IP, 45 per minute; other
 *   addresses and the merchant's own secret key are unaffected.
 *
 * Every case runs over real sockets, on a gateway counting in memory and on one sharing a real
 * Redis (its own key prefix).
 */

const WALLETS = '/api/v1/wallets/';
const STATUS = '/api/v1/payment/status/';
const PAYOUTS = '/api/v1/payouts/';
/** The cap on publishable-key requests in the `payments` scope, per client IP per minute. */
const PUBLISHABLE_PER_IP = 45;
const WINDOW_SECONDS = 60;
/** The 413 must come from the header: well before this. */
const PROMPT_MS = 1000;

interface Mode {
  readonly label: string;
  readonly describe: jest.Describe;
  /** Third octet of the client addresses, so that no two suites share an address. */
  readonly subnet: number;
  readonly shared: boolean;
}

const MODES: readonly Mode[] = [
  { label: 'counting in memory', describe, subnet: 151, shared: false },
  { label: 'sharing Redis', describe: describeWithRedis, subnet: 152, shared: true },
];

/** A key of the opaque shape the keys file allows (another tool's), with no `/` in it. */
function opaqueKey(): TestKey {
  return {
    id: 'key_opaque',
    accountId: 'acct_open',
    role: 'level-2',
    publishableKey: `merchant-public-${randomBytes(12).toString('hex')}`,
    secretKey: `merchant-secret-${randomBytes(16).toString('hex')}`,
  };
}

for (const mode of MODES) {
  mode.describe(`request framing, tokens, logs and per-IP limits, ${mode.label}`, () => {
    let testRedis: TestRedis | undefined;
    let connection: LimiterRedisConnection | undefined;
    let gateway: TestGateway;
    const opaque = opaqueKey();

    const from = (host: number): string => `127.0.${mode.subnet}.${host}`;

    beforeAll(async () => {
      if (mode.shared) {
        testRedis = await acquireTestRedis();
        if (testRedis === undefined) throw new Error('describeWithRedis ran without a Redis');
        connection = createLimiterRedis({ url: testRedis.url });
        await untilShared(connection);
      }
    });
    beforeEach(async () => {
      gateway = await startTestGateway({
        fixtures: withExtraKey(createFixtures(), opaque),
        ...(connection === undefined
          ? {}
          : { redis: connection, redisPrefix: uniquePrefix('framing') }),
      });
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

    describe('a declared length over the body limit', () => {
      it.each([['70000'], ['99999999999']])(
        'Content-Length: %s with 2 bytes sent: 413 payload_too_large at once, and the connection closed',
        async (length) => {
          const began = Date.now();
          const result = await sendRaw({
            port: gateway.port,
            bytes: rawRequest({
              method: 'POST',
              target: STATUS,
              // Keep-alive: closing the connection must be the server's doing.
              keepAlive: true,
              headers: [
                ['Authorization', `Bearer ${gateway.fixtures.keys.admin.secretKey}`],
                ['Content-Type', 'application/json'],
                ['Content-Length', length],
              ],
              body: '{}',
            }),
            awaitClose: true,
            timeoutMs: 1500,
          });
          const elapsed = Date.now() - began;

          expectErrorBody(result, { status: 413, code: 'payload_too_large' });
          expect(result.headers.connection).toBe('close');
          expect({ closedByServer: result.closedByServer, prompt: elapsed < PROMPT_MS }).toEqual({
            closedByServer: true,
            prompt: true,
          });
          expect(gateway.upstream.requests).toEqual([]);
        },
      );
    });

    describe('an HTTP/1.1 request without Host', () => {
      it('answers 400 invalid_request with the JSON error body, and forwards nothing', async () => {
        const result = await sendRaw({
          port: gateway.port,
          bytes: rawRequest({
            target: WALLETS,
            withoutHost: true,
            headers: [['Authorization', `Bearer ${gateway.fixtures.keys.level1.secretKey}`]],
          }),
        });

        expectErrorBody(result, { status: 400, code: 'invalid_request' });
        expect(gateway.upstream.requests).toEqual([]);
      });
    });

    describe('JOSE headers of tokens', () => {
      /** A token signed with the gateway's secret, with the claims it mints and this header. */
      const signed = (header: Record<string, unknown>): string => {
        const { level1 } = gateway.fixtures.keys;
        const issued = gateway.tokens.issue({
          id: level1.id,
          accountId: level1.accountId,
          role: level1.role,
        });
        const claims = jwt.decode(issued.token, { json: true });
        if (claims === null) throw new Error('the gateway minted a token jsonwebtoken cannot read');
        return jwt.sign(claims, TOKEN_SECRET, {
          algorithm: 'HS256',
          header: { alg: 'HS256', typ: 'JWT', ...header },
        });
      };
      const headerOf = (token: string): unknown =>
        JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString('utf8'));

      it('control: a token re-signed with only alg and typ is allowed', async () => {
        const token = signed({});
        expect(headerOf(token)).toEqual({ alg: 'HS256', typ: 'JWT' });

        const result = await gateway.send({ path: WALLETS, headers: bearer(token) });

        expect(result.status).toBe(200);
        expect(
          gateway.upstream.requests.map(({ headers }) => headers['x-gateway-credential']),
        ).toEqual(['token']);
      });

      it.each([
        ['crit: ["x-unknown"]', { crit: ['x-unknown'] }],
        ['crit: ["b64"] with b64: false', { crit: ['b64'], b64: false }],
        ['an extra kid', { kid: 'key_l1' }],
        ['jku', { jku: 'https://attacker.example/jwks.json' }],
        ['x5u', { x5u: 'https://attacker.example/cert.pem' }],
      ])(
        'a correctly signed token whose header holds %s: 401 invalid_token',
        async (_name, extra) => {
          const token = signed(extra);
          expect(headerOf(token)).toEqual({ alg: 'HS256', typ: 'JWT', ...extra });

          const result = await gateway.send({ path: WALLETS, headers: bearer(token) });

          expectErrorBody(result, { status: 401, code: 'invalid_token', message: 'Invalid token' });
          expect(gateway.upstream.requests).toEqual([]);
        },
      );
    });

    describe('known keys pasted into a path or a query', () => {
      const shapes: [string, (gateway: TestGateway) => string][] = [
        ['an opaque secret key', () => opaque.secretKey],
        ['an opaque secret key holding `/`', ({ fixtures }) => fixtures.keys.foreign.secretKey],
        ['a typed sk_ secret key', ({ fixtures }) => fixtures.keys.admin.secretKey],
        ['a typed publishable key', ({ fixtures }) => fixtures.keys.admin.publishableKey],
        ['an opaque publishable key', () => opaque.publishableKey],
      ];
      const placements: [string, (key: string) => string][] = [
        ['as the path GET /api/v1/<key>', (key) => `/api/v1/${key}`],
        ['as a query value', (key) => `${WALLETS}?ref=${encodeURIComponent(key)}`],
      ];
      const cases = shapes.flatMap(([shape, key]) =>
        placements.map(([placement, target]) => [`${shape} ${placement}`, key, target] as const),
      );

      it.each(cases)('%s: a 4xx, and no log line holds it', async (_name, keyOf, targetOf) => {
        const key = keyOf(gateway);
        const result = await sendRaw({
          port: gateway.port,
          bytes: rawRequest({ target: targetOf(key) }),
        });

        expect(result.status).toBeGreaterThanOrEqual(400);
        expect(result.status).toBeLessThan(500);
        // The request was logged: the assertion below is about a line that exists.
        const requestId = result.headers['x-request-id'];
        expect(
          gateway.logs
            .entries()
            .filter((entry) => entry.event === 'http.request' && entry.request_id === requestId),
        ).toHaveLength(1);
        const logged = gateway.logs.lines.join('\n');
        expect(logged.includes(key)).toBe(false);
        expect(logged.includes(encodeURIComponent(key))).toBe(false);
        expect(gateway.upstream.requests).toEqual([]);
      });
    });

    describe('publishable keys in the payments scope', () => {
      it(`allows ${PUBLISHABLE_PER_IP} payment-status calls per IP with a publishable key, then 429; other IPs and the secret key are unaffected`, async () => {
        const { admin } = gateway.fixtures.keys;
        const statusCall = (ip: string) =>
          gateway.send({
            method: 'POST',
            path: STATUS,
            headers: { [DEFAULT_PUBLIC_KEY_HEADER]: admin.publishableKey },
            body: { invoice_id: 'inv_1' },
            from: ip,
          });

        const statuses: number[] = [];
        for (let i = 0; i < PUBLISHABLE_PER_IP; i++)
          statuses.push((await statusCall(from(1))).status);
        expect(statuses).toEqual(Array.from({ length: PUBLISHABLE_PER_IP }, () => 200));
        expect(gateway.upstream.requests).toHaveLength(PUBLISHABLE_PER_IP);

        const over = await statusCall(from(1));
        expectErrorBody(over, { status: 429, code: 'rate_limited', message: 'Too many requests' });
        const retryAfter = String(over.headers['retry-after']);
        expect(retryAfter).toMatch(/^\d+$/);
        expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
        expect(Number(retryAfter)).toBeLessThanOrEqual(WINDOW_SECONDS);
        expect(gateway.upstream.requests).toHaveLength(PUBLISHABLE_PER_IP);

        // Another address with the same publishable key has its own budget.
        expect((await statusCall(from(2))).status).toBe(200);
        // The merchant's own secret key, from the address that spent its publishable budget.
        const payout = await gateway.send({
          method: 'POST',
          path: PAYOUTS,
          headers: bearer(admin.secretKey),
          body: { amount: '10.00', currency: 'EUR' },
          from: from(1),
        });
        expect(payout.status).toBe(200);
        expect(
          gateway.upstream.requests.slice(PUBLISHABLE_PER_IP).map(({ url, headers }) => ({
            url,
            credential: headers['x-gateway-credential'],
          })),
        ).toEqual([
          { url: STATUS, credential: 'publishable' },
          { url: PAYOUTS, credential: 'secret' },
        ]);
      });
    });
  });
}
