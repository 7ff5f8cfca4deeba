import http from 'node:http';
import request from 'supertest';
import { createApp } from '../../gateway/app';
import { DEFAULT_LIMITS } from '../../gateway/config';
import { generateKey } from '../../lib/model/key-format';
import type { KeyRecord, KeyStore } from '../../lib/keys/key-store';
import { TokenService } from '../../lib/tokens/tokens';
import {
  expectErrorBody,
  type ExpectedError,
  type HttpAnswer,
  withoutRequestId,
} from '../helpers/error-body';
import {
  allSecrets,
  createFixtures,
  TOKEN_SECRET,
  withLastCharacterChanged,
} from '../helpers/fixtures';
import {
  bearer,
  type SendOptions,
  type SendResult,
  startTestGateway,
  type TestGateway,
} from '../helpers/gateway';
import { captureLogs, findLeaks } from '../helpers/logs';
import { startRecordingUpstream } from '../helpers/upstream';
import { exchangeToken } from '../helpers/routes';

/**
 * Every error code, produced over HTTP, with the exact body shape and the
 * documented messages, and nothing secret in any answer or log line.
 */

const BODY_LIMIT_BYTES = 64 * 1024;
const GENERATE_TOKEN = '/api/v1/auth/generate-token/';

/** A JSON object body of exactly `size` bytes. */
function jsonOfSize(size: number): string {
  const head = '{"invoice_id":"inv_1","pad":"';
  const tail = '"}';
  return head + 'x'.repeat(size - head.length - tail.length) + tail;
}

interface ErrorCase {
  readonly name: string;
  readonly expected: ExpectedError;
  readonly request: (gateway: TestGateway, token: string) => SendOptions;
}

