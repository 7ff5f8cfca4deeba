import { readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Pool } from 'pg';
import { migrate } from '../../lib/keys/pg-schema';
import {
  docBlock,
  keysCommand,
  REAP_BACKGROUND,
  runBash,
  workDirectory,
} from '../helpers/doc-blocks';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';
import { freePort } from '../helpers/redis';

/**
 * The guides' blocks that need PostgreSQL run as written under `bash -euo pipefail`, against a real
 * server: docs/keys.md, "Operating keys", step 3 (a gateway with the admin listener, started from
 * the built `dist/`) then step 4 (the key command and every admin route), and the per-account
 * limits, usage and restricted-key blocks of docs/limits.md and docs/keys.md. The test does steps
 * 1 and 2 itself (a migrated database in `TOLLGATE_DATABASE_URL`) and names `tollgate-keys`; the
 * admin port, 9090 in the guides, is a free one.
 */

describeWithPostgres("the guides' walk-throughs of keys on PostgreSQL", () => {
  let server: TestPostgres;
  const pools: Pool[] = [];
  const directories: string[] = [];

  beforeAll(async () => {
    server = await startTestPostgres();
  }, 60_000);
  afterAll(async () => {
    for (const pool of pools) await pool.end();
    server.destroy();
    for (const directory of directories) rmSync(directory, { recursive: true, force: true });
  });

  /** A migrated database (step 2), a directory, and a script starting with steps 1 and 3. */
  async function setUp(
    name: string,
  ): Promise<{ url: string; pool: Pool; directory: string; prelude: string }> {
    const url = await server.createDatabase(name);
    const pool = new Pool({ connectionString: url });
    pools.push(pool);
    await migrate(pool);
    const directory = workDirectory();
    directories.push(directory);
    const [port, adminPort] = [await freePort(), await freePort()];
    const prelude = [
      REAP_BACKGROUND,
      keysCommand(),
      `export TOLLGATE_DATABASE_URL=${JSON.stringify(url)}`,
      `export PORT=${port} LOG_LEVEL=warn`,
      docBlock('operating-keys-gateway').code.replaceAll('9090', String(adminPort)),
    ].join('\n');
    return { url, pool, directory, prelude };
  }

  async function run(script: string, directory: string): Promise<string> {
    writeFileSync(path.join(directory, 'walk-through.sh'), script);
    const result = await runBash(script, directory, {}, 120_000);
    if (result.code !== 0)
      throw new Error(`exit ${result.code}\n${result.stdout}\n${result.stderr}`);
    expect(result.stderr).toBe('');
    return result.stdout;
  }

  it('runs steps 3 and 4 of operating keys as written, and the database ends as the comments say', async () => {
    const { pool, directory, prelude } = await setUp('operating');
    const stdout = await run(
      `${prelude}\n${docBlock('operating-keys-database').code}\n`,
      directory,
    );
    const result = { stdout };
    const keys = await pool.query<{
      id: string;
      account_id: string;
      role: string;
      revoked: boolean;
      expires: boolean;
      permissions: string[] | null;
    }>(
      `SELECT id, account_id, role, revoked_at IS NOT NULL AS revoked, expires_at IS NOT NULL AS expires,
       permissions FROM keys ORDER BY account_id, created_at`,
    );
    const byAccount = (account: string) =>
      keys.rows
        .filter((row) => row.account_id === account)
        .map(({ role, revoked, expires, permissions }) => ({
          role,
          revoked,
          expires,
          permissions,
        }));
    // key_shop: level-3, restricted then unrestricted, rolled (1 h grace) then revoked; its
    // replacement active.
    expect(byAccount('acct_shop')).toEqual([
      { role: 'level-3', revoked: true, expires: true, permissions: null },
      { role: 'level-3', revoked: false, expires: false, permissions: null },
    ]);
    expect(keys.rows.find((row) => row.account_id === 'acct_shop')?.id).toBe('key_shop');
    expect(byAccount('acct_legacy')).toEqual([
      { role: 'administrator', revoked: false, expires: false, permissions: null },
    ]);
    // key_market: made level-1, set to level-2, restricted to wallets:read, rolled and revoked;
    // its replacement level-2 and restricted alike.
    expect(byAccount('acct_market')).toEqual([
      { role: 'level-2', revoked: true, expires: true, permissions: ['wallets:read'] },
      { role: 'level-2', revoked: false, expires: false, permissions: ['wallets:read'] },
    ]);
    // acct_shop's limits set and put back by the key command; acct_market's set with curl.
    const accounts = await pool.query('SELECT id, ip_whitelist, limits FROM accounts ORDER BY id');
    expect(accounts.rows).toEqual([
      { id: 'acct_legacy', ip_whitelist: null, limits: null },
      { id: 'acct_market', ip_whitelist: null, limits: { payments: 6000 } },
      { id: 'acct_shop', ip_whitelist: null, limits: null },
    ]);

    // The output the comments show, and the answers of the nine admin routes.
    expect(result.stdout).toContain(
      `Created key key_shop (level-2) for account acct_shop in the database postgres://postgres@127.0.0.1:${server.port}/`,
    );
    expect(result.stdout).toMatch(
      /^acct_shop {2}\(whitelist: any address\)\n {2}key_shop {2}level-2 {2}pk_test_\S+ {2}active$/m,
    );
    for (const answer of [
      '"id":"acct_market","ip_whitelist":["198.51.100.0/24"]',
      '"id":"acct_market","ip_whitelist":null',
      '"id":"acct_market","ip_whitelist":null,"limits":{"payments":6000}',
      '{"account_id":"acct_market","scopes":[{"scope":"payments","limit":6000,"remaining":6000,',
      '"secret_key":"sk_test_',
      '"id":"key_market","account_id":"acct_market","role":"level-2"',
      '"previous":{"id":"key_market"',
    ]) {
      expect(result.stdout).toContain(answer);
    }
    expect(result.stdout).toMatch(/"id":"key_market"[^{}]*"revoked":true/);
    expect(result.stdout).toMatch(
      /"id":"key_market","account_id":"acct_market","role":"level-2"[^{}]*"permissions":\["wallets:read"\]\}/,
    );

    const backup = path.join(directory, 'keys-backup.json');
    expect(statSync(backup).mode & 0o777).toBe(0o600);
    const exported = JSON.parse(readFileSync(backup, 'utf8')) as { accounts: { id: string }[] };
    expect(exported.accounts.map((account) => account.id)).toEqual(['acct_legacy', 'acct_shop']);
  }, 150_000);
  it('runs the per-account limits, usage and restricted-key blocks as written', async () => {
    const { pool, directory, prelude } = await setUp('limits');
    const port = /ADMIN=http:\/\/127\.0\.0\.1:(\d+)/.exec(prelude)?.[1] ?? '';
    const blocks = ['account-limits', 'account-usage', 'restricted-keys'].map((name) =>
      docBlock(name).code.replaceAll('9090', port),
    );
    const stdout = await run(
      [
        prelude,
        // What the guides' examples start from: acct_big and its key key_partner.
        'tollgate-keys create --account acct_big --key key_partner --role level-1',
        ...blocks,
      ].join('\n'),
      directory,
    );
    expect(stdout).toContain(
      '{"id":"acct_big","ip_whitelist":null,"limits":{"payments":6000,"authenticated":300}',
    );
    expect(stdout).toMatch(
      /\{"account_id":"acct_big","scopes":\[\{"scope":"payments","limit":1500,"remaining":1500,"reset_seconds":\d+\},\{"scope":"authenticated","limit":100,/,
    );
    expect(stdout).toMatch(/"id":"key_partner"[^{}]*"permissions":\["wallets:read"\]\}/);
    expect(stdout).toMatch(/"id":"key_partner"[^{}]*"permissions":null\}/);

    const accounts = await pool.query('SELECT id, limits FROM accounts');
    expect(accounts.rows).toEqual([{ id: 'acct_big', limits: null }]);
    const keys = await pool.query<{ id: string; role: string; permissions: string[] | null }>(
      'SELECT id, role, permissions FROM keys ORDER BY created_at',
    );
    expect(keys.rows.map(({ role, permissions }) => ({ role, permissions }))).toEqual([
      { role: 'level-1', permissions: null },
      { role: 'level-1', permissions: ['wallets:read'] },
      { role: 'level-1', permissions: ['wallets:read'] },
    ]);
    expect(keys.rows[0]?.id).toBe('key_partner');
  }, 150_000);
});
