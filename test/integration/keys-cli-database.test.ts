import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { loadConfig } from '../../gateway/config';
import { type RunningGateway, startGateway } from '../../gateway/start';
import { ROLES } from '../../lib/model/roles';
import { generateKey } from '../../lib/model/key-format';
import { sha256 } from '../../lib/keys/key-store';
import { migrate } from '../../lib/keys/pg-schema';
import { expectErrorBody } from '../helpers/error-body';
import { TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs } from '../helpers/logs';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';
import { distScript, type Finished, httpRequest, occurrences, runNode } from '../helpers/process';
import { expectOneLineError } from '../helpers/keys-cli';

/**
 * The key command on the database (`node dist/gateway/keys-cli.js --database-url …`), run as a
 * child process against a real PostgreSQL: every verb, import and export, hostile input, an
 * unmigrated database, a wrong URL, which store a command picks, and a running gateway that
 * enforces a revoke made by the command within 1 s.
 */

interface Created {
  readonly keyId: string;
  readonly publishableKey: string;
  readonly secretKey: string;
}

function parsePair(result: Finished, headline: RegExp): Created {
  const keyId = headline.exec(result.stdout)?.[1];
  const publishableKey = /publishable key:\s+(\S+)/.exec(result.stdout)?.[1];
  const secretKey = /secret key:\s+(\S+)/.exec(result.stdout)?.[1];
  if (keyId === undefined || publishableKey === undefined || secretKey === undefined) {
    throw new Error(`unexpected output:\n${result.stdout}\n${result.stderr}`);
  }
  return { keyId, publishableKey, secretKey };
}

const parseCreated = (result: Finished): Created => parsePair(result, /Created key (\S+) /);
const parseRolled = (result: Finished): Created => parsePair(result, /New key (\S+) /);

interface KeyRowSql {
  id: string;
  account_id: string;
  role: string;
  publishable_key: string;
  secret_sha256: Buffer;
  expires_at: Date | null;
  revoked_at: Date | null;
}

