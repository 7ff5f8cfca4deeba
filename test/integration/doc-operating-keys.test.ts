import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { loadConfig } from '../../gateway/config';
import { type RunningGateway, startGateway } from '../../gateway/start';
import { sha256 } from '../../lib/keys/key-store';
import { migrate } from '../../lib/keys/pg-schema';
import { TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs } from '../helpers/logs';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';
import { docBlock, runBash } from '../helpers/doc-blocks';
import { distScript } from '../helpers/process';

/**
 * docs/keys.md, "Operating keys", step 4: the block marked `doc-test: operating-keys-database`
 * runs as written under `bash -euo pipefail`, against a real PostgreSQL (migrated, as step 2 does)
 * and a gateway with the admin listener (step 3). Only what steps 1 to 3 set is given here:
 * `tollgate-keys` (the built command), `TOLLGATE_DATABASE_URL`, `ADMIN` and `ADMIN_TOKEN`.
 */

describeWithPostgres("the guide's walk-through of operating keys on PostgreSQL", () => {
  const adminToken = randomBytes(32).toString('base64');
  let server: TestPostgres;
  let url: string;
  let pool: Pool;
  let gateway: RunningGateway;
  let directory: string;

  beforeAll(async () => {
    server = await startTestPostgres();
    url = await server.createDatabase('docs');
    pool = new Pool({ connectionString: url });
    await migrate(pool);
    gateway = await startGateway(
      loadConfig({
        PORT: '0',
        TOLLGATE_DATABASE_URL: url,
        TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
        TOLLGATE_ADMIN_PORT: '0',
        TOLLGATE_ADMIN_TOKEN_SHA256: sha256(adminToken).toString('hex'),
      }),
      { logger: captureLogs().logger, print: () => undefined },
    );
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-docs-'));
  }, 60_000);
  afterAll(async () => {
    await gateway.stop(500);
    await pool.end();
    server.destroy();
    rmSync(directory, { recursive: true, force: true });
  });

  it('runs every command of step 4 as written, and the database ends as the comments say', async () => {
    const prelude = [
      `tollgate-keys() { node ${JSON.stringify(distScript('gateway/keys-cli.js'))} "$@"; }`,
      `export TOLLGATE_DATABASE_URL=${JSON.stringify(url)}`,
      `ADMIN=${JSON.stringify(gateway.adminUrl)}`,
      `ADMIN_TOKEN=${JSON.stringify(adminToken)}`,
    ].join('\n');
    const script = `${prelude}\n${docBlock('operating-keys-database').code}\n`;
    writeFileSync(path.join(directory, 'walk-through.sh'), script);
    const result = await runBash(script, directory, {}, 120_000);
    if (result.code !== 0)
      throw new Error(`exit ${result.code}\n${result.stdout}\n${result.stderr}`);
    expect(result.stderr).toBe('');

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
});