describe('error answers', () => {
  let gateway: TestGateway;
  let token: string;
  const secretsOf = (): string[] => [...allSecrets(gateway.fixtures), token];
  const expectNoLeak = (answer: HttpAnswer): void => {
    expect(findLeaks(`${answer.text}\n${JSON.stringify(answer.headers)}`, secretsOf())).toEqual([]);
  };

  beforeAll(async () => {
    // Failed authentications are throttled per IP; that limit is tested on its own below.
    gateway = await startTestGateway({ limits: { authFailures: 10_000 } });
    token = await exchangeToken(gateway, gateway.fixtures.keys.admin);
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    expect(gateway.logs.lines.length).toBeGreaterThan(0);
    expect(findLeaks(gateway.logs.lines.join('\n'), secretsOf())).toEqual([]);
  });

  const keys = () => gateway.fixtures.keys;

  const cases: readonly ErrorCase[] = [
    {
      name: 'a Bearer credential and a publishable key together',
      expected: { status: 400, code: 'invalid_request', message: /not both/ },
      request: (g) => ({
        method: 'POST',
        path: '/api/v1/payment/status/',
        headers: {
          ...bearer(g.fixtures.keys.admin.secretKey),
          'X-Service-Public-API-Key': g.fixtures.keys.admin.publishableKey,
        },
        body: { invoice_id: 'inv_1' },
      }),
    },
    {
      name: 'malformed JSON',
      expected: { status: 400, code: 'invalid_request', message: /JSON/ },
      request: (g) => ({
        method: 'POST',
        path: '/api/v1/payment/status/',
        headers: {
          'X-Service-Public-API-Key': g.fixtures.keys.admin.publishableKey,
          'content-type': 'application/json',
        },
        body: '{"invoice_id": ',
      }),
    },
    {
      name: 'two Authorization headers',
      expected: { status: 400, code: 'invalid_request', message: /once/ },
      request: (g) => ({
        path: '/api/v1/wallets/',
        headers: { authorization: [`Bearer ${g.fixtures.keys.admin.secretKey}`, 'Bearer x'] },
      }),
    },
    {
      name: 'no credential on a secret-key route',
      expected: { status: 401, code: 'missing_credentials', message: 'Authentication required' },
      request: () => ({ path: '/api/v1/wallets/' }),
    },
    {
      name: 'no credential on a publishable-key route',
      expected: { status: 401, code: 'missing_credentials', message: 'Authentication required' },
      request: () => ({ method: 'POST', path: '/api/v1/checkout/', body: { amount: 10 } }),
    },
    {
      name: 'an unknown secret key',
      expected: { status: 401, code: 'invalid_api_key', message: 'Invalid API key' },
      request: () => ({ path: '/api/v1/wallets/', headers: bearer(generateKey('secret', 'test')) }),
    },
    {
      name: 'an unknown publishable key',
      expected: { status: 401, code: 'invalid_api_key', message: 'Invalid API key' },
      request: () => ({
        method: 'POST',
        path: '/api/v1/checkout/',
        headers: { 'X-Service-Public-API-Key': generateKey('publishable', 'test') },
      }),
    },
    {
      name: 'a revoked secret key',
      expected: { status: 401, code: 'invalid_api_key', message: 'Invalid API key' },
      request: (g) => ({
        path: '/api/v1/wallets/',
        headers: bearer(g.fixtures.keys.revoked.secretKey),
      }),
    },
    {
      name: '"Bearer" with nothing after it',
      expected: { status: 401, code: 'invalid_api_key', message: 'Invalid API key' },
      request: () => ({ path: '/api/v1/wallets/', headers: { authorization: 'Bearer ' } }),
    },
    {
      name: 'a secret key sent as the publishable key',
      expected: { status: 401, code: 'invalid_api_key', message: 'Invalid API key' },
      request: (g) => ({
        method: 'POST',
        path: '/api/v1/checkout/',
        headers: { 'X-Service-Public-API-Key': g.fixtures.keys.admin.secretKey },
      }),
    },
    {
      name: 'a wrong secret on the token exchange',
      expected: { status: 401, code: 'invalid_credentials', message: 'Invalid API key or secret' },
      request: (g) => ({
        method: 'POST',
        path: GENERATE_TOKEN,
        body: {
          api_key: g.fixtures.keys.admin.publishableKey,
          api_secret: g.fixtures.keys.level1.secretKey,
        },
      }),
    },
    {
      name: 'a token signed by another gateway',
      expected: { status: 401, code: 'invalid_token', message: 'Invalid token' },
      request: (g) => {
        const other = new TokenService({ secret: 'another-gateway-secret-0123456789-abcdef' });
        const admin = g.fixtures.keys.admin;
        return {
          path: '/api/v1/wallets/',
          headers: bearer(
            other.issue({ id: admin.id, accountId: admin.accountId, role: admin.role }).token,
          ),
        };
      },
    },
    {
      name: 'a token with a tampered payload',
      expected: { status: 401, code: 'invalid_token', message: 'Invalid token' },
      request: (_g, valid) => {
        const [header, payload, signature] = valid.split('.');
        const claims = JSON.parse(
          Buffer.from(payload ?? '', 'base64url').toString('utf8'),
        ) as Record<string, unknown>;
        const forged = Buffer.from(JSON.stringify({ ...claims, acct: 'acct_walled' })).toString(
          'base64url',
        );
        return { path: '/api/v1/wallets/', headers: bearer(`${header}.${forged}.${signature}`) };
      },
    },
    {
      name: 'a token used after its exp',
      expected: { status: 401, code: 'expired_token', message: 'Expired token' },
      request: (g) => {
        const ttlSeconds = 1800;
        const past = new TokenService({
          secret: TOKEN_SECRET,
          ttlSeconds,
          now: () => Date.now() - (ttlSeconds + 60) * 1000,
        });
        const admin = g.fixtures.keys.admin;
        return {
          path: '/api/v1/wallets/',
          headers: bearer(
            past.issue({ id: admin.id, accountId: admin.accountId, role: admin.role }).token,
          ),
        };
      },
    },
    {
      name: 'a publishable key on /wallets/',
      expected: { status: 401, code: 'credential_not_allowed', message: /secret key/ },
      request: (g) => ({
        path: '/api/v1/wallets/',
        headers: { 'X-Service-Public-API-Key': g.fixtures.keys.admin.publishableKey },
      }),
    },
    {
      name: 'a secret key on /checkout/',
      expected: { status: 401, code: 'credential_not_allowed', message: /publishable key/ },
      request: (g) => ({
        method: 'POST',
        path: '/api/v1/checkout/',
        headers: bearer(g.fixtures.keys.admin.secretKey),
      }),
    },
    {
      name: 'a level-2 key on a level-3 route',
      expected: { status: 403, code: 'insufficient_role', message: /level-3/ },
      request: (g) => ({
        method: 'POST',
        path: '/api/v1/otp/confirm/',
        headers: bearer(g.fixtures.keys.level2.secretKey),
        body: { otp: '1234' },
      }),
    },
    {
      name: 'a whitelisted account from another address',
      expected: {
        status: 403,
        code: 'ip_not_whitelisted',
        message: 'Access denied: IP not whitelisted.',
      },
      request: (g) => ({
        path: '/api/v1/wallets/',
        headers: bearer(g.fixtures.keys.walled.secretKey),
        from: '127.0.0.1',
      }),
    },
    {
      name: 'an unknown path',
      expected: { status: 404, code: 'not_found' },
      request: () => ({ path: '/api/v1/nothing-here/' }),
    },
    {
      name: 'a known path with another method',
      expected: { status: 405, code: 'method_not_allowed' },
      request: (g) => ({
        method: 'DELETE',
        path: '/api/v1/wallets/',
        headers: bearer(g.fixtures.keys.admin.secretKey),
      }),
    },
    {
      name: `a body of ${BODY_LIMIT_BYTES + 1} bytes`,
      expected: { status: 413, code: 'payload_too_large' },
      request: (g) => ({
        method: 'POST',
        path: '/api/v1/payment/status/',
        headers: {
          'X-Service-Public-API-Key': g.fixtures.keys.admin.publishableKey,
          'content-type': 'application/json',
        },
        body: jsonOfSize(BODY_LIMIT_BYTES + 1),
      }),
    },
    {
      name: 'the token exchange as text/plain',
      expected: { status: 415, code: 'unsupported_media_type' },
      request: (g) => ({
        method: 'POST',
        path: GENERATE_TOKEN,
        headers: { 'content-type': 'text/plain' },
        body: JSON.stringify({
          api_key: g.fixtures.keys.admin.publishableKey,
          api_secret: g.fixtures.keys.admin.secretKey,
        }),
      }),
    },
  ];

  it.each(cases.map((errorCase) => [errorCase.name, errorCase] as const))(
    '%s: the error body of section 7, and the upstream is not called',
    async (_name, errorCase) => {
      const before = gateway.upstream.requests.length;
      const result = await gateway.send(errorCase.request(gateway, token));
      expectErrorBody(result, errorCase.expected);
      expectNoLeak(result);
      expect(result.headers['cache-control']).toBe('no-store');
      expect(gateway.upstream.requests.length).toBe(before);
    },
  );

  it(`accepts a body of exactly ${BODY_LIMIT_BYTES} bytes and forwards it unchanged`, async () => {
    const body = jsonOfSize(BODY_LIMIT_BYTES);
    const result = await gateway.send({
      method: 'POST',
      path: '/api/v1/payment/status/',
      headers: {
        'X-Service-Public-API-Key': keys().admin.publishableKey,
        'content-type': 'application/json',
      },
      body,
    });
    expect(result.status).toBe(200);
    expect(gateway.upstream.requests.at(-1)?.body.toString('utf8')).toBe(body);
  });

  it('a revoked key, an unknown key and a wrong secret on generate-token answer the same body but for request_id', async () => {
    const { admin, revoked, level1 } = keys();
    const pairs = [
      { api_key: revoked.publishableKey, api_secret: revoked.secretKey },
      { api_key: generateKey('publishable', 'test'), api_secret: generateKey('secret', 'test') },
      { api_key: admin.publishableKey, api_secret: withLastCharacterChanged(admin.secretKey) },
      { api_key: admin.publishableKey, api_secret: level1.secretKey },
    ];
    const results: SendResult[] = [];
    for (const pair of pairs)
      results.push(await gateway.send({ method: 'POST', path: GENERATE_TOKEN, body: pair }));
    for (const result of results) {
      expectErrorBody(result, {
        status: 401,
        code: 'invalid_credentials',
        message: 'Invalid API key or secret',
      });
      expectNoLeak(result);
    }
    const [first, ...rest] = results.map(withoutRequestId);
    for (const other of rest) expect(other).toEqual(first);
    const headerSets = results.map((result) => ({
      auth: result.headers['www-authenticate'],
      type: result.headers['content-type'],
    }));
    for (const other of headerSets) expect(other).toEqual(headerSets[0]);
    expect(new Set(results.map((result) => result.headers['x-request-id'])).size).toBe(
      results.length,
    );
  });
});

