import jwt from 'jsonwebtoken';
import request from 'supertest';
import { createApp } from '../../gateway/app';
import { DEFAULT_LIMITS } from '../../gateway/config';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import { TokenService } from '../../lib/tokens/tokens';
import { expectErrorBody, type HttpAnswer } from '../helpers/error-body';
import { allSecrets, TOKEN_SECRET } from '../helpers/fixtures';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import { captureLogs, findLeaks } from '../helpers/logs';
import { startRecordingUpstream } from '../helpers/upstream';
import { exchange, exchangeToken } from '../helpers/routes';

/** The token exchange, the token's claims, expiry, revocation and bad bodies. */

const GENERATE_TOKEN = '/api/v1/auth/generate-token/';

function decode(token: string): {
  header: Record<string, unknown>;
  payload: Record<string, unknown>;
} {
  const [header, payload] = token.split('.');
  return {
    header: JSON.parse(Buffer.from(header ?? '', 'base64url').toString('utf8')) as Record<
      string,
      unknown
    >,
    payload: JSON.parse(Buffer.from(payload ?? '', 'base64url').toString('utf8')) as Record<
      string,
      unknown
    >,
  };
}

describe('the token exchange', () => {
  const ttlSeconds = 900;
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({
      tokenTtlSeconds: ttlSeconds,
      limits: { authenticated: 10_000, authFailures: 10_000 },
    });
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    expect(findLeaks(gateway.logs.lines.join('\n'), allSecrets(gateway.fixtures))).toEqual([]);
  });

  it('answers 200 {token, token_type: Bearer, expires_in: TTL} with Cache-Control: no-store', async () => {
    const result = await exchange(gateway, gateway.fixtures.keys.level2);
    expect(result.status).toBe(200);
    expect(result.headers['content-type']).toMatch(/^application\/json/);
    expect(result.headers['cache-control']).toBe('no-store');
    expect(Object.keys(result.body ?? {}).sort()).toEqual(['expires_in', 'token', 'token_type']);
    expect(result.body).toMatchObject({ token_type: 'Bearer', expires_in: ttlSeconds });
    expect(result.body?.token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(gateway.upstream.requests).toHaveLength(0);
  });

  it('mints an HS256 JWT signed with the token secret, exp - iat = TTL, with key id, account, role and a unique jti', async () => {
    const key = gateway.fixtures.keys.level3;
    const first = await exchangeToken(gateway, key);
    const second = await exchangeToken(gateway, key);
    const { header, payload } = decode(first);
    expect(header.alg).toBe('HS256');
    // Verified independently of the gateway's own verifier: pinned algorithm, the shared secret.
    const verified = jwt.verify(first, TOKEN_SECRET, { algorithms: ['HS256'] }) as jwt.JwtPayload;
    expect(verified).toEqual(payload);
    expect(() =>
      jwt.verify(first, 'another-secret-of-sufficient-length-0123456789', {
        algorithms: ['HS256'],
      }),
    ).toThrow();
    expect(typeof payload.iat).toBe('number');
    expect((payload.exp as number) - (payload.iat as number)).toBe(ttlSeconds);
    expect(payload).toMatchObject({ sub: key.id, acct: key.accountId, role: key.role });
    expect(typeof payload.jti).toBe('string');
    expect(payload.jti).not.toBe('');
    expect(payload.jti).not.toBe(decode(second).payload.jti);
  });

  it('never carries the secret key, its digest or the publishable key', async () => {
    const key = gateway.fixtures.keys.admin;
    const token = await exchangeToken(gateway, key);
    const text = `${token}\n${JSON.stringify(decode(token))}`;
    for (const forbidden of [
      key.secretKey,
      sha256(key.secretKey).toString('hex'),
      sha256(key.secretKey).toString('base64'),
      key.publishableKey,
    ]) {
      expect(text).not.toContain(forbidden);
    }
  });

  it('the token works as a Bearer credential and the upstream sees credential "token"', async () => {
    const key = gateway.fixtures.keys.level1;
    const token = await exchangeToken(gateway, key);
    const result = await gateway.send({ path: '/api/v1/wallets/', headers: bearer(token) });
    expect(result.status).toBe(200);
    expect(gateway.upstream.requests.at(-1)?.headers).toMatchObject({
      'x-gateway-credential': 'token',
      'x-gateway-key-id': key.id,
      'x-gateway-role': key.role,
    });
  });

  it("refuses a token signed with another gateway's secret: 401 invalid_token", async () => {
    const key = gateway.fixtures.keys.admin;
    const other = new TokenService({
      secret: 'another-gateway-0123456789-abcdefghijklmnopq',
      ttlSeconds,
    });
    const result = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(other.issue({ id: key.id, accountId: key.accountId, role: key.role }).token),
    });
    expectErrorBody(result, { status: 401, code: 'invalid_token', message: 'Invalid token' });
    expect(
      gateway.upstream.requests.filter(
        (forwarded) => forwarded.headers['x-gateway-key-id'] === key.id,
      ),
    ).toHaveLength(0);
  });

  describe('ignores what the body says about the token', () => {
    it.each([
      ['role', { role: 'administrator' }],
      ['exp', { exp: 4_102_444_800 }],
      ['sub', { sub: 'key_admin' }],
      ['acct', { acct: 'acct_walled' }],
      [
        'all of them',
        {
          role: 'administrator',
          exp: 4_102_444_800,
          sub: 'key_admin',
          acct: 'acct_walled',
          jti: 'chosen',
        },
      ],
    ] as const)('extra field %s', async (_name, extra) => {
      const key = gateway.fixtures.keys.level1;
      const result = await gateway.send({
        method: 'POST',
        path: GENERATE_TOKEN,
        body: { api_key: key.publishableKey, api_secret: key.secretKey, ...extra },
      });
      expect(result.status).toBe(200);
      const token = result.body?.token as string;
      const { payload } = decode(token);
      expect(payload).toMatchObject({ sub: key.id, acct: key.accountId, role: 'level-1' });
      expect(payload.jti).not.toBe('chosen');
      expect((payload.exp as number) - (payload.iat as number)).toBe(ttlSeconds);
      // Still a level-1 token: a level-2 route refuses it.
      const payout = await gateway.send({
        method: 'POST',
        path: '/api/v1/payouts/',
        headers: bearer(token),
        body: { amount: 1 },
      });
      expectErrorBody(payout, { status: 403, code: 'insufficient_role', message: /level-2/ });
    });

    it('a __proto__ field does not change the role', async () => {
      const key = gateway.fixtures.keys.level1;
      const body = `{"api_key":${JSON.stringify(key.publishableKey)},"api_secret":${JSON.stringify(key.secretKey)},"__proto__":{"role":"administrator"}}`;
      const result = await gateway.send({
        method: 'POST',
        path: GENERATE_TOKEN,
        headers: { 'content-type': 'application/json' },
        body,
      });
      expect(result.status).toBe(200);
      expect(decode(result.body?.token as string).payload.role).toBe('level-1');
    });
  });

  describe('refuses bodies that are not a JSON object with two non-empty strings: 400 invalid_request', () => {
    const pair = (g: TestGateway) => ({
      api_key: g.fixtures.keys.admin.publishableKey,
      api_secret: g.fixtures.keys.admin.secretKey,
    });
    const cases: readonly (readonly [string, (g: TestGateway) => string, RegExp])[] = [
      ['malformed JSON', (g) => JSON.stringify(pair(g)).slice(0, -1), /JSON/],
      ['an empty JSON document', () => '', /object|api_key/],
      ['an array', (g) => JSON.stringify([pair(g)]), /object/],
      ['a number', () => '42', /object/],
      ['a string', (g) => JSON.stringify(JSON.stringify(pair(g))), /object/],
      ['null', () => 'null', /object/],
      ['an empty object', () => '{}', /api_key/],
      ['no api_secret', (g) => JSON.stringify({ api_key: pair(g).api_key }), /api_secret/],
      ['no api_key', (g) => JSON.stringify({ api_secret: pair(g).api_secret }), /api_key/],
      ['an empty api_key', (g) => JSON.stringify({ ...pair(g), api_key: '' }), /api_key/],
      ['an empty api_secret', (g) => JSON.stringify({ ...pair(g), api_secret: '' }), /api_secret/],
      ['a numeric api_key', (g) => JSON.stringify({ ...pair(g), api_key: 1234567890 }), /api_key/],
      ['a numeric api_secret', (g) => JSON.stringify({ ...pair(g), api_secret: 42 }), /api_secret/],
      [
        'an array api_secret',
        (g) => JSON.stringify({ ...pair(g), api_secret: [pair(g).api_secret] }),
        /api_secret/,
      ],
      [
        'an object api_key',
        (g) => JSON.stringify({ ...pair(g), api_key: { value: pair(g).api_key } }),
        /api_key/,
      ],
      ['a null api_secret', (g) => JSON.stringify({ ...pair(g), api_secret: null }), /api_secret/],
    ];

    it.each(cases)('%s', async (_name, body, message) => {
      const text = body(gateway);
      const result = await gateway.send({
        method: 'POST',
        path: GENERATE_TOKEN,
        headers: { 'content-type': 'application/json' },
        ...(text === '' ? {} : { body: text }),
      });
      const error = expectErrorBody(result, { status: 400, code: 'invalid_request', message });
      expect(JSON.stringify(error)).not.toContain(gateway.fixtures.keys.admin.secretKey);
    });
  });

  it.each([
    ['text/plain'],
    ['application/x-www-form-urlencoded'],
    ['multipart/form-data; boundary=x'],
  ])('refuses Content-Type %s with 415 unsupported_media_type', async (contentType) => {
    const key = gateway.fixtures.keys.admin;
    const result = await gateway.send({
      method: 'POST',
      path: GENERATE_TOKEN,
      headers: { 'content-type': contentType },
      body: JSON.stringify({ api_key: key.publishableKey, api_secret: key.secretKey }),
    });
    expectErrorBody(result, { status: 415, code: 'unsupported_media_type' });
  });
});

