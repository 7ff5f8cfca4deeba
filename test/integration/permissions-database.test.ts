import { randomBytes } from 'node:crypto';
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
 * Restricted keys with `TOLLGATE_DATABASE_URL`: `PATCH /admin/v1/keys/:id` and key
 * creation with permissions on a gateway process, their refusals, a change made on the admin
 * listener of one process measured until a second process on the same PostgreSQL decides with it
 * (within 1 s, for a secret key and a token alike), and the store's own checks: import, export
 * and roll carry the list, a name written by hand past the API fails closed.
 */

const ADMIN_TOKEN = randomBytes(32).toString('base64url');
const PROPAGATION_LIMIT_MS = 1000;

type Gateway = DatabaseGateway;

describeWithPostgres('restricted keys on the database key store', () => {
  let database: TestPostgres | undefined;
  let url: string;
  const processes: NodeProcess[] = [];
  let first: Gateway;
  let second: Gateway;
  const figures: Record<string, number> = {};

  const startProcess = (withAdmin: boolean): Promise<Gateway> =>
    startDatabaseGateway(url, withAdmin ? ADMIN_TOKEN : undefined, processes);

  const admin = adminClient(() => first, ADMIN_TOKEN);

  const wallets = (gateway: Gateway, credential: string): Promise<HttpResult> =>
    httpRequest({
      port: gateway.port,
      path: '/api/v1/wallets/',
      headers: { authorization: `Bearer ${credential}` },
    });

  /** ms until `request()` answers as `wanted` says (fails after 5 s), recorded under `label`. */
  const until = (
    label: string,
    wanted: (answer: HttpResult) => boolean,
    request: () => Promise<HttpResult>,
  ): Promise<HttpResult> => waitUntil(figures, label, wanted, request);

  beforeAll(async () => {
    database = await startTestPostgres();
    url = await database.createDatabase('permissions');
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
      `[permissions-database] a permission change on the first process, in force on the second after: ${Object.entries(
        figures,
      )
        .map(([label, ms]) => `${label} ${ms.toFixed(0)} ms`)
        .join(', ')}\n`,
    );
  });

  it('makes a restricted key, changes its list and role with PATCH, and lists it; a key without one shows null', async () => {
    expect((await admin('POST', '/admin/v1/accounts', { id: 'acct_p' })).status).toBe(201);
    const made = await admin('POST', '/admin/v1/accounts/acct_p/keys', {
      id: 'key_partner',
      role: 'level-1',
      permissions: ['transactions:read', 'wallets:read'],
    });
    expect({ status: made.status, permissions: made.body?.permissions }).toEqual({
      status: 201,
      permissions: ['wallets:read', 'transactions:read'],
    });
    const open = await admin('POST', '/admin/v1/accounts/acct_p/keys', { id: 'key_full' });
    expect(open.body?.permissions).toBeNull();

    const both = await admin('PATCH', '/admin/v1/keys/key_partner', {
      role: 'level-2',
      permissions: ['payouts:write'],
    });
    expect({
      status: both.status,
      role: both.body?.role,
      permissions: both.body?.permissions,
    }).toEqual({ status: 200, role: 'level-2', permissions: ['payouts:write'] });
    const roleOnly = await admin('PATCH', '/admin/v1/keys/key_partner', { role: 'level-3' });
    expect([roleOnly.body?.role, roleOnly.body?.permissions]).toEqual([
      'level-3',
      ['payouts:write'],
    ]);
    const listed = await admin('GET', '/admin/v1/accounts');
    const keys = (listed.body?.accounts as { keys: { id: string; permissions: unknown }[] }[])
      .flatMap((account) => account.keys)
      .map(({ id, permissions }) => ({ id, permissions }));
    expect(keys).toEqual([
      { id: 'key_full', permissions: null },
      { id: 'key_partner', permissions: ['payouts:write'] },
    ]);
    const isPartnerAudit = (entry: Record<string, unknown>): boolean =>
      entry.event === 'admin.audit' && entry.target === 'key_partner';
    // The gateway's log lines reach the pipe after its answers: wait for both PATCHes' lines.
    await first.process.waitForEntry(isPartnerAudit);
    await first.process.waitForEntry(
      isPartnerAudit,
      first.process.entries().findIndex(isPartnerAudit) + 1,
    );
    const audit = first.process.entries().filter(isPartnerAudit);
    expect(audit.map((entry) => entry.action)).toEqual(['keys.update', 'keys.update']);
  });

  it.each([
    [
      { permissions: ['wallets:read', 'payouts:send'] },
      'permissions[1]: key "key_partner": unknown permission "payouts:send"; expected one of wallets:read, transactions:read, payments:read, payouts:write, payouts:approve, otp:confirm, chargebacks:write',
    ],
    [{ permissions: [] }, 'permissions: key "key_partner": an empty list would allow nothing'],
    [
      { permissions: 'wallets:read' },
      'permissions: a list of permissions, each once, or null for all the role allows',
    ],
    [
      { permissions: ['otp:confirm', 'otp:confirm'] },
      'permissions[1]: key "key_partner": permission "otp:confirm" is listed twice',
    ],
    [{ role: 'level-9', permissions: ['otp:confirm'] }, 'role: unknown role "level-9"'],
    // A secret pasted into the wrong field is not sent back.
    [{ role: `sk_test_${'a'.repeat(32)}_abcdef` }, 'role: unknown role value; expected one of'],
    [
      { [`sk_test_${'b'.repeat(32)}_abcdef`]: 1 },
      'unknown field value; expected role, permissions',
    ],
    [{}, 'role or permissions is required'],
    [{ permission: ['otp:confirm'] }, 'unknown field "permission"; expected role, permissions'],
  ])('refuses PATCH %j with 400 naming the fault, changing nothing', async (json, message) => {
    const answer = await admin('PATCH', '/admin/v1/keys/key_partner', json);
    const body = expectErrorBody(answer, { status: 400, code: 'invalid_request' });
    expect(body.message).toContain(message);
    const listed = await admin('GET', '/admin/v1/accounts');
    const partner = (listed.body?.accounts as { keys: { id: string; permissions: unknown }[] }[])
      .flatMap((account) => account.keys)
      .find((key) => key.id === 'key_partner');
    expect(partner?.permissions).toEqual(['payouts:write']);
  });

  it('refuses a restricted key of an unknown name at creation (400, nothing made) and a PATCH of an unknown key (404)', async () => {
    const made = await admin('POST', '/admin/v1/accounts/acct_p/keys', {
      id: 'key_never',
      permissions: ['wallets:write'],
    });
    expect(expectErrorBody(made, { status: 400, code: 'invalid_request' }).message).toContain(
      'key "key_never": unknown permission "wallets:write"',
    );
    expectErrorBody(await admin('PATCH', '/admin/v1/keys/key_nobody', { permissions: null }), {
      status: 404,
      code: 'not_found',
    });
  });

  it('a permission change on the first process is in force on the second within 1 s, for a secret key and its token alike: set, then lifted', async () => {
    const created = await admin('POST', '/admin/v1/accounts/acct_p/keys', { role: 'level-1' });
    expect(created.status).toBe(201);
    const id = String(created.body?.id);
    const secret = String(created.body?.secret_key);
    await until(
      'key',
      (answer) => answer.status === 200,
      () => wallets(second, secret),
    );
    const minted = await httpRequest({
      port: second.port,
      method: 'POST',
      path: '/api/v1/auth/generate-token/',
      json: { api_key: String(created.body?.publishable_key), api_secret: secret },
    });
    const token = String(minted.body?.token);
    expect((await wallets(second, token)).status).toBe(200);

    const set = await admin('PATCH', `/admin/v1/keys/${id}`, {
      permissions: ['transactions:read'],
    });
    expect(set.body?.permissions).toEqual(['transactions:read']);
    const refused = await until(
      'set',
      (answer) => answer.status === 403,
      () => wallets(second, secret),
    );
    expectErrorBody(refused, {
      status: 403,
      code: 'insufficient_permission',
      message: 'This action requires the permission wallets:read',
    });
    // The token reads the same ring: refused too, at once.
    expectErrorBody(await wallets(second, token), { status: 403, code: 'insufficient_permission' });

    expect((await admin('PATCH', `/admin/v1/keys/${id}`, { permissions: null })).status).toBe(200);
    await until(
      'lifted',
      (answer) => answer.status === 200,
      () => wallets(second, token),
    );
    expect((await wallets(second, secret)).status).toBe(200);

    for (const label of ['set', 'lifted']) {
      expect([label, figures[label]! < PROPAGATION_LIMIT_MS]).toEqual([label, true]);
    }
  });

  it('keeps the list when a key is rolled', async () => {
    const rolled = await admin('POST', '/admin/v1/keys/key_partner/roll', { grace_seconds: 60 });
    expect(rolled.status).toBe(201);
    expect(rolled.body?.permissions).toEqual(['payouts:write']);
    expect(rolled.body?.role).toBe('level-3');
  });

  describe('the store', () => {
    const open = async (database: string, logs = captureLogs()): Promise<PgKeyStore> =>
      PgKeyStore.open({
        connectionString: database,
        limitScopes: GATEWAY_LIMIT_SCOPES,
        logger: logs.logger,
        pollIntervalMs: 100,
      });

    it('imports and exports a key with its permissions', async () => {
      const target = await database!.createDatabase('permissions_io');
      const pool = new Pool({ connectionString: target });
      await migrate(pool);
      await pool.end();
      const store = await open(target);
      try {
        const key = {
          id: 'key_io',
          publishableKey: 'pk_test_io_0123456789abcdef',
          secretKeySha256: sha256('sk_io').toString('hex'),
          role: 'administrator',
        };
        await expect(
          store.import({
            accounts: [{ id: 'acct_bad', keys: [{ ...key, permissions: ['refunds:write'] }] }],
          }),
        ).rejects.toThrow('accounts[0].keys[0].permissions[0]: key "key_io": unknown permission');
        const document = {
          accounts: [
            { id: 'acct_io', keys: [{ ...key, permissions: ['otp:confirm', 'wallets:read'] }] },
          ],
        };
        expect(await store.import(document)).toEqual({ accounts: 1, keys: 1 });
        expect([...(store.findBySecretKey('sk_io')?.permissions ?? [])]).toEqual([
          'wallets:read',
          'otp:confirm',
        ]);
        expect((await store.export()).accounts[0]?.keys[0]?.permissions).toEqual([
          'wallets:read',
          'otp:confirm',
        ]);
      } finally {
        await store.close();
      }
    });

    it('holds a key whose stored permissions name one it does not know as revoked, and says why', async () => {
      const target = await database!.createDatabase('permissions_hand');
      const pool = new Pool({ connectionString: target });
      await migrate(pool);
      const logs = captureLogs();
      const store = await open(target, logs);
      try {
        await store.createAccount('acct_hand');
        const key = await store.createKey('acct_hand', { permissions: ['wallets:read'] });
        const other = await store.createKey('acct_hand');
        expect(store.findBySecretKey(key.secretKey)?.revoked).toBe(false);
        await pool.query(`UPDATE keys SET permissions = '{payouts:send}' WHERE id = $1`, [key.id]);
        await store.sync();
        expect(store.findBySecretKey(key.secretKey)?.revoked).toBe(true);
        expect(store.findBySecretKey(other.secretKey)?.revoked).toBe(false);
        const blocked = logs.entries().find((entry) => entry.event === 'keys.key_blocked');
        expect(blocked).toMatchObject({ key: key.id });
        expect(String(blocked?.reason)).toContain(
          `permissions[0]: key "${key.id}": unknown permission "payouts:send"`,
        );
        // A whole build in the worker fails closed the same way, and says so too.
        const freshLogs = captureLogs();
        const fresh = await open(target, freshLogs);
        expect(fresh.findBySecretKey(key.secretKey)?.revoked).toBe(true);
        expect(freshLogs.entries().some((entry) => entry.event === 'keys.key_blocked')).toBe(true);
        await fresh.close();
        await store.setPermissions(key.id, ['transactions:read']);
        expect(store.findBySecretKey(key.secretKey)?.revoked).toBe(false);
        expect([...(store.findBySecretKey(key.secretKey)?.permissions ?? [])]).toEqual([
          'transactions:read',
        ]);
      } finally {
        await store.close();
        await pool.end();
      }
    });
  });
});