describeWithPostgres('the key command on the database', () => {
  const cli = distScript('gateway/keys-cli.js');
  let server: TestPostgres;
  let url: string;
  let pool: Pool;
  let directory: string;

  const keys = (args: string[], env: Record<string, string> = {}): Promise<Finished> =>
    runNode(cli, args, env);
  const db = (...args: string[]): Promise<Finished> => keys([...args, '--database-url', url]);
  const keyRow = async (id: string): Promise<KeyRowSql | undefined> =>
    (await pool.query<KeyRowSql>('SELECT * FROM keys WHERE id = $1', [id])).rows[0];
  const snapshot = async (): Promise<unknown> => ({
    accounts: (await pool.query('SELECT * FROM accounts ORDER BY id')).rows,
    keys: (await pool.query('SELECT * FROM keys ORDER BY id')).rows,
  });

  beforeAll(async () => {
    server = await startTestPostgres();
    url = await server.createDatabase('cli');
    pool = new Pool({ connectionString: url });
    await migrate(pool);
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-keys-db-'));
  }, 60_000);
  afterAll(async () => {
    await pool.end();
    server.destroy();
    rmSync(directory, { recursive: true, force: true });
  });

  describe('every verb', () => {
    let owner: Created;

    it('create adds the account and a pair, prints the secret once and stores only its SHA-256', async () => {
      const result = await db('create', '--account', 'acct_cli', '--role', 'level-2');
      expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
      owner = parseCreated(result);
      expect(result.stdout).toContain('Created account acct_cli (no IP whitelist)');
      expect(result.stdout).toContain(
        `for account acct_cli in the database postgres://postgres@127.0.0.1:${server.port}/`,
      );
      expect(owner.secretKey).toMatch(/^sk_test_/);
      expect(occurrences(result.stdout, owner.secretKey)).toBe(1);
      const row = await keyRow(owner.keyId);
      expect(row).toMatchObject({
        account_id: 'acct_cli',
        role: 'level-2',
        publishable_key: owner.publishableKey,
        revoked_at: null,
        expires_at: null,
      });
      expect(row?.secret_sha256.equals(sha256(owner.secretKey))).toBe(true);
      const text = JSON.stringify(await snapshot());
      expect(text).not.toContain(owner.secretKey);
    });

    it('create on an existing account adds a key with the id, role and environment asked for', async () => {
      const result = await db(
        'create',
        '--account',
        'acct_cli',
        '--key',
        'key_live',
        '--env',
        'live',
      );
      expect(result.code).toBe(0);
      expect(result.stdout).not.toContain('Created account');
      const live = parseCreated(result);
      expect(live.keyId).toBe('key_live');
      expect(live.secretKey).toMatch(/^sk_live_/);
      expect(await keyRow('key_live')).toMatchObject({ role: 'administrator' });
    });

    it('list shows accounts and keys with their state, never a secret or a digest', async () => {
      const result = await db('list');
      expect(result.code).toBe(0);
      expect(result.stdout.split('\n').filter((line) => line !== '')).toEqual([
        'acct_cli  (whitelist: any address)',
        `  ${owner.keyId}  level-2  ${owner.publishableKey}  active`,
        `  key_live  administrator  ${(await keyRow('key_live'))?.publishable_key}  active`,
      ]);
      expect(result.stdout).not.toContain(sha256(owner.secretKey).toString('hex'));
    });

    it('roll --grace 30 issues a new pair in the same environment; the old key expires after the grace', async () => {
      const before = Date.now();
      const result = await db('roll', '--key', 'key_live', '--grace', '30');
      expect({ code: result.code, stderr: result.stderr }).toEqual({ code: 0, stderr: '' });
      const rolled = parseRolled(result);
      expect(rolled.secretKey).toMatch(/^sk_live_/);
      expect(occurrences(result.stdout, rolled.secretKey)).toBe(1);
      const old = await keyRow('key_live');
      const deadline = old?.expires_at?.getTime() ?? 0;
      expect(deadline).toBeGreaterThanOrEqual(before + 29_000);
      expect(deadline).toBeLessThanOrEqual(Date.now() + 31_000);
      expect(result.stdout).toContain(`it stops working at ${old?.expires_at?.toISOString()}`);
      expect(await keyRow(rolled.keyId)).toMatchObject({
        account_id: 'acct_cli',
        role: 'administrator',
        expires_at: null,
      });
    });

    it('set-role changes the role', async () => {
      const result = await db('set-role', '--key', owner.keyId, '--role', 'level-3');
      expect(result.code).toBe(0);
      expect(result.stdout).toContain(`Key ${owner.keyId} now has the role level-3`);
      expect((await keyRow(owner.keyId))?.role).toBe('level-3');
    });

    it('set-whitelist stores the canonical entries, and --none lifts the restriction', async () => {
      const set = await db(
        'set-whitelist',
        '--account',
        'acct_cli',
        '--entries',
        '203.0.113.0/24, ::1',
      );
      expect(set.code).toBe(0);
      expect(set.stdout).toContain('accepted from 203.0.113.0/24, ::1/128 only');
      const stored = async (): Promise<unknown> =>
        (await pool.query('SELECT ip_whitelist FROM accounts WHERE id = $1', ['acct_cli'])).rows[0];
      expect(await stored()).toEqual({ ip_whitelist: ['203.0.113.0/24', '::1/128'] });
      expect((await db('list')).stdout).toContain('acct_cli  (whitelist: 203.0.113.0/24, ::1/128)');
      const lifted = await db('set-whitelist', '--account', 'acct_cli', '--none');
      expect(lifted.code).toBe(0);
      expect(await stored()).toEqual({ ip_whitelist: null });
    });

    it('revoke marks the key revoked, and list says so', async () => {
      const result = await db('revoke', '--key', owner.keyId);
      expect(result.code).toBe(0);
      expect(result.stdout).toContain(`Revoked key ${owner.keyId} in the database`);
      expect((await keyRow(owner.keyId))?.revoked_at).toBeInstanceOf(Date);
      expect((await db('list')).stdout).toContain(
        `  ${owner.keyId}  level-3  ${owner.publishableKey}  revoked`,
      );
    });
  });

  describe('import and export', () => {
    let fileUrl: string;

    beforeAll(async () => {
      fileUrl = await server.createDatabase('import');
      const target = new Pool({ connectionString: fileUrl });
      await migrate(target);
      await target.end();
    });

    it('a keys file made by the command goes into the database and comes back out the same', async () => {
      const file = path.join(directory, 'source.json');
      const onFile = (...args: string[]): Promise<Finished> => keys([...args, '--file', file]);
      expect((await onFile('create', '--account', 'acct_a', '--key', 'key_a1')).code).toBe(0);
      expect((await onFile('create', '--account', 'acct_a', '--role', 'level-1')).code).toBe(0);
      expect(
        (await onFile('create', '--account', 'acct_b', '--key', 'key_b1', '--env', 'live')).code,
      ).toBe(0);
      expect(
        (await onFile('set-whitelist', '--account', 'acct_b', '--entries', '10.0.0.0/8')).code,
      ).toBe(0);
      expect((await onFile('roll', '--key', 'key_b1', '--grace', '3600')).code).toBe(0);
      expect((await onFile('revoke', '--key', 'key_a1')).code).toBe(0);
      const original = JSON.parse(readFileSync(file, 'utf8')) as {
        accounts: { id: string; keys: { id: string }[] }[];
      };

      const imported = await keys(['import', '--file', file, '--database-url', fileUrl]);
      expect({ code: imported.code, stderr: imported.stderr }).toEqual({ code: 0, stderr: '' });
      expect(imported.stdout).toContain(`Imported 2 account(s) and 4 key(s) from ${file}`);

      const out = path.join(directory, 'exported.json');
      const exported = await keys(['export', '--out', out, '--database-url', fileUrl]);
      expect({ code: exported.code, stderr: exported.stderr }).toEqual({ code: 0, stderr: '' });
      expect(exported.stdout).toContain(`to ${out} (mode 0600)`);
      expect(statSync(out).mode & 0o777).toBe(0o600);
      const sorted = (document: typeof original): typeof original => ({
        accounts: [...document.accounts]
          .sort((a, b) => a.id.localeCompare(b.id))
          .map((account) => ({
            ...account,
            keys: [...account.keys].sort((a, b) => a.id.localeCompare(b.id)),
          })),
      });
      const back = JSON.parse(readFileSync(out, 'utf8')) as typeof original;
      expect(back).toEqual(sorted(original));

      const toStdout = await keys(['export'], { TOLLGATE_DATABASE_URL: fileUrl });
      expect(toStdout.code).toBe(0);
      expect(toStdout.stdout).toBe(readFileSync(out, 'utf8'));
    });

    it('importing the same file again is refused as a whole, and nothing is written', async () => {
      const file = path.join(directory, 'source.json');
      const target = new Pool({ connectionString: fileUrl });
      const count = async (): Promise<unknown> =>
        (
          await target.query(
            'SELECT (SELECT count(*) FROM accounts) a, (SELECT count(*) FROM keys) k',
          )
        ).rows;
      const before = await count();
      const again = await keys(['import', '--file', file, '--database-url', fileUrl]);
      expectOneLineError(again, /import refused, nothing was written: .*already in use/);
      expect(await count()).toEqual(before);
      await target.end();
    });

    it('a keys file that fails the rules is refused with the file and the entry named', async () => {
      const bad = path.join(directory, 'bad.json');
      writeFileSync(
        bad,
        JSON.stringify({
          accounts: [
            {
              id: 'acct_x',
              keys: [
                {
                  id: 'k',
                  publishableKey: generateKey('publishable'),
                  secretKeySha256: 'ab'.repeat(32),
                  role: 'boss',
                },
              ],
            },
          ],
        }),
      );
      expectOneLineError(
        await keys(['import', '--file', bad, '--database-url', fileUrl]),
        /bad\.json: accounts\[0\]\.keys\[0\]\.role: unknown role "boss"/,
      );
      writeFileSync(bad, '{"accounts": [');
      expectOneLineError(
        await keys(['import', '--file', bad, '--database-url', fileUrl]),
        /bad\.json is not JSON/,
      );
      expectOneLineError(
        await keys(['import', '--database-url', fileUrl]),
        /import needs --file <keys\.json>/,
      );
    });

    it('an account without keys is named on stderr, since a keys file cannot hold it', async () => {
      expect((await db('create', '--account', 'acct_lonely', '--key', 'key_lonely')).code).toBe(0);
      await pool.query("DELETE FROM keys WHERE id = 'key_lonely'");
      const result = await db('export');
      expect(result.code).toBe(0);
      expect(result.stderr).toBe(
        'tollgate-keys: not exported, a keys file cannot hold an account without keys: acct_lonely\n',
      );
      const document = JSON.parse(result.stdout) as { accounts: { id: string }[] };
      expect(document.accounts.map((account) => account.id)).toEqual(['acct_cli']);
    });
  });

  describe('hostile input changes nothing and answers one line', () => {
    let before: unknown;
    beforeEach(async () => {
      before = await snapshot();
    });
    afterEach(async () => {
      expect(await snapshot()).toEqual(before);
    });

    it.each([
      ['revoke', '--key', 'key_nope'],
      ['set-role', '--key', 'key_nope', '--role', 'level-1'],
      ['roll', '--key', 'key_nope', '--grace', '0'],
    ])('%s of an unknown key names it', async (...args) => {
      expectOneLineError(await db(...args), /No key with id "key_nope"/);
    });

    it('an unknown role lists the roles', async () => {
      const result = await db('set-role', '--key', 'key_live', '--role', 'boss');
      expectOneLineError(result, /unknown role "boss"/);
      for (const role of ROLES) expect(result.stderr).toContain(role);
      expectOneLineError(
        await db('create', '--account', 'acct_cli', '--role', 'admin'),
        /unknown role "admin"/,
      );
    });

    it.each(['010.0.0.1', '10.0.0.0/33', 'example.com', ''])(
      'the whitelist entry %j is refused by name',
      async (entry) => {
        const result = await db(
          'set-whitelist',
          '--account',
          'acct_cli',
          '--entries',
          `10.0.0.1,${entry}`,
        );
        expectOneLineError(result, /entries\[1\]/);
      },
    );

    it.each(['604801', '-1', '1.5', 'soon', ''])('the grace %j is refused', async (grace) => {
      const rolled = await keys([
        'roll',
        '--key',
        'key_live',
        `--grace=${grace}`,
        '--database-url',
        url,
      ]);
      expectOneLineError(rolled, /--grace/);
    });

    it.each([
      ["key_x'; DROP TABLE keys; --", 'revoke'],
      ['key_x" OR 1=1 --', 'set-role'],
      ['%_*\\', 'roll'],
    ])('the id %j is only ever a value', async (id, verb) => {
      const extra =
        verb === 'set-role' ? ['--role', 'level-1'] : verb === 'roll' ? ['--grace', '0'] : [];
      expectOneLineError(await db(verb, '--key', id, ...extra), /No key with id/);
    });

    it('an account id with SQL in it is refused before anything is written', async () => {
      const result = await db('create', '--account', "acct'); DROP TABLE accounts; --");
      expectOneLineError(
        result,
        /^tollgate-keys: create refused: --account must be 1 to 64 characters of letters/,
      );
      expect(result.stdout).not.toMatch(/sk_/);
    });

    it('a key id with SQL in it is refused, named as --key', async () => {
      const result = await db('create', '--account', 'acct_cli', '--key', "k'||pg_sleep(5)||'");
      expectOneLineError(
        result,
        /^tollgate-keys: create refused: --key must be 1 to 64 characters/,
      );
    });

    it('a duplicate key id on a new account adds neither the account nor the key', async () => {
      const result = await db('create', '--account', 'acct_new', '--key', 'key_live');
      expectOneLineError(result, /already in use/);
    });
  });

  describe('choosing the database, and failing safely', () => {
    it('an unmigrated database is refused with the migrate command, and left as it was', async () => {
      const empty = await server.createDatabase('empty');
      const result = await keys(['list', '--database-url', empty]);
      expectOneLineError(
        result,
        /schema version 0, this build needs 2: run the migrations first \(tollgate-keys migrate, or npm run migrate in a checkout\)/,
      );
      const check = new Pool({ connectionString: empty });
      const tables = await check.query(
        "SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'",
      );
      await check.end();
      expect(tables.rows).toEqual([{ n: 0 }]);
    });

    it('migrate brings an empty database to the schema this build needs, then has nothing to do', async () => {
      const empty = await server.createDatabase('migrated');
      const first = await keys(['migrate', '--database-url', empty]);
      expect({ code: first.code, stderr: first.stderr }).toEqual({ code: 0, stderr: '' });
      expect(first.stdout).toMatch(
        /schema version 0 -> 2 \(001_keys, 002_limits_and_permissions\)/,
      );
      const again = await keys(['migrate', '--database-url', empty]);
      expect(again.stdout).toMatch(/is at schema version 2: nothing to do/);
      const listed = await keys(['list', '--database-url', empty]);
      expect({ code: listed.code, stderr: listed.stderr }).toEqual({ code: 0, stderr: '' });
      expectOneLineError(await keys(['migrate', '--file', 'keys.json']), /--file is for import/);
    });

    it.each([
      [
        'a closed port',
        (port: number) => `postgres://postgres:Pw-0f-the-db@127.0.0.1:${port + 1}/x`,
      ],
      [
        'an unknown database',
        (port: number) => `postgres://postgres:Pw-0f-the-db@127.0.0.1:${port}/nope`,
      ],
      [
        'localhost on a closed port',
        (port: number) => `postgresql://u:Pw-0f-the-db@localhost:${port + 1}/x?sslmode=disable`,
      ],
    ])(
      'a wrong URL (%s) is one line without the password, from the option or the variable',
      async (_label, make) => {
        const wrong = make(server.port);
        for (const result of [
          await keys(['list', '--database-url', wrong]),
          await keys(['revoke', '--key', 'k'], { TOLLGATE_DATABASE_URL: wrong }),
        ]) {
          expectOneLineError(
            result,
            /cannot use the database postgres(ql)?:\/\/(postgres|u):\*\*\*@/,
          );
          expect(result.stderr).not.toContain('Pw-0f-the-db');
        }
      },
    );

    it('a URL that is not postgres:// is refused without echoing it', async () => {
      const result = await keys(['list', '--database-url', 'mysql://root:Pw-0f-the-db@db/x']);
      expectOneLineError(result, /--database-url must be a postgres:\/\/ or postgresql:\/\/ URL/);
      expect(result.stderr).not.toContain('Pw-0f-the-db');
    });

    it('--file with --database-url, or both variables, is refused and touches neither', async () => {
      const file = path.join(directory, 'both.json');
      const before = await snapshot();
      expectOneLineError(
        await keys(['create', '--account', 'acct_z', '--file', file, '--database-url', url]),
        /--file and --database-url both given/,
      );
      expectOneLineError(
        await keys(['create', '--account', 'acct_z'], {
          TOLLGATE_DATABASE_URL: url,
          TOLLGATE_KEYS_FILE: file,
        }),
        /TOLLGATE_DATABASE_URL and TOLLGATE_KEYS_FILE are both set/,
      );
      expect(() => statSync(file)).toThrow();
      expect(await snapshot()).toEqual(before);
    });

    it('TOLLGATE_DATABASE_URL alone selects the database; --file still means the file', async () => {
      const viaEnv = await keys(['list'], { TOLLGATE_DATABASE_URL: url });
      expect(viaEnv.code).toBe(0);
      expect(viaEnv.stdout).toContain('acct_cli  (whitelist: any address)');
      const urlFile = path.join(directory, 'database_url');
      writeFileSync(urlFile, `${url}\n`, { mode: 0o600 });
      const viaFile = await keys(['list'], { TOLLGATE_DATABASE_URL_FILE: urlFile });
      // The roll above left `key_live` expiring 30 s after it ran: the two lists may straddle that
      // moment, and read the same row as `expires <t>` and `expired <t>`.
      const sameMoment = (stdout: string): string => stdout.replace(/\bexpire[sd] /g, 'expiry ');
      expect({ code: viaFile.code, stdout: sameMoment(viaFile.stdout) }).toEqual({
        code: 0,
        stdout: sameMoment(viaEnv.stdout),
      });
      const file = path.join(directory, 'explicit.json');
      const onFile = await keys(['create', '--account', 'acct_f', '--file', file], {
        TOLLGATE_DATABASE_URL: url,
      });
      expect(onFile.code).toBe(0);
      expect(onFile.stdout).toContain(`in ${file}.`);
      expect((await pool.query("SELECT 1 FROM accounts WHERE id = 'acct_f'")).rowCount).toBe(0);
    });

    it('import and export without a database, export with --file, and --out elsewhere are refused', async () => {
      expectOneLineError(await keys(['export']), /export works on a database/);
      expectOneLineError(await keys(['import', '--file', 'x.json']), /import works on a database/);
      expectOneLineError(await db('export', '--file', 'x.json'), /--file is for import/);
      expectOneLineError(await db('list', '--out', 'x.json'), /--out is for export only/);
    });
  });

  describe('a running gateway on the database', () => {
    let gateway: RunningGateway;
    beforeAll(async () => {
      gateway = await startGateway(
        loadConfig({ PORT: '0', TOLLGATE_DATABASE_URL: url, TOLLGATE_TOKEN_SECRET: TOKEN_SECRET }),
        { logger: captureLogs().logger, print: () => undefined },
      );
    }, 30_000);
    afterAll(async () => {
      await gateway.stop(500);
    });

    it('enforces a revoke made by the command within 1 s, for the key and its token', async () => {
      const created = parseCreated(
        await db('create', '--account', 'acct_live_gw', '--role', 'level-1'),
      );
      const port = Number(new URL(gateway.url).port);
      const wallets = (credential: string) =>
        httpRequest({
          port,
          method: 'GET',
          path: '/api/v1/wallets/',
          headers: { authorization: `Bearer ${credential}` },
        });
      const waitFor = async (
        status: number,
        credential: string,
        limitMs: number,
      ): Promise<number> => {
        const started = performance.now();
        for (;;) {
          const answer = await wallets(credential);
          const elapsed = performance.now() - started;
          if (answer.status === status) return elapsed;
          if (elapsed > limitMs) throw new Error(`still ${answer.status} after ${limitMs} ms`);
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      };
      await waitFor(200, created.secretKey, 3000);
      const exchange = await httpRequest({
        port,
        method: 'POST',
        path: '/api/v1/auth/generate-token/',
        json: { api_key: created.publishableKey, api_secret: created.secretKey },
      });
      expect(exchange.status).toBe(200);
      const token = (exchange.body as { token: string }).token;
      expect((await wallets(token)).status).toBe(200);

      const revoked = await db('revoke', '--key', created.keyId);
      expect(revoked.code).toBe(0);
      const keyMs = await waitFor(401, created.secretKey, 3000);
      const tokenMs = await waitFor(401, token, 3000);
      process.stdout.write(
        `[keys-cli-database] a CLI revoke in force on a running gateway after ${keyMs.toFixed(0)} ms (key), ${tokenMs.toFixed(0)} ms more (token)\n`,
      );
      expect(keyMs).toBeLessThan(1000);
      expect(tokenMs).toBeLessThan(1000);
      expectErrorBody(await wallets(created.secretKey), { status: 401, code: 'invalid_api_key' });
      expectErrorBody(await wallets(token), { status: 401, code: 'invalid_token' });
    });
  });
});