describe('token expiry on the injectable clock', () => {
  const ttlSeconds = 1800;
  let clock = Date.UTC(2030, 0, 1, 12, 0, 0);
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({ now: () => clock, tokenTtlSeconds: ttlSeconds });
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('a token works until one second before exp and answers 401 "Expired token" from exp on', async () => {
    const issuedAt = clock;
    const token = await exchangeToken(gateway, gateway.fixtures.keys.admin);
    const exp = decode(token).payload.exp as number;
    expect(exp * 1000).toBe(Math.floor(issuedAt / 1000) * 1000 + ttlSeconds * 1000);

    clock = (exp - 1) * 1000;
    expect((await gateway.send({ path: '/api/v1/wallets/', headers: bearer(token) })).status).toBe(
      200,
    );

    const upstreamCalls = gateway.upstream.requests.length;
    for (const at of [exp * 1000, (exp + 3600) * 1000]) {
      clock = at;
      const result = await gateway.send({ path: '/api/v1/wallets/', headers: bearer(token) });
      expectErrorBody(result, { status: 401, code: 'expired_token', message: 'Expired token' });
    }
    expect(gateway.upstream.requests).toHaveLength(upstreamCalls);

    // The caller then requests a new token, which works.
    const fresh = await exchangeToken(gateway, gateway.fixtures.keys.admin);
    expect((await gateway.send({ path: '/api/v1/wallets/', headers: bearer(fresh) })).status).toBe(
      200,
    );
  });
});

