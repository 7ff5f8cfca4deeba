import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { Pool } from 'pg';
import { GATEWAY_LIMIT_SCOPES } from '../../gateway/keys-cli/limit-scopes';
import { sha256 } from '../../lib/keys/key-store';
import { PgKeyStore } from '../../lib/keys/pg-key-store';
import { migrate } from '../../lib/keys/pg-schema';
import { expectErrorBody } from '../helpers/error-body';
import { captureLogs } from '../helpers/logs';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';
import {
  adminClient,
  type DatabaseGateway,
  startDatabaseGateway,
  until as waitUntil,
} from '../helpers/database-gateways';
import { type HttpResult, httpRequest, type NodeProcess } from '../helpers/process';

/**
 * Accounts' limit overrides with `TOLLGATE_DATABASE_URL`: the admin route and its refusals on
 * a gateway process, a change made on the admin listener of one process measured until a second
 * process on the same PostgreSQL decides with it (within 1 s), and the store's own checks: import
 * and export carry limits, a value written by hand past the API fails closed.
 */

const ADMIN_TOKEN = randomBytes(32).toString('base64url');
const PROPAGATION_LIMIT_MS = 1000;

type Gateway = DatabaseGateway;

function quotaOf(headers: IncomingHttpHeaders, scope: string): number | undefined {
  const value = headers['ratelimit-policy'];
  const text = Array.isArray(value) ? value.join(', ') : (value ?? '');
  const match = new RegExp(`"${scope}"; q=(\\d+);`).exec(text);
  return match === null ? undefined : Number(match[1]);
}