describe('rate_limited', () => {
  it('answers 429 Too many requests with Retry-After once the limit is spent', async () => {
    const limit = 2;
    const gateway = await startTestGateway({ limits: { payments: limit } });
    try {
      const headers = bearer(gateway.fixtures.keys.admin.secretKey);
      for (let i = 0; i < limit; i++)
        expect((await gateway.send({ path: '/api/v1/wallets/', headers })).status).toBe(200);
      const result = await gateway.send({ path: '/api/v1/wallets/', headers });
      expectErrorBody(result, { status: 429, code: 'rate_limited', message: 'Too many requests' });
      expect(result.headers['retry-after']).toMatch(/^[1-9]\d*$/);
      expect(gateway.upstream.requests.length).toBe(limit);
      expect(findLeaks(gateway.logs.lines.join('\n'), allSecrets(gateway.fixtures))).toEqual([]);
    } finally {
      await gateway.close();
    }
  });
});

describe('upstream failures', () => {
  let gateway: TestGateway;
  const upstreamTimeoutMs = 300;

  beforeAll(async () => {
    gateway = await startTestGateway({ upstreamTimeoutMs });
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    gateway.upstream.reset();
    expect(findLeaks(gateway.logs.lines.join('\n'), allSecrets(gateway.fixtures))).toEqual([]);
  });

  const wallets = (): SendOptions => ({
    path: '/api/v1/wallets/',
    headers: bearer(gateway.fixtures.keys.admin.secretKey),
  });

  it('answers 502 upstream_unavailable when the upstream hangs up without answering, and keeps serving', async () => {
    gateway.upstream.respond = (_request, res) => {
      res.socket?.destroy();
    };
    const result = await gateway.send(wallets());
    expectErrorBody(result, { status: 502, code: 'upstream_unavailable' });
    expect(gateway.upstream.requests.length).toBe(1);

    gateway.upstream.reset();
    expect((await gateway.send(wallets())).status).toBe(200);
  });

  it(`answers 504 upstream_timeout when the upstream says nothing for ${upstreamTimeoutMs} ms`, async () => {
    gateway.upstream.respond = () => undefined;
    const started = Date.now();
    const result = await gateway.send(wallets());
    expectErrorBody(result, { status: 504, code: 'upstream_timeout' });
    // Within the timeout, not at the next tick of a coarse timer (undici's own fired after ~950 ms).
    expect(Date.now() - started).toBeGreaterThanOrEqual(upstreamTimeoutMs - 20);
    expect(Date.now() - started).toBeLessThan(upstreamTimeoutMs + 400);
    expect(gateway.upstream.requests.length).toBe(1);
  });

  /** GET `path` on the gateway, read to the end or to the connection's close, timed. */
  const readWhole = (
    path: string,
    headers: Record<string, string>,
  ): Promise<{ status: number; body: string; complete: boolean; ms: number }> =>
    new Promise((resolve, reject) => {
      const started = Date.now();
      http
        .get(`${gateway.url}${path}`, { headers, agent: false }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (body += chunk));
          res.on('error', () => undefined);
          res.on('close', () => {
            resolve({
              status: res.statusCode ?? 0,
              body,
              complete: res.complete,
              ms: Date.now() - started,
            });
          });
        })
        .on('error', reject);
    });

  it(`cuts the connection when the upstream's body stalls for ${upstreamTimeoutMs} ms after its head, and keeps serving`, async () => {
    gateway.upstream.respond = (_request, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('first part');
    };
    const { headers } = wallets();
    const stalled = await readWhole('/api/v1/wallets/', headers as Record<string, string>);
    expect(stalled).toMatchObject({ status: 200, body: 'first part', complete: false });
    expect(stalled.ms).toBeGreaterThanOrEqual(upstreamTimeoutMs - 20);
    expect(stalled.ms).toBeLessThan(upstreamTimeoutMs + 400);

    gateway.upstream.reset();
    expect((await gateway.send(wallets())).status).toBe(200);
  });

  it(`streams a body whose chunks come less than ${upstreamTimeoutMs} ms apart, however long it takes in all`, async () => {
    const chunks = 6;
    const gapMs = upstreamTimeoutMs / 3;
    gateway.upstream.respond = (_request, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      let sent = 0;
      const timer = setInterval(() => {
        sent += 1;
        res.write(`chunk ${sent};`);
        if (sent === chunks) {
          clearInterval(timer);
          res.end();
        }
      }, gapMs);
    };
    const { headers } = wallets();
    const slow = await readWhole('/api/v1/wallets/', headers as Record<string, string>);
    expect(slow).toMatchObject({
      status: 200,
      complete: true,
      body: Array.from({ length: chunks }, (_, n) => `chunk ${n + 1};`).join(''),
    });
    expect(slow.ms).toBeGreaterThan(upstreamTimeoutMs);
  });

  it(`does not cut a body the client holds back for longer than ${upstreamTimeoutMs} ms`, async () => {
    const body = Buffer.alloc(16 * 1024 * 1024, 'x');
    gateway.upstream.respond = (_request, res) => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length });
      res.end(body);
    };
    const { headers } = wallets();
    const received = await new Promise<{ bytes: number; complete: boolean }>((resolve, reject) => {
      http
        .get(`${gateway.url}/api/v1/wallets/`, { headers, agent: false }, (res) => {
          let bytes = 0;
          res.pause();
          setTimeout(() => res.resume(), upstreamTimeoutMs * 2);
          res.on('data', (chunk: Buffer) => (bytes += chunk.length));
          res.on('error', () => undefined);
          res.on('close', () => {
            resolve({ bytes, complete: res.complete });
          });
        })
        .on('error', reject);
    });
    expect(received).toEqual({ bytes: body.length, complete: true });
  });

  it('answers 502 upstream_unavailable when the upstream is not listening, and /healthz still answers', async () => {
    const own = await startTestGateway();
    try {
      await own.upstream.close();
      const result = await own.send({
        path: '/api/v1/wallets/',
        headers: bearer(own.fixtures.keys.admin.secretKey),
      });
      expectErrorBody(result, { status: 502, code: 'upstream_unavailable' });
      expect((await own.send({ path: '/healthz' })).status).toBe(200);
    } finally {
      await own.close().catch(() => undefined);
    }
  });
});