describe('a token whose key was revoked', () => {
  it('stops working on a gateway whose keys say the key is revoked (same token secret)', async () => {
    const gateway = await startTestGateway();
    const upstream = await startRecordingUpstream();
    const logs = captureLogs();
    try {
      const { admin, level1 } = gateway.fixtures.keys;
      const adminToken = await exchangeToken(gateway, admin);
      const level1Token = await exchangeToken(gateway, level1);
      expect(
        (await gateway.send({ path: '/api/v1/wallets/', headers: bearer(adminToken) })).status,
      ).toBe(200);

      const document = JSON.parse(
        JSON.stringify(gateway.fixtures.document),
      ) as typeof gateway.fixtures.document;
      const entry = document.accounts
        .flatMap((account) => account.keys as { id: string; revoked?: boolean }[])
        .find((key) => key.id === admin.id);
      if (entry === undefined) throw new Error('fixture key missing');
      entry.revoked = true;
      const revokedApp = createApp({
        keyStore: KeyRing.fromDocument(document, 'revoked fixtures'),
        tokens: new TokenService({ secret: TOKEN_SECRET }),
        upstreamUrl: upstream.url,
        logger: logs.logger,
        limits: DEFAULT_LIMITS,
      });
      try {
        const refused = await request(revokedApp)
          .get('/api/v1/wallets/')
          .set('Authorization', `Bearer ${adminToken}`);
        const answer: HttpAnswer = {
          status: refused.status,
          headers: refused.headers,
          text: refused.text,
        };
        expectErrorBody(answer, { status: 401, code: 'invalid_token', message: 'Invalid token' });
        expect(upstream.requests).toHaveLength(0);

        // The other keys' tokens, minted by the first gateway, still work there.
        const allowed = await request(revokedApp)
          .get('/api/v1/wallets/')
          .set('Authorization', `Bearer ${level1Token}`);
        expect(allowed.status).toBe(200);
        expect(upstream.requests).toHaveLength(1);
        expect(
          findLeaks(logs.lines.join('\n'), [
            ...allSecrets(gateway.fixtures),
            adminToken,
            level1Token,
          ]),
        ).toEqual([]);
      } finally {
        revokedApp.shutdown();
      }
    } finally {
      await upstream.close();
      await gateway.close();
    }
  });
});