describeWithPostgres('account limits on the database key store', () => {
  let database: TestPostgres | undefined;
  let url: string;
  const processes: NodeProcess[] = [];
  let first: Gateway;
  let second: Gateway;
  const figures: Record<string, number> = {};

  const startProcess = (withAdmin: boolean): Promise<Gateway> =>
    startDatabaseGateway(url, withAdmin ? ADMIN_TOKEN : undefined, processes);

  const admin = adminClient(() => first, ADMIN_TOKEN);

  const wallets = (gateway: Gateway, secret: string): Promise<HttpResult> =>
    httpRequest({
      port: gateway.port,
      path: '/api/v1/wallets/',
      headers: { authorization: `Bearer ${secret}` },
    });

  /** ms until `request()` answers as `wanted` says (fails after 5 s), recorded under `label`. */
  const until = (
    label: string,
    wanted: (answer: HttpResult) => boolean,
    request: () => Promise<HttpResult>,
  ): Promise<HttpResult> => waitUntil(figures, label, wanted, request);

  beforeAll(async () => {
    database = await startTestPostgres();
    url = await database.createDatabase('limits');
    const pool = new Pool({ connectionString: url });
    await migrate(pool);
    await pool.end();
    first = await startProcess(true);
    second = await startProcess(false);
  }, 90_000);

  afterAll(async () => {
    await Promise.all(processes.map((child) => child.stop()));
    database?.destroy();
    process.stdout.write(
      `[account-limits-database] a limit change on the first process, in force on the second after: ${Object.entries(
        figures,
      )
        .map(([label, ms]) => `${label} ${ms.toFixed(0)} ms`)
        .join(', ')}\n`,
    );
  });

  it('takes limits when an account is made and lists them; an account without shows null', async () => {
    const made = await admin('POST', '/admin/v1/accounts', {
      id: 'acct_big',
      limits: { payments: 6000, authenticated: 300 },
    });
    expect({ status: made.status, body: made.body }).toEqual({
      status: 201,
      body: {
        id: 'acct_big',
        ip_whitelist: null,
        limits: { payments: 6000, authenticated: 300 },
      },
    });
    expect((await admin('POST', '/admin/v1/accounts', { id: 'acct_fleet' })).body).toEqual({
      id: 'acct_fleet',
      ip_whitelist: null,
      limits: null,
    });
    const listed = await admin('GET', '/admin/v1/accounts');
    expect(listed.status).toBe(200);
    expect(
      (listed.body as { accounts: { id: string; limits: unknown }[] }).accounts.map(
        ({ id, limits }) => ({ id, limits }),
      ),
    ).toEqual([
      { id: 'acct_big', limits: { authenticated: 300, payments: 6000 } },
      { id: 'acct_fleet', limits: null },
    ]);
  });

  it.each<[string, unknown, number, string, RegExp]>([
    [
      'an unknown scope',
      { limits: { refunds: 5 } },
      400,
      'invalid_request',
      /limits\.refunds: account "acct_fleet": unknown scope "refunds"/,
    ],
    [
      'the per-IP public scope',
      { limits: { public: 5 } },
      400,
      'invalid_request',
      /limits\.public: account "acct_fleet": scope "public" is counted per client IP/,
    ],
    [
      "a per-IP scope of the gateway's",
      { limits: { 'checkout-read': 5 } },
      400,
      'invalid_request',
      /account "acct_fleet": scope "checkout-read" is counted per client IP/,
    ],
    [
      '0',
      { limits: { payments: 0 } },
      400,
      'invalid_request',
      /^limits\.payments: a whole number of requests per minute from 1 to 1000000$/,
    ],
    [
      '1,000,001',
      { limits: { payments: 1_000_001 } },
      400,
      'invalid_request',
      /^limits\.payments: a whole number of requests per minute from 1 to 1000000$/,
    ],
    [
      'a fraction',
      { limits: { authenticated: 1.5 } },
      400,
      'invalid_request',
      /^limits\.authenticated: a whole number of requests per minute from 1 to 1000000$/,
    ],
    [
      'a string',
      { limits: { payments: '10' } },
      400,
      'invalid_request',
      /^limits\.payments: a whole number of requests per minute from 1 to 1000000$/,
    ],
    [
      'a list',
      { limits: [10] },
      400,
      'invalid_request',
      /^limits: an object of scope name to requests per minute, or null for the defaults$/,
    ],
    [
      'a number',
      { limits: 10 },
      400,
      'invalid_request',
      /^limits: an object of scope name to requests per minute, or null for the defaults$/,
    ],
    ['no limits field', {}, 400, 'invalid_request', /^limits: an object of scope name/],
    [
      'another field',
      { limits: null, entries: [] },
      400,
      'invalid_request',
      /unknown field "entries"; expected limits/,
    ],
  ])(
    'PUT /limits refuses %s with a 400 naming the scope, or the account with its scope',
    async (_, json, status, code, message) => {
      const answer = await admin('PUT', '/admin/v1/accounts/acct_fleet/limits', json);
      const body = expectErrorBody(answer, { status, code });
      expect(body.message).toMatch(message);
    },
  );

  it('refuses limits of an unknown account (404) and on POST /accounts (400, nothing made)', async () => {
    const missing = await admin('PUT', '/admin/v1/accounts/acct_nope/limits', {
      limits: { payments: 5 },
    });
    expectErrorBody(missing, { status: 404, code: 'not_found' });
    const refused = await admin('POST', '/admin/v1/accounts', {
      id: 'acct_bad',
      limits: { public: 5 },
    });
    const body = expectErrorBody(refused, { status: 400, code: 'invalid_request' });
    expect(body.message).toMatch(/account "acct_bad": scope "public"/);
    const listed = await admin('GET', '/admin/v1/accounts');
    expect(
      (listed.body as { accounts: { id: string }[] }).accounts.map((account) => account.id),
    ).toEqual(['acct_big', 'acct_fleet']);
  });

  it('a limit change on the first process is in force on the second within 1 s: lowered, raised, back to the default', async () => {
    const created = await admin('POST', '/admin/v1/accounts/acct_fleet/keys', {
      role: 'level-2',
    });
    expect(created.status).toBe(201);
    const secret = String(created.body?.secret_key);
    const ready = await until(
      'key',
      (answer) => answer.status === 200,
      () => wallets(second, secret),
    );
    expect(quotaOf(ready.headers, 'payments')).toBe(1500);

    const lowered = await admin('PUT', '/admin/v1/accounts/acct_fleet/limits', {
      limits: { payments: 1 },
    });
    expect({ status: lowered.status, body: lowered.body }).toEqual({
      status: 200,
      body: { id: 'acct_fleet', ip_whitelist: null, limits: { payments: 1 } },
    });
    // The second has counted at least one request this window: payments 1 refuses it.
    const refused = await until(
      'lowered',
      (answer) => answer.status === 429,
      () => wallets(second, secret),
    );
    expectErrorBody(refused, { status: 429, code: 'rate_limited' });
    expect(quotaOf(refused.headers, 'payments')).toBe(1);

    expect(
      (await admin('PUT', '/admin/v1/accounts/acct_fleet/limits', { limits: { payments: 1000 } }))
        .status,
    ).toBe(200);
    const raised = await until(
      'raised',
      (answer) => answer.status === 200,
      () => wallets(second, secret),
    );
    expect(quotaOf(raised.headers, 'payments')).toBe(1000);

    const reset = await admin('PUT', '/admin/v1/accounts/acct_fleet/limits', { limits: null });
    expect(reset.body).toEqual({ id: 'acct_fleet', ip_whitelist: null, limits: null });
    await until(
      'back to the default',
      (answer) => quotaOf(answer.headers, 'payments') === 1500,
      () => wallets(second, secret),
    );

    for (const label of ['lowered', 'raised', 'back to the default']) {
      expect([label, figures[label]! < PROPAGATION_LIMIT_MS]).toEqual([label, true]);
    }
  });

  describe('the store', () => {
    const open = async (database: string, logs = captureLogs()): Promise<PgKeyStore> =>
      PgKeyStore.open({
        connectionString: database,
        limitScopes: GATEWAY_LIMIT_SCOPES,
        logger: logs.logger,
        pollIntervalMs: 100,
      });

    it('imports and exports limits with the account', async () => {
      const target = await database!.createDatabase('limits_io');
      const pool = new Pool({ connectionString: target });
      await migrate(pool);
      await pool.end();
      const store = await open(target);
      try {
        const document = {
          accounts: [
            {
              id: 'acct_io',
              limits: { payments: 42 },
              keys: [
                {
                  id: 'key_io',
                  publishableKey: 'pk_test_io_0123456789abcdef',
                  secretKeySha256: sha256('sk_io').toString('hex'),
                  role: 'administrator',
                },
              ],
            },
          ],
        };
        await expect(
          store.import({
            accounts: [{ ...document.accounts[0], id: 'acct_other', limits: { public: 1 } }],
          }),
        ).rejects.toThrow('accounts[0].limits.public: account "acct_other": scope "public"');
        expect(await store.import(document)).toEqual({ accounts: 1, keys: 1 });
        expect(store.findBySecretKey('sk_io')?.limits).toEqual({ payments: 42 });
        expect((await store.export()).accounts[0]?.limits).toEqual({ payments: 42 });
      } finally {
        await store.close();
      }
    });

    it('holds the keys of an account whose stored limits it would refuse as revoked, and says why', async () => {
      const target = await database!.createDatabase('limits_hand');
      const pool = new Pool({ connectionString: target });
      await migrate(pool);
      const logs = captureLogs();
      const store = await open(target, logs);
      try {
        await store.createAccount('acct_hand', undefined, { payments: 5 });
        const key = await store.createKey('acct_hand');
        expect(store.findBySecretKey(key.secretKey)).toMatchObject({
          revoked: false,
          limits: { payments: 5 },
        });
        await pool.query(
          `UPDATE accounts SET limits = '{"checkout-create": 5}' WHERE id = 'acct_hand'`,
        );
        await store.sync();
        expect(store.findBySecretKey(key.secretKey)?.revoked).toBe(true);
        const blocked = logs.entries().find((entry) => entry.event === 'keys.account_blocked');
        expect(blocked).toMatchObject({ account: 'acct_hand' });
        expect(String(blocked?.reason)).toContain(
          'account "acct_hand": scope "checkout-create" is counted per client IP',
        );
        // A whole build in the worker fails closed the same way.
        const fresh = await open(target);
        expect(fresh.findBySecretKey(key.secretKey)?.revoked).toBe(true);
        await fresh.close();
        await store.setLimits('acct_hand', { payments: 7 });
        expect(store.findBySecretKey(key.secretKey)).toMatchObject({
          revoked: false,
          limits: { payments: 7 },
        });
      } finally {
        await store.close();
        await pool.end();
      }
    });
  });
});
