import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { FileKeyStore } from '../../lib/keys/key-store';
import { migrate } from '../../lib/keys/pg-schema';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';
import { expectOneLineError, runKeys } from '../helpers/keys-cli';
import type { Finished } from '../helpers/process';

/**
 * The key command's `set-permissions` and `create --permissions` on a keys file and
 * on the database, and `list`, `roll` and `export` carrying a key's list. A refusal is one line
 * naming the key and the permission, and changes nothing.
 */

const keys = runKeys;
const expectRefusal = expectOneLineError;

/** The refusals every store gives, with what each must name. */
const REFUSED: readonly [string, string[], RegExp][] = [
  [
    'an unknown permission',
    ['--permissions', 'wallets:read,refunds:write'],
    /permissions\[1\]: key "key_a": unknown permission "refunds:write"; expected one of wallets:read/,
  ],
  [
    'a permission twice',
    ['--permissions', 'otp:confirm, otp:confirm'],
    /permissions\[1\]: key "key_a": permission "otp:confirm" is listed twice/,
  ],
  [
    'an empty name',
    ['--permissions', ''],
    /either --permissions|key "key_a": unknown permission ""/,
  ],
  [
    'both --permissions and --none',
    ['--permissions', 'otp:confirm', '--none'],
    /either --permissions/,
  ],
  ['neither --permissions nor --none', [], /either --permissions/],
];

const SET =
  /^Key key_a may now call only the routes of wallets:read, transactions:read \(within its role\)/;

describe('set-permissions on a keys file', () => {
  let directory: string;
  let file: string;

  beforeAll(async () => {
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-permissions-cli-'));
    file = path.join(directory, 'keys.json');
    expect(
      (await keys(['create', '--account', 'acct_a', '--key', 'key_a', '--file', file])).code,
    ).toBe(0);
  });
  afterAll(() => {
    rmSync(directory, { recursive: true, force: true });
  });

  const document = () =>
    JSON.parse(readFileSync(file, 'utf8')) as {
      accounts: { keys: { id: string; permissions?: unknown }[] }[];
    };

  it('writes the list on the key; list shows it; the gateway loads it', async () => {
    const set = await keys([
      'set-permissions',
      '--key',
      'key_a',
      '--permissions',
      'wallets:read, transactions:read',
      '--file',
      file,
    ]);
    expect({ code: set.code, stderr: set.stderr }).toEqual({ code: 0, stderr: '' });
    expect(set.stdout).toMatch(SET);
    expect(set.stdout).toContain('for its tokens too, once the gateway reloads the file.');
    expect(document().accounts[0]?.keys[0]?.permissions).toEqual([
      'wallets:read',
      'transactions:read',
    ]);
    expect((await keys(['list', '--file', file])).stdout).toMatch(
      /key_a {2}administrator {2}pk_test_\S+ {2}active {2}permissions: wallets:read, transactions:read\n/,
    );
    const store = await FileKeyStore.load(file);
    expect([...(store.findById('key_a')?.permissions ?? [])]).toEqual([
      'wallets:read',
      'transactions:read',
    ]);
  });

  it.each(REFUSED)(
    'refuses %s in one line and leaves the file as it was',
    async (_, args, pattern) => {
      const before = readFileSync(file, 'utf8');
      expectRefusal(
        await keys(['set-permissions', '--key', 'key_a', ...args, '--file', file]),
        pattern,
      );
      expect(readFileSync(file, 'utf8')).toBe(before);
    },
  );

  it('refuses a key the file does not hold', async () => {
    expectRefusal(
      await keys(['set-permissions', '--key', 'key_nope', '--none', '--file', file]),
      /no key "key_nope"/,
    );
  });

  it('create --permissions makes a restricted key; roll keeps its list; --none lifts it', async () => {
    const made = await keys([
      'create',
      '--account',
      'acct_a',
      '--key',
      'key_b',
      '--role',
      'level-2',
      '--permissions',
      'payouts:write',
      '--file',
      file,
    ]);
    expect(made.stdout).toContain('Created key key_b (level-2; permissions: payouts:write)');
    const rolled = await keys(['roll', '--key', 'key_b', '--grace', '0', '--file', file]);
    expect(rolled.code).toBe(0);
    const lists = document().accounts[0]?.keys.map((key) => key.permissions);
    expect(lists).toEqual([
      ['wallets:read', 'transactions:read'],
      ['payouts:write'],
      ['payouts:write'],
    ]);
    expectRefusal(
      await keys([
        'create',
        '--account',
        'acct_a',
        '--permissions',
        'payouts:send',
        '--file',
        file,
      ]),
      /unknown permission "payouts:send"/,
    );
    const lifted = await keys(['set-permissions', '--key', 'key_a', '--none', '--file', file]);
    expect(lifted.stdout).toContain('Key key_a is not restricted: it may do all its role allows');
    expect(Object.hasOwn(document().accounts[0]?.keys[0] ?? {}, 'permissions')).toBe(false);
  });
});

