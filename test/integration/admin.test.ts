import { randomBytes } from 'node:crypto';
import { loadConfig } from '../../gateway/config';
import { type RunningGateway, startGateway } from '../../gateway/start';
import { ConfigurationError } from '../../lib/errors';
import { sha256 } from '../../lib/keys/key-store';
import { type AdminGateway, startAdminGateway } from '../helpers/admin-gateway';
import { allowedMethods, expectErrorBody } from '../helpers/error-body';
import { createFixtures, TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs, type CapturedLogs, findLeaks } from '../helpers/logs';
import { type HttpResult, httpRequest } from '../helpers/process';

/**
 * The admin listener with a keys file, as `npm start` runs it: its own port on
 * loopback, the key-management routes behind the admin token (digest compared, wrong tokens
 * throttled), reads answered from the keys in force, writes refused with 409, every request
 * audited, nothing secret in an answer or a log line.
 */

const ADMIN_TOKEN = randomBytes(32).toString('base64url');
const WRITES: readonly [string, string, unknown][] = [
  ['POST', '/admin/v1/accounts', { id: 'acct_new' }],
  ['PUT', '/admin/v1/accounts/acct_open/ip-whitelist', { entries: ['10.0.0.0/8'] }],
  ['POST', '/admin/v1/accounts/acct_open/keys', { role: 'level-1' }],
  ['PATCH', '/admin/v1/keys/key_l1', { role: 'level-2' }],
  ['POST', '/admin/v1/keys/key_l1/roll', { grace_seconds: 60 }],
  ['POST', '/admin/v1/keys/key_l1/revoke', undefined],
];

interface UsageBody {
  readonly account_id: string;
  readonly scopes: readonly {
    scope: string;
    limit: number;
    remaining: number;
    reset_seconds: number;
  }[];
}

function portOf(url: string | undefined): number {
  if (url === undefined) throw new Error('no admin listener');
  return Number(new URL(url).port);
}

