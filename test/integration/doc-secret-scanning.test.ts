import { rmSync, writeFileSync } from 'node:fs';
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
 * docs/secret-scanning.md's staging walk-through runs as written under `bash -euo pipefail`,
 * against a real PostgreSQL: it makes the key it reports, starts the staging gateway from the built
 * `dist/`, stands in for GitHub with a key of its own, and shows the key revoked. The test does
 * what the guide says the walk-through starts from (a migrated database in
 * `TOLLGATE_DATABASE_URL`, the key command named `tollgate-keys`); port 8080 is a free one.
 */

describeWithPostgres("the secret-scanning guide's staging walk-through", () => {
  let server: TestPostgres;
  let pool: Pool | undefined;
  let directory: string | undefined;

  beforeAll(async () => {
    server = await startTestPostgres();
  }, 60_000);
  afterAll(async () => {
    await pool?.end();
    server.destroy();
    if (directory !== undefined) rmSync(directory, { recursive: true, force: true });
  });

  it('reports a staging key as written: true_positive, revoked, then false_positive', async () => {
    const url = await server.createDatabase('scanning_guide');
    pool = new Pool({ connectionString: url });
    await migrate(pool);
    directory = workDirectory();
    const port = String(await freePort());
    const script = [
      REAP_BACKGROUND,
      keysCommand(),
      `export TOLLGATE_DATABASE_URL=${JSON.stringify(url)}`,
      `export PORT=${port} LOG_LEVEL=error`,
      docBlock('secret-scanning-staging').code.replaceAll('8080', port),
    ].join('\n');
    writeFileSync(path.join(directory, 'walk-through.sh'), script);
    const result = await runBash(script, directory, {}, 120_000);
    if (result.code !== 0) {
      throw new Error(`exit ${String(result.code)}\n${result.stdout}\n${result.stderr}`);
    }

    // The output the comments show, in order: in force, reported, refused, reported again.
    const lines = result.stdout.split('\n').filter((line) => line.trim() !== '');
    const answer = (label: string): RegExp =>
      new RegExp(
        `^\\[\\{"token_hash":"[0-9a-f]{64}","token_type":"tollgate_test_secret_key","label":"${label}"\\}\\]$`,
      );
    expect(lines).toHaveLength(4);
    expect(lines[0]).toBe('200');
    expect(lines[1]).toMatch(answer('true_positive'));
    expect(lines[2]).toBe('401');
    expect(lines[3]).toMatch(answer('false_positive'));

    // The key it made is revoked in the database, and no report counted as a use of it.
    const keys = await pool.query<{ id: string; revoked: boolean; used: boolean }>(
      `SELECT id, revoked_at IS NOT NULL AS revoked,
       coalesce(last_used_at > revoked_at, false) AS used
       FROM keys WHERE account_id = 'acct_leaky'`,
    );
    expect(keys.rows).toEqual([{ id: 'key_leaky', revoked: true, used: false }]);
  }, 150_000);
});
