import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { GATEWAY_LIMIT_SCOPES } from '../../gateway/keys-cli/limit-scopes';
import { FileKeyStore } from '../../lib/keys/key-store';
import { migrate } from '../../lib/keys/pg-schema';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';
import { expectOneLineError, runKeys } from '../helpers/keys-cli';
import type { Finished } from '../helpers/process';

/**
 * The key command's `set-limits` on a keys file and on the database, and `list`,
 * `export` and `import` carrying an account's limits. A refusal is one line naming the account and
 * the scope, and changes nothing.
 */

const keys = runKeys;
const expectRefusal = expectOneLineError;

/** The refusals every store gives, with what each must name. */
const REFUSED: readonly [string, string[], RegExp][] = [
  [
    'an unknown scope',
    ['--limits', 'refunds=5'],
    /limits\.refunds: account "acct_a": unknown scope "refunds"/,
  ],
  [
    'the per-IP public scope',
    ['--limits', 'public=5'],
    /account "acct_a": scope "public" is counted per client IP/,
  ],
  ['0', ['--limits', 'payments=0'], /account "acct_a": scope "payments": must be a whole number/],
  [
    '1,000,001',
    ['--limits', 'payments=1000001'],
    /account "acct_a": scope "payments": must be a whole number from 1 to 1000000/,
  ],
  [
    'a fraction',
    ['--limits', 'authenticated=2.5'],
    /account "acct_a": scope "authenticated": must be a whole number/,
  ],
  ['not scope=number', ['--limits', 'payments'], /--limits: "payments" is not scope=number/],
  ['both --limits and --none', ['--limits', 'payments=5', '--none'], /either --limits/],
  ['neither --limits nor --none', [], /either --limits/],
];

describe('set-limits on a keys file', () => {
  let directory: string;
  let file: string;

  beforeAll(async () => {
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-limits-cli-'));
    file = path.join(directory, 'keys.json');
    expect((await keys(['create', '--account', 'acct_a', '--file', file])).code).toBe(0);
  });
  afterAll(() => {
    rmSync(directory, { recursive: true, force: true });
  });

  it('writes the limits on the account; list shows them; the gateway loads them', async () => {
    const set = await keys([
      'set-limits',
      '--account',
      'acct_a',
      '--limits',
      'payments=6000, authenticated=300',
      '--file',
      file,
    ]);
    expect({ code: set.code, stderr: set.stderr }).toEqual({ code: 0, stderr: '' });
    expect(set.stdout).toContain(
      'Account acct_a: limits per minute payments=6000, authenticated=300, once the gateway reloads the file.',
    );
    const document = JSON.parse(readFileSync(file, 'utf8')) as {
      accounts: { id: string; limits?: unknown }[];
    };
    expect(document.accounts[0]?.limits).toEqual({ payments: 6000, authenticated: 300 });
    const listed = await keys(['list', '--file', file]);
    expect(listed.stdout).toContain(
      'acct_a  (whitelist: any address, limits: payments=6000, authenticated=300)',
    );
    const store = await FileKeyStore.load(file, { limitScopes: GATEWAY_LIMIT_SCOPES });
    expect([...store.keyRecords()][0]?.limits).toEqual({ authenticated: 300, payments: 6000 });
  });

  it.each(REFUSED)(
    'refuses %s in one line and leaves the file as it was',
    async (_, args, pattern) => {
      const before = readFileSync(file, 'utf8');
      expectRefusal(
        await keys(['set-limits', '--account', 'acct_a', ...args, '--file', file]),
        pattern,
      );
      expect(readFileSync(file, 'utf8')).toBe(before);
    },
  );

  it('refuses an account the file does not hold', async () => {
    expectRefusal(
      await keys([
        'set-limits',
        '--account',
        'acct_nope',
        '--limits',
        'payments=5',
        '--file',
        file,
      ]),
      /no account "acct_nope"/,
    );
  });

  it('--none puts every scope back at its default', async () => {
    const reset = await keys(['set-limits', '--account', 'acct_a', '--none', '--file', file]);
    expect(reset.stdout).toContain('Account acct_a: limits per minute defaults');
    const document = JSON.parse(readFileSync(file, 'utf8')) as {
      accounts: Record<string, unknown>[];
    };
    expect(Object.hasOwn(document.accounts[0] ?? {}, 'limits')).toBe(false);
    expect((await keys(['list', '--file', file])).stdout).toContain(
      'acct_a  (whitelist: any address)\n',
    );
  });
});