describe('the admin listener with a keys file', () => {
  const fixtures = createFixtures();
  let started: AdminGateway;
  let gateway: RunningGateway;
  let logs: CapturedLogs;
  let port: number;

  const admin = (
    method: string,
    route: string,
    options: { token?: string; json?: unknown; from?: string } = {},
  ): Promise<HttpResult> =>
    httpRequest({
      port,
      method,
      path: route,
      headers: options.token === undefined ? {} : { authorization: `Bearer ${options.token}` },
      ...(options.json === undefined ? {} : { json: options.json }),
      ...(options.from === undefined ? {} : { from: options.from }),
    });

  beforeAll(async () => {
    logs = captureLogs();
    started = await startAdminGateway(fixtures.document, ADMIN_TOKEN, logs.logger);
    gateway = started.gateway;
    port = started.adminPort;
  });
  afterAll(async () => {
    await started.stop();
  });

  it('listens on loopback, on its own port', () => {
    expect(new URL(gateway.adminUrl ?? '').hostname).toBe('127.0.0.1');
    expect(port).not.toBe(Number(new URL(gateway.url).port));
  });

  it('lists every account and key in force, never a secret or its digest', async () => {
    const answer = await admin('GET', '/admin/v1/accounts', { token: ADMIN_TOKEN });
    expect(answer.status).toBe(200);
    expect(answer.headers['cache-control']).toBe('no-store');
    const accounts = (
      answer.body as {
        accounts: { id: string; ip_whitelist: unknown; keys: { id: string; revoked: boolean }[] }[];
      }
    ).accounts;
    expect(accounts.map((account) => account.id)).toEqual(['acct_open', 'acct_walled']);
    const walled = accounts.find((account) => account.id === 'acct_walled');
    expect(walled?.ip_whitelist).toEqual(['127.0.0.2/32', '127.0.10.0/24', '2001:db8::/32']);
    expect(accounts[0]?.ip_whitelist).toBeNull();
    const keyIds = accounts.flatMap((account) => account.keys.map((key) => key.id)).sort();
    expect(keyIds).toEqual(
      Object.values(fixtures.keys)
        .map((key) => key.id)
        .sort(),
    );
    const revoked = accounts[0]?.keys.find((key) => key.id === fixtures.keys.revoked.id);
    expect(revoked).toMatchObject({
      revoked: true,
      role: 'administrator',
      expires_at: null,
      permissions: null,
    });
    expect(Object.keys(revoked ?? {}).sort()).toEqual([
      'created_at',
      'expires_at',
      'id',
      'last_used_at',
      'permissions',
      'publishable_key',
      'revoked',
      'revoked_at',
      'role',
    ]);
    const secrets = Object.values(fixtures.keys).flatMap((key) => [
      key.secretKey,
      sha256(key.secretKey).toString('hex'),
    ]);
    expect(findLeaks(answer.text, secrets)).toEqual([]);
  });

  it.each(WRITES)(
    'refuses %s %s with 409 conflict: a keys file is read-only',
    async (method, route, json) => {
      const answer = await admin(method, route, { token: ADMIN_TOKEN, json });
      const body = expectErrorBody(answer, { status: 409, code: 'conflict' });
      expect(body.message).toMatch(/keys file/);
    },
  );

  it('refuses a missing or wrong token with 401 before anything else, writes included', async () => {
    expectErrorBody(await admin('GET', '/admin/v1/accounts'), {
      status: 401,
      code: 'missing_credentials',
    });
    expectErrorBody(
      await admin('POST', '/admin/v1/keys/key_l1/revoke', { token: `${ADMIN_TOKEN}x` }),
      {
        status: 401,
        code: 'invalid_token',
      },
    );
    // An API key is not the admin token.
    expectErrorBody(
      await admin('GET', '/admin/v1/accounts', { token: fixtures.keys.admin.secretKey }),
      {
        status: 401,
        code: 'invalid_token',
      },
    );
  });

  it('throttles wrong tokens per client address: the 21st attempt, and then the right one, get 429', async () => {
    const from = '127.0.77.1';
    for (let attempt = 0; attempt < 20; attempt++) {
      const wrong = await admin('GET', '/admin/v1/accounts', { token: `wrong-${attempt}`, from });
      expect(wrong.status).toBe(401);
    }
    expectErrorBody(await admin('GET', '/admin/v1/accounts', { token: ADMIN_TOKEN, from }), {
      status: 429,
      code: 'rate_limited',
    });
    const other = await admin('GET', '/admin/v1/accounts', {
      token: ADMIN_TOKEN,
      from: '127.0.77.2',
    });
    expect(other.status).toBe(200);
  });

  it("shows an account's use of each per-account scope from the counters that decide, spending nothing", async () => {
    const main = portOf(gateway.url);
    const spent = 3;
    for (let n = 0; n < spent; n++) {
      const answer = await httpRequest({
        port: main,
        path: '/api/v1/transactions/',
        headers: { authorization: `Bearer ${fixtures.keys.level2.secretKey}` },
      });
      expect(answer.status).toBe(200);
    }
    const usage = async (): Promise<UsageBody> => {
      const answer = await admin('GET', '/admin/v1/accounts/acct_open/usage', {
        token: ADMIN_TOKEN,
      });
      expect(answer.status).toBe(200);
      expect(answer.headers['cache-control']).toBe('no-store');
      return answer.body as unknown as UsageBody;
    };
    const first = await usage();
    expect(first.account_id).toBe('acct_open');
    expect(first.scopes.map((scope) => scope.scope)).toEqual(['payments', 'authenticated']);
    expect(first.scopes[0]).toEqual({
      scope: 'payments',
      limit: 1500,
      remaining: 1500,
      reset_seconds: 60,
    });
    expect(first.scopes[1]).toMatchObject({ limit: 100, remaining: 100 - spent });
    expect(first.scopes[1]?.reset_seconds).toBeGreaterThan(0);
    expect(first.scopes[1]?.reset_seconds).toBeLessThanOrEqual(60);
    // Reading spends nothing: a second read shows the same.
    const second = await usage();
    expect(
      second.scopes.map(({ scope, limit, remaining }) => ({ scope, limit, remaining })),
    ).toEqual(first.scopes.map(({ scope, limit, remaining }) => ({ scope, limit, remaining })));
  });

  it('answers 404 for the usage of an unknown account, and 401 without the token', async () => {
    const unknown = await admin('GET', '/admin/v1/accounts/acct_nobody/usage', {
      token: ADMIN_TOKEN,
    });
    expectErrorBody(unknown, { status: 404, code: 'not_found' });
    const anonymous = await admin('GET', '/admin/v1/accounts/acct_open/usage');
    expectErrorBody(anonymous, { status: 401, code: 'missing_credentials' });
  });

  it('answers 404 for an unknown path and 405 with Allow for another method', async () => {
    expectErrorBody(await admin('GET', '/admin/v1/nowhere', { token: ADMIN_TOKEN }), {
      status: 404,
      code: 'not_found',
    });
    const wrongMethod = await admin('DELETE', '/admin/v1/accounts', { token: ADMIN_TOKEN });
    expectErrorBody(wrongMethod, { status: 405, code: 'method_not_allowed' });
    expect(allowedMethods(wrongMethod.headers)).toEqual(['GET', 'HEAD', 'POST']);
  });

  it('is not served by the API listener', async () => {
    const answer = await httpRequest({
      port: Number(new URL(gateway.url).port),
      path: '/admin/v1/accounts',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expectErrorBody(answer, { status: 404, code: 'not_found' });
  });

  it('audits every admin request with its action, target and outcome, never the token', async () => {
    logs.clear();
    await admin('POST', '/admin/v1/keys/key_l2/revoke', { token: ADMIN_TOKEN });
    await admin('GET', '/admin/v1/accounts', { token: 'not-the-token' });
    const audit = logs.entries().filter((entry) => entry.event === 'admin.audit');
    expect(
      audit.map(({ action, target, outcome, status }) => ({ action, target, outcome, status })),
    ).toEqual([
      { action: 'keys.revoke', target: 'key_l2', outcome: 'refused', status: 409 },
      { action: 'accounts.list', target: null, outcome: 'refused', status: 401 },
    ]);
    expect(findLeaks(logs.lines.join('\n'), [ADMIN_TOKEN, 'not-the-token'])).toEqual([]);
  });
});

describe('the admin listener without an admin token', () => {
  it('answers 404 on every key-management route, as if it did not exist', async () => {
    const logs = captureLogs();
    const gateway = await startGateway(
      loadConfig({ PORT: '0', TOLLGATE_ADMIN_PORT: '0', TOLLGATE_TOKEN_SECRET: TOKEN_SECRET }),
      { logger: logs.logger, print: () => undefined },
    );
    try {
      const port = portOf(gateway.adminUrl);
      for (const [method, route] of [
        ['GET', '/admin/v1/accounts'],
        ...WRITES.map(([m, r]) => [m, r]),
      ]) {
        expectErrorBody(await httpRequest({ port, method, path: route ?? '' }), {
          status: 404,
          code: 'not_found',
        });
      }
    } finally {
      await gateway.stop(1000);
    }
  });
});

describe('admin listener configuration', () => {
  it.each([
    [
      { TOLLGATE_ADMIN_PORT: '9090', TOLLGATE_ADMIN_TOKEN_SHA256: 'ABC' },
      /^TOLLGATE_ADMIN_TOKEN_SHA256 must be 64 lowercase hex/,
    ],
    [{ TOLLGATE_ADMIN_TOKEN_SHA256: '0'.repeat(64) }, /^TOLLGATE_ADMIN_PORT is required/],
    [{ TOLLGATE_ADMIN_HOST: '0.0.0.0' }, /^TOLLGATE_ADMIN_PORT is required/],
    [{ TOLLGATE_ADMIN_PORT: '8080' }, /^TOLLGATE_ADMIN_PORT must differ from PORT/],
    [
      { TOLLGATE_ADMIN_PORT: '9090', TOLLGATE_ADMIN_HOST: 'not an address' },
      /^TOLLGATE_ADMIN_HOST is not an address/,
    ],
  ])('refuses %j', (env, expected) => {
    expect(() => loadConfig({ TOLLGATE_TOKEN_SECRET: TOKEN_SECRET, ...env })).toThrow(
      ConfigurationError,
    );
    expect(() => loadConfig({ TOLLGATE_TOKEN_SECRET: TOKEN_SECRET, ...env })).toThrow(expected);
  });

  it('defaults to loopback', () => {
    expect(
      loadConfig({ TOLLGATE_TOKEN_SECRET: TOKEN_SECRET, TOLLGATE_ADMIN_PORT: '9090' }).admin,
    ).toEqual({
      port: 9090,
      host: '127.0.0.1',
      tokenSha256: undefined,
    });
  });
});