describe('internal_error', () => {
  const INTERNAL_DETAIL = 'db password hunter2 at lookup()';

  /** A key store whose lookups fail the way a broken database would. */
  class FailingKeyStore implements KeyStore {
    findBySecretKey(): KeyRecord | undefined {
      throw new Error(INTERNAL_DETAIL);
    }
    findByKeyPair(): KeyRecord | undefined {
      throw new Error(INTERNAL_DETAIL);
    }
    findByPublishableKey(): KeyRecord | undefined {
      throw new Error(INTERNAL_DETAIL);
    }
    findById(): KeyRecord | undefined {
      throw new Error(INTERNAL_DETAIL);
    }
  }

  it.each([
    ['a secret-key lookup that throws', 'GET', '/api/v1/wallets/'],
    ['a key-pair lookup that throws', 'POST', GENERATE_TOKEN],
  ] as const)(
    '%s (%s %s) answers 500 internal_error without the internal message or a stack',
    async (_name, method, path) => {
      const fixtures = createFixtures();
      const upstream = await startRecordingUpstream();
      const logs = captureLogs();
      const app = createApp({
        keyStore: new FailingKeyStore(),
        tokens: new TokenService({ secret: TOKEN_SECRET }),
        upstreamUrl: upstream.url,
        logger: logs.logger,
        limits: DEFAULT_LIMITS,
      });
      try {
        const { admin } = fixtures.keys;
        const pending =
          method === 'GET'
            ? request(app).get(path).set('Authorization', `Bearer ${admin.secretKey}`)
            : request(app)
                .post(path)
                .send({ api_key: admin.publishableKey, api_secret: admin.secretKey });
        const response = await pending;
        const answer: HttpAnswer = {
          status: response.status,
          headers: response.headers,
          text: response.text,
        };
        expectErrorBody(answer, { status: 500, code: 'internal_error', message: 'Internal error' });
        const everything = `${response.text}\n${JSON.stringify(response.headers)}\n${logs.lines.join('\n')}`;
        expect(everything).not.toContain('hunter2');
        expect(findLeaks(everything, allSecrets(fixtures))).toEqual([]);
        expect(
          logs
            .entries()
            .some(
              (entry) =>
                entry.msg === 'unexpected error' &&
                entry.request_id === answer.headers['x-request-id'],
            ),
        ).toBe(true);
        expect(upstream.requests).toHaveLength(0);
      } finally {
        app.shutdown();
        await upstream.close();
      }
    },
  );
});