describeWithPostgres('set-limits, list, export and import on the database', () => {
  let server: TestPostgres;
  let url: string;
  let pool: Pool;
  let directory: string;
  const db = (...args: string[]): Promise<Finished> => keys([...args, '--database-url', url]);
  const stored = async (id: string): Promise<unknown> =>
    (await pool.query<{ limits: unknown }>('SELECT limits FROM accounts WHERE id = $1', [id]))
      .rows[0]?.limits;

  beforeAll(async () => {
    server = await startTestPostgres();
    url = await server.createDatabase('cli_limits');
    pool = new Pool({ connectionString: url });
    await migrate(pool);
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-limits-cli-db-'));
    expect((await db('create', '--account', 'acct_a')).code).toBe(0);
  }, 60_000);
  afterAll(async () => {
    await pool.end();
    server.destroy();
    rmSync(directory, { recursive: true, force: true });
  });

  it('set-limits writes the column; list shows it; every gateway applies it within 1 s', async () => {
    const set = await db('set-limits', '--account', 'acct_a', '--limits', 'payments=6000');
    expect({ code: set.code, stderr: set.stderr }).toEqual({ code: 0, stderr: '' });
    expect(set.stdout).toMatch(
      /^Account acct_a in the database postgres:\/\/\S+: limits per minute payments=6000\. Every gateway on this database applies it within 1 s\.\n$/,
    );
    expect(await stored('acct_a')).toEqual({ payments: 6000 });
    expect((await db('list')).stdout).toContain(
      'acct_a  (whitelist: any address, limits: payments=6000)',
    );
  });

  it.each(REFUSED)('refuses %s in one line and changes nothing', async (_, args, pattern) => {
    expectRefusal(await db('set-limits', '--account', 'acct_a', ...args), pattern);
    expect(await stored('acct_a')).toEqual({ payments: 6000 });
  });

  it('refuses an account the database does not hold', async () => {
    expectRefusal(
      await db('set-limits', '--account', 'acct_nope', '--limits', 'payments=5'),
      /set-limits refused: No account with id "acct_nope"/,
    );
  });

  it('export writes the limits into the keys file; import takes them back; --none clears them', async () => {
    const out = path.join(directory, 'exported.json');
    expect((await db('export', '--out', out)).code).toBe(0);
    const exported = JSON.parse(readFileSync(out, 'utf8')) as {
      accounts: { id: string; limits?: unknown; keys: { id: string }[] }[];
    };
    expect(exported.accounts[0]).toMatchObject({ id: 'acct_a', limits: { payments: 6000 } });

    const copy = await server.createDatabase('cli_limits_copy');
    const copyPool = new Pool({ connectionString: copy });
    await migrate(copyPool);
    const imported = await keys(['import', '--file', out, '--database-url', copy]);
    expect({ code: imported.code, stderr: imported.stderr }).toEqual({ code: 0, stderr: '' });
    expect((await copyPool.query('SELECT id, limits FROM accounts')).rows).toEqual([
      { id: 'acct_a', limits: { payments: 6000 } },
    ]);

    const bad = path.join(directory, 'bad.json');
    const account = exported.accounts[0];
    writeFileSync(
      bad,
      JSON.stringify({
        accounts: [
          { ...account, id: 'acct_b', limits: { 'checkout-create': 5 }, keys: account?.keys },
        ],
      }),
    );
    expectRefusal(
      await keys(['import', '--file', bad, '--database-url', copy]),
      /accounts\[0\]\.limits\.checkout-create: account "acct_b": scope "checkout-create" is counted per client IP/,
    );
    await copyPool.end();

    const cleared = await db('set-limits', '--account', 'acct_a', '--none');
    expect(cleared.stdout).toContain('limits per minute defaults');
    expect(await stored('acct_a')).toBeNull();
  });
});
