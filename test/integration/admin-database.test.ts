import { randomBytes } from 'node:crypto';
import type { RunningGateway } from '../../gateway/start';
import { sha256 } from '../../lib/keys/key-store';
import { expectErrorBody } from '../helpers/error-body';
import { startGatewayPair } from '../helpers/gateway-pair';
import { captureLogs, type CapturedLogs, findLeaks } from '../helpers/logs';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';
import { type HttpResult, httpRequest } from '../helpers/process';

/**
 * The admin listener with `TOLLGATE_DATABASE_URL`: two gateways as `npm start` runs them on one
 * real PostgreSQL. Every key-management route is called on the admin listener of the first, and
 * each change is measured until the second enforces it on its API listener (within 1 s); then
 * hostile admin input, and writes while the database is down.
 */

const ADMIN_TOKEN = randomBytes(32).toString('base64url');
const PROPAGATION_LIMIT_MS = 1000;

interface IssuedKey {
  readonly id: string;
  readonly secret_key: string;
  readonly publishable_key: string;
}

describeWithPostgres('the admin listener on the database key store, two gateways', () => {
  let server: TestPostgres;
  let first: RunningGateway;
  let second: RunningGateway;
  let logs: CapturedLogs;
  const figures: Record<string, number> = {};

  const portOf = (url: string | undefined): number => Number(new URL(url ?? 'http://x:1').port);
  const admin = (method: string, route: string, json?: unknown): Promise<HttpResult> =>
    httpRequest({
      port: portOf(first.adminUrl),
      method,
      path: route,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      ...(json === undefined ? {} : { json }),
    });
  const onSecond = (route: string, secret: string, method = 'GET'): Promise<HttpResult> =>
    httpRequest({
      port: portOf(second.url),
      method,
      path: route,
      headers: { authorization: `Bearer ${secret}` },
    });

  /** ms until `request()` answers `status` (or one it accepts) on the second gateway (fails after 3 s). */
  const until = async (
    label: string,
    status: number | ((status: number) => boolean),
    request: () => Promise<HttpResult>,
  ): Promise<HttpResult> => {
    const started = performance.now();
    const wanted = typeof status === 'number' ? (answered: number) => answered === status : status;
    for (;;) {
      const answer = await request();
      if (wanted(answer.status)) {
        figures[label] = performance.now() - started;
        return answer;
      }
      if (performance.now() - started > 3000) {
        throw new Error(`${label}: still ${answer.status} ${answer.text} after 3 s`);
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };

  beforeAll(async () => {
    server = await startTestPostgres();
    logs = captureLogs();
    ({ first, second } = await startGatewayPair(server, 'admin', ADMIN_TOKEN, logs.logger));
  }, 60_000);
  afterAll(async () => {
    await second.stop(500);
    await first.stop(500);
    server.destroy();
    process.stdout.write(
      `[admin-database] in force on the second gateway after: ${Object.entries(figures)
        .map(([label, ms]) => `${label} ${ms.toFixed(0)} ms`)
        .join(', ')}\n`,
    );
  });

  let key: IssuedKey;

  it('creates an account and a key; the second gateway accepts the key within 1 s', async () => {
    const account = await admin('POST', '/admin/v1/accounts', { id: 'acct_shop' });
    expect({ status: account.status, body: account.body }).toEqual({
      status: 201,
      body: { id: 'acct_shop', ip_whitelist: null, limits: null },
    });
    const created = await admin('POST', '/admin/v1/accounts/acct_shop/keys', { role: 'level-2' });
    expect(created.status).toBe(201);
    key = created.body as unknown as IssuedKey;
    expect(created.body).toMatchObject({
      account_id: 'acct_shop',
      role: 'level-2',
      revoked: false,
    });
    expect(key.secret_key).toMatch(/^sk_test_/);
    await until('create', 200, () => onSecond('/api/v1/wallets/', key.secret_key));
    expect(figures.create).toBeLessThan(PROPAGATION_LIMIT_MS);
  });

  it('lists accounts and keys without a secret or a digest', async () => {
    const listed = await admin('GET', '/admin/v1/accounts');
    expect(listed.status).toBe(200);
    const accounts = (
      listed.body as { accounts: { id: string; keys: { id: string; created_at: string }[] }[] }
    ).accounts;
    expect(accounts.map((account) => account.id)).toEqual(['acct_shop']);
    expect(accounts[0]?.keys.map((entry) => entry.id)).toEqual([key.id]);
    expect(Date.parse(accounts[0]?.keys[0]?.created_at ?? '')).toBeGreaterThan(Date.now() - 60_000);
    expect(
      findLeaks(listed.text, [key.secret_key, sha256(key.secret_key).toString('hex')]),
    ).toEqual([]);
  });

  it('shows the usage of an account, with or without keys, and answers 404 for an unknown one', async () => {
    expect((await admin('POST', '/admin/v1/accounts', { id: 'acct_keyless' })).status).toBe(201);
    const full = [
      { scope: 'payments', limit: 1500, remaining: 1500, reset_seconds: 60 },
      { scope: 'authenticated', limit: 100, remaining: 100, reset_seconds: 60 },
    ];
    for (const account of ['acct_keyless', 'acct_shop']) {
      const usage = await admin('GET', `/admin/v1/accounts/${account}/usage`);
      expect({ status: usage.status, body: usage.body }).toEqual({
        status: 200,
        body: { account_id: account, scopes: full },
      });
    }
    const unknown = await admin('GET', '/admin/v1/accounts/acct_nobody/usage');
    expectErrorBody(unknown, { status: 404, code: 'not_found' });
  });

  it('a whitelist change and its lifting are in force on the second gateway within 1 s', async () => {
    const set = await admin('PUT', '/admin/v1/accounts/acct_shop/ip-whitelist', {
      entries: ['203.0.113.0/24'],
    });
    expect({ status: set.status, body: set.body }).toEqual({
      status: 200,
      body: { id: 'acct_shop', ip_whitelist: ['203.0.113.0/24'], limits: null },
    });
    const refused = await until('whitelist', 403, () =>
      onSecond('/api/v1/wallets/', key.secret_key),
    );
    expectErrorBody(refused, { status: 403, code: 'ip_not_whitelisted' });
    expect(figures.whitelist).toBeLessThan(PROPAGATION_LIMIT_MS);
    expect(
      (await admin('PUT', '/admin/v1/accounts/acct_shop/ip-whitelist', { entries: null })).status,
    ).toBe(200);
    await until('whitelist lifted', 200, () => onSecond('/api/v1/wallets/', key.secret_key));
  });

  it('a role change is in force on the second gateway within 1 s', async () => {
    const approve = (): Promise<HttpResult> =>
      onSecond('/api/v1/payouts/po_1/approve/', key.secret_key, 'POST');
    expectErrorBody(await approve(), { status: 403, code: 'insufficient_role' });
    const changed = await admin('PATCH', `/admin/v1/keys/${key.id}`, { role: 'level-3' });
    expect(changed.body).toMatchObject({ id: key.id, role: 'level-3' });
    // Past the gateway, the stub upstream answers for itself: it knows no payout po_1.
    const passed = await until('role', (status) => status !== 403, approve);
    expect({ status: passed.status, body: passed.body }).toEqual({
      status: 404,
      body: { error: 'payout not found' },
    });
    expect(figures.role).toBeLessThan(PROPAGATION_LIMIT_MS);
  });

  it('a roll with a 2 s grace: both keys work, then the old one answers expired_api_key and its token dies', async () => {
    const exchanged = await httpRequest({
      port: portOf(second.url),
      method: 'POST',
      path: '/api/v1/auth/generate-token/',
      json: { api_key: key.publishable_key, api_secret: key.secret_key },
    });
    const token = String(exchanged.body?.token);
    const rolled = await admin('POST', `/admin/v1/keys/${key.id}/roll`, { grace_seconds: 2 });
    expect(rolled.status).toBe(201);
    const fresh = rolled.body as unknown as IssuedKey & { previous: { expires_at: string } };
    expect(fresh.id).not.toBe(key.id);
    await until('roll', 200, () => onSecond('/api/v1/wallets/', fresh.secret_key));
    expect(figures.roll).toBeLessThan(PROPAGATION_LIMIT_MS);
    expect((await onSecond('/api/v1/wallets/', key.secret_key)).status).toBe(200);
    expect((await onSecond('/api/v1/wallets/', token)).status).toBe(200);
    await new Promise((resolve) =>
      setTimeout(resolve, Date.parse(fresh.previous.expires_at) - Date.now() + 50),
    );
    expectErrorBody(await onSecond('/api/v1/wallets/', key.secret_key), {
      status: 401,
      code: 'expired_api_key',
    });
    expectErrorBody(await onSecond('/api/v1/wallets/', token), {
      status: 401,
      code: 'invalid_token',
    });
    expect((await onSecond('/api/v1/wallets/', fresh.secret_key)).status).toBe(200);
    key = fresh;
  });

  it('a revocation is in force on the second gateway within 1 s, for the key and its tokens', async () => {
    const exchanged = await httpRequest({
      port: portOf(second.url),
      method: 'POST',
      path: '/api/v1/auth/generate-token/',
      json: { api_key: key.publishable_key, api_secret: key.secret_key },
    });
    const token = String(exchanged.body?.token);
    const revoked = await admin('POST', `/admin/v1/keys/${key.id}/revoke`);
    expect(revoked.body).toMatchObject({ id: key.id, revoked: true });
    await until('revoke', 401, () => onSecond('/api/v1/wallets/', key.secret_key));
    expect(figures.revoke).toBeLessThan(PROPAGATION_LIMIT_MS);
    expectErrorBody(await onSecond('/api/v1/wallets/', token), {
      status: 401,
      code: 'invalid_token',
    });
  });

  it('refuses hostile input with a clear 4xx and changes nothing', async () => {
    const cases: [string, string, unknown, number, string, RegExp?][] = [
      [
        'POST',
        '/admin/v1/accounts',
        { id: 'acct_x', ipWhitelist: ['10.0.0.0/8'] },
        400,
        'invalid_request',
        /unknown field "ipWhitelist"/,
      ],
      ['POST', '/admin/v1/accounts', { id: "x'; DROP TABLE keys;--" }, 400, 'invalid_request'],
      ['POST', '/admin/v1/accounts', { id: 'acct_shop' }, 409, 'conflict'],
      [
        'POST',
        '/admin/v1/accounts',
        { id: 'acct_y', ip_whitelist: ['10.0.0.1/33'] },
        400,
        'invalid_request',
        /10\.0\.0\.1\/33/,
      ],
      ['PUT', '/admin/v1/accounts/acct_shop/ip-whitelist', {}, 400, 'invalid_request', /entries/],
      ['PUT', '/admin/v1/accounts/acct_shop/ip-whitelist', { entries: [] }, 400, 'invalid_request'],
      [
        'POST',
        '/admin/v1/accounts/acct_shop/keys',
        { role: 'owner' },
        400,
        'invalid_request',
        /role/,
      ],
      ['POST', `/admin/v1/accounts/acct_nope/keys`, {}, 404, 'not_found'],
      [
        'POST',
        `/admin/v1/keys/${encodeURIComponent("k' OR '1'='1")}/revoke`,
        undefined,
        404,
        'not_found',
      ],
      [
        'POST',
        `/admin/v1/keys/${key.id}/roll`,
        { grace_seconds: 604_801 },
        400,
        'invalid_request',
        /grace_seconds/,
      ],
      ['POST', `/admin/v1/keys/${key.id}/roll`, { grace_seconds: 5 }, 409, 'conflict'],
      ['PATCH', `/admin/v1/keys/${key.id}`, { role: 'level-1', extra: 1 }, 400, 'invalid_request'],
    ];
    for (const [method, route, json, status, code, message] of cases) {
      const answer = await admin(method, route, json);
      const body = expectErrorBody(answer, { status, code });
      if (message !== undefined) expect(body.message).toMatch(message);
    }
    const malformed = await httpRequest({
      port: portOf(first.adminUrl),
      method: 'POST',
      path: '/admin/v1/accounts',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      jsonText: '{"id": "acct_half"',
    });
    expectErrorBody(malformed, { status: 400, code: 'invalid_request' });
    const oversized = await admin('POST', '/admin/v1/accounts', {
      id: 'acct_big',
      pad: 'x'.repeat(20_000),
    });
    expectErrorBody(oversized, { status: 413, code: 'payload_too_large' });
    const listed = await admin('GET', '/admin/v1/accounts');
    expect(
      (listed.body as { accounts: { id: string }[] }).accounts.map((account) => account.id),
    ).toEqual(['acct_keyless', 'acct_shop']);
    expect(findLeaks(logs.lines.join('\n'), [ADMIN_TOKEN])).toEqual([]);
  });

  it('while the database is down: writes answer 503, keys in force keep working', async () => {
    const made = (await admin('POST', '/admin/v1/accounts/acct_shop/keys', { role: 'level-1' }))
      .body as unknown as IssuedKey;
    await until('create before outage', 200, () => onSecond('/api/v1/wallets/', made.secret_key));
    server.stop();
    const write = await admin('POST', '/admin/v1/accounts', { id: 'acct_during_outage' });
    expectErrorBody(write, { status: 503, code: 'upstream_unavailable' });
    // Logged with the failure's class, never its message (which may name the server).
    expect(logs.entries()).toContainEqual(
      expect.objectContaining({
        event: 'admin.database_unavailable',
        error: expect.objectContaining({ name: expect.any(String) as unknown }) as unknown,
      }),
    );
    const served = await onSecond('/api/v1/wallets/', made.secret_key);
    expect(served.status).toBe(200);
    server.start();
  });
});