describeWithPostgres('set-permissions, create, roll, list and export on the database', () => {
  let server: TestPostgres;
  let url: string;
  let pool: Pool;
  let directory: string;
  const db = (...args: string[]): Promise<Finished> => keys([...args, '--database-url', url]);
  const stored = async (id: string): Promise<unknown> =>
    (await pool.query<{ permissions: unknown }>('SELECT permissions FROM keys WHERE id = $1', [id]))
      .rows[0]?.permissions;

  beforeAll(async () => {
    server = await startTestPostgres();
    url = await server.createDatabase('cli_permissions');
    pool = new Pool({ connectionString: url });
    await migrate(pool);
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-permissions-cli-db-'));
    expect((await db('create', '--account', 'acct_a', '--key', 'key_a')).code).toBe(0);
  }, 60_000);
  afterAll(async () => {
    await pool.end();
    server.destroy();
    rmSync(directory, { recursive: true, force: true });
  });

  it('set-permissions writes the column; list shows it; every gateway applies it within 1 s', async () => {
    const set = await db(
      'set-permissions',
      '--key',
      'key_a',
      '--permissions',
      'transactions:read,wallets:read',
    );
    expect({ code: set.code, stderr: set.stderr }).toEqual({ code: 0, stderr: '' });
    expect(set.stdout).toMatch(SET);
    expect(set.stdout).toMatch(
      /in the database postgres:\/\/\S+, for its tokens too\. Every gateway on this database applies it within 1 s\.\n$/,
    );
    expect(await stored('key_a')).toEqual(['wallets:read', 'transactions:read']);
    expect((await db('list')).stdout).toMatch(
      /key_a .* {2}permissions: wallets:read, transactions:read\n/,
    );
  });

  it.each(REFUSED)('refuses %s in one line and changes nothing', async (_, args, pattern) => {
    expectRefusal(await db('set-permissions', '--key', 'key_a', ...args), pattern);
    expect(await stored('key_a')).toEqual(['wallets:read', 'transactions:read']);
  });

  it('refuses a key the database does not hold', async () => {
    expectRefusal(
      await db('set-permissions', '--key', 'key_nope', '--none'),
      /set-permissions refused: No key with id "key_nope"/,
    );
  });

  it('create --permissions and roll keep the list; export writes it; --none clears it', async () => {
    const made = await db(
      'create',
      '--account',
      'acct_a',
      '--key',
      'key_b',
      '--permissions',
      'payouts:write',
    );
    expect(made.stdout).toContain('Created key key_b (administrator; permissions: payouts:write)');
    expect(await stored('key_b')).toEqual(['payouts:write']);
    const rolled = await db('roll', '--key', 'key_b', '--grace', '0');
    const newId = /New key (\S+) /.exec(rolled.stdout)?.[1] ?? '';
    expect(await stored(newId)).toEqual(['payouts:write']);
    const out = path.join(directory, 'exported.json');
    expect((await db('export', '--out', out)).code).toBe(0);
    const exported = JSON.parse(readFileSync(out, 'utf8')) as {
      accounts: { keys: { id: string; permissions?: unknown }[] }[];
    };
    expect(exported.accounts[0]?.keys.find((key) => key.id === 'key_a')?.permissions).toEqual([
      'wallets:read',
      'transactions:read',
    ]);
    const cleared = await db('set-permissions', '--key', 'key_a', '--none');
    expect(cleared.stdout).toContain('Key key_a is not restricted');
    expect(await stored('key_a')).toBeNull();
  });
});
