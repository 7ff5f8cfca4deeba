import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { createApp, type GatewayApp } from '../../gateway/app';
import { DEFAULT_LIMITS } from '../../gateway/config';
import { keyShape } from '../../lib/model/key-format';
import { FileKeyStore, sha256 } from '../../lib/keys/key-store';
import { ROLES } from '../../lib/model/roles';
import { TokenService } from '../../lib/tokens/tokens';
import { expectErrorBody, type HttpAnswer } from '../helpers/error-body';
import { TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs, findLeaks } from '../helpers/logs';
import { distScript, type Finished, occurrences, runNode } from '../helpers/process';
import { startRecordingUpstream, type RecordingUpstream } from '../helpers/upstream';

/** The key command (`node dist/gateway/keys-cli.js`): create and revoke, and what the gateway makes of them. */

interface Created {
  readonly keyId: string;
  readonly publishableKey: string;
  readonly secretKey: string;
}

function parseCreated(result: Finished): Created {
  const keyId = /Created key (\S+) /.exec(result.stdout)?.[1];
  const publishableKey = /publishable key:\s+(\S+)/.exec(result.stdout)?.[1];
  const secretKey = /secret key:\s+(\S+)/.exec(result.stdout)?.[1];
  if (keyId === undefined || publishableKey === undefined || secretKey === undefined) {
    throw new Error(`unexpected output of create:\n${result.stdout}\n${result.stderr}`);
  }
  return { keyId, publishableKey, secretKey };
}

function answerOf(response: request.Response): HttpAnswer {
  return { status: response.status, headers: response.headers, text: response.text };
}

describe('the keys command', () => {
  const cli = distScript('gateway/keys-cli.js');
  let directory: string;
  let file: string;
  let upstream: RecordingUpstream;

  beforeEach(async () => {
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-keys-'));
    file = path.join(directory, 'keys.json');
    upstream = await startRecordingUpstream();
  });
  afterEach(async () => {
    await upstream.close();
    rmSync(directory, { recursive: true, force: true });
  });

  const keys = (...args: string[]): Promise<Finished> => runNode(cli, args, {});

  /** The sample gateway over the keys file, as `npm start` would build it. */
  const gatewayOver = async (): Promise<{
    app: GatewayApp;
    store: FileKeyStore;
    logs: ReturnType<typeof captureLogs>;
  }> => {
    const store = await FileKeyStore.load(file);
    const logs = captureLogs();
    const app = createApp({
      keyStore: store,
      tokens: new TokenService({ secret: TOKEN_SECRET }),
      upstreamUrl: upstream.url,
      logger: logs.logger,
      limits: DEFAULT_LIMITS,
    });
    return { app, store, logs };
  };

  it('create prints a pk_/sk_ pair once and stores only the SHA-256 of the secret', async () => {
    const result = await keys('create', '--account', 'acct_x', '--role', 'level-2', '--file', file);
    expect(result.code).toBe(0);
    expect(result.stderr).toBe('');
    const created = parseCreated(result);
    expect(created.publishableKey).toMatch(/^pk_test_/);
    expect(created.secretKey).toMatch(/^sk_test_/);
    expect(keyShape(created.publishableKey)).toBe('typed');
    expect(keyShape(created.secretKey)).toBe('typed');
    expect(occurrences(result.stdout, created.secretKey)).toBe(1);

    const text = readFileSync(file, 'utf8');
    expect(text).not.toContain(created.secretKey);
    expect(text).not.toContain(created.secretKey.slice(8, 40));
    const document = JSON.parse(text) as {
      accounts: { id: string; keys: Record<string, unknown>[] }[];
    };
    expect(document.accounts).toEqual([
      {
        id: 'acct_x',
        keys: [
          {
            id: created.keyId,
            publishableKey: created.publishableKey,
            secretKeySha256: sha256(created.secretKey).toString('hex'),
            role: 'level-2',
          },
        ],
      },
    ]);
    expect(statSync(file).mode & 0o077).toBe(0);
  });

  it('the gateway loads the file and the pair works: token exchange, secret key, role level-2', async () => {
    const created = parseCreated(
      await keys('create', '--account', 'acct_x', '--role', 'level-2', '--file', file),
    );
    const { app, logs } = await gatewayOver();
    try {
      const exchange = await request(app)
        .post('/api/v1/auth/generate-token/')
        .send({ api_key: created.publishableKey, api_secret: created.secretKey });
      expect(exchange.status).toBe(200);
      const token = (exchange.body as { token: string }).token;

      expect(
        (await request(app).get('/api/v1/wallets/').set('Authorization', `Bearer ${token}`)).status,
      ).toBe(200);
      expect(
        (
          await request(app)
            .post('/api/v1/payouts/')
            .set('Authorization', `Bearer ${created.secretKey}`)
            .send({ amount: 1 })
        ).status,
      ).toBe(200);
      expectErrorBody(
        answerOf(
          await request(app)
            .post('/api/v1/payouts/po_1/approve/')
            .set('Authorization', `Bearer ${created.secretKey}`),
        ),
        { status: 403, code: 'insufficient_role', message: /level-3/ },
      );
      expect(
        upstream.requests.map((forwarded) => forwarded.headers['x-gateway-account-id']),
      ).toEqual(['acct_x', 'acct_x']);
      expect(upstream.requests.map((forwarded) => forwarded.headers['x-gateway-key-id'])).toEqual([
        created.keyId,
        created.keyId,
      ]);
      expect(findLeaks(logs.lines.join('\n'), [created.secretKey, token])).toEqual([]);
    } finally {
      app.shutdown();
    }
  });

  it('a second create adds a key to the same account and keeps the first', async () => {
    const first = parseCreated(
      await keys('create', '--account', 'acct_x', '--role', 'level-1', '--file', file),
    );
    const second = parseCreated(
      await keys('create', '--account', 'acct_x', '--key', 'key_named', '--file', file),
    );
    expect(second.keyId).toBe('key_named');
    const document = JSON.parse(readFileSync(file, 'utf8')) as {
      accounts: { id: string; keys: { id: string; role: string }[] }[];
    };
    expect(document.accounts).toHaveLength(1);
    expect(document.accounts[0]?.keys.map((key) => [key.id, key.role])).toEqual([
      [first.keyId, 'level-1'],
      ['key_named', 'administrator'],
    ]);
  });

  it('revoke marks the key revoked; after a reload its token, its secret and its pair stop working', async () => {
    const created = parseCreated(
      await keys('create', '--account', 'acct_x', '--role', 'level-2', '--file', file),
    );
    const other = parseCreated(
      await keys('create', '--account', 'acct_x', '--role', 'level-1', '--file', file),
    );
    const { app, store } = await gatewayOver();
    try {
      const exchange = await request(app)
        .post('/api/v1/auth/generate-token/')
        .send({ api_key: created.publishableKey, api_secret: created.secretKey });
      const token = (exchange.body as { token: string }).token;
      expect(
        (await request(app).get('/api/v1/wallets/').set('Authorization', `Bearer ${token}`)).status,
      ).toBe(200);

      const revoke = await keys('revoke', '--key', created.keyId, '--file', file);
      expect(revoke.code).toBe(0);
      const document = JSON.parse(readFileSync(file, 'utf8')) as {
        accounts: { keys: { id: string; revoked?: boolean }[] }[];
      };
      expect(document.accounts[0]?.keys.find((key) => key.id === created.keyId)?.revoked).toBe(
        true,
      );
      expect(
        document.accounts[0]?.keys.find((key) => key.id === other.keyId)?.revoked,
      ).toBeUndefined();

      // Until the gateway reloads, the keys in force are unchanged.
      expect(
        (await request(app).get('/api/v1/wallets/').set('Authorization', `Bearer ${token}`)).status,
      ).toBe(200);
      await store.reload();

      expectErrorBody(
        answerOf(
          await request(app).get('/api/v1/wallets/').set('Authorization', `Bearer ${token}`),
        ),
        {
          status: 401,
          code: 'invalid_token',
          message: 'Invalid token',
        },
      );
      expectErrorBody(
        answerOf(
          await request(app)
            .get('/api/v1/wallets/')
            .set('Authorization', `Bearer ${created.secretKey}`),
        ),
        {
          status: 401,
          code: 'invalid_api_key',
          message: 'Invalid API key',
        },
      );
      expectErrorBody(
        answerOf(
          await request(app)
            .post('/api/v1/auth/generate-token/')
            .send({ api_key: created.publishableKey, api_secret: created.secretKey }),
        ),
        { status: 401, code: 'invalid_credentials', message: 'Invalid API key or secret' },
      );
      expect(
        (
          await request(app)
            .get('/api/v1/wallets/')
            .set('Authorization', `Bearer ${other.secretKey}`)
        ).status,
      ).toBe(200);
    } finally {
      app.shutdown();
    }
  });

  it('an unknown role exits 1 with one message listing the roles, and writes nothing', async () => {
    const result = await keys('create', '--account', 'acct_x', '--role', 'boss', '--file', file);
    expect(result.code).toBe(1);
    const lines = result.stderr.split('\n').filter((line) => line !== '');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('boss');
    for (const role of ROLES) expect(lines[0]).toContain(role);
    expect(result.stdout).not.toMatch(/sk_/);
    expect(existsSync(file)).toBe(false);
  });

  it('an unknown role leaves an existing file byte for byte as it was', async () => {
    await keys('create', '--account', 'acct_x', '--file', file);
    const before = readFileSync(file, 'utf8');
    const result = await keys('create', '--account', 'acct_x', '--role', 'level-9', '--file', file);
    expect(result.code).toBe(1);
    expect(readFileSync(file, 'utf8')).toBe(before);
  });

  it('revoke without --key exits 1 and says which option is missing, changing nothing', async () => {
    await keys('create', '--account', 'acct_x', '--file', file);
    const before = readFileSync(file, 'utf8');
    const result = await keys('revoke', '--file', file);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^tollgate-keys: revoke needs --key <id>/);
    expect(result.stderr).not.toMatch(/\n\s+at /);
    expect(readFileSync(file, 'utf8')).toBe(before);
  });

  it('only create starts a keys file: list or revoke on a missing one exits 1 and names it', async () => {
    for (const args of [['list'], ['revoke', '--key', 'key_nope']]) {
      const result = await keys(...args, '--file', file);
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toBe(
        `tollgate-keys: keys file ${file} does not exist (create makes it: tollgate-keys create --account <id> --file ${file})\n`,
      );
      expect(existsSync(file)).toBe(false);
    }
  });

  it('revoking an unknown key exits 1 and names it', async () => {
    await keys('create', '--account', 'acct_x', '--file', file);
    const result = await keys('revoke', '--key', 'key_nope', '--file', file);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('key_nope');
  });

  describe('list, roll, set-role and set-whitelist on a keys file', () => {
    const wallets = (app: GatewayApp, secret: string) =>
      request(app).get('/api/v1/wallets/').set('Authorization', `Bearer ${secret}`);

    it('list shows every account and key with its state, never a secret or a digest', async () => {
      const first = parseCreated(
        await keys('create', '--account', 'acct_x', '--role', 'level-1', '--file', file),
      );
      const second = parseCreated(await keys('create', '--account', 'acct_y', '--file', file));
      await keys('revoke', '--key', second.keyId, '--file', file);
      await keys('set-whitelist', '--account', 'acct_x', '--entries', '10.0.0.0/8', '--file', file);
      const result = await keys('list', '--file', file);
      expect(result.code).toBe(0);
      expect(result.stdout.split('\n').filter((line) => line !== '')).toEqual([
        'acct_x  (whitelist: 10.0.0.0/8)',
        `  ${first.keyId}  level-1  ${first.publishableKey}  active`,
        'acct_y  (whitelist: any address)',
        `  ${second.keyId}  administrator  ${second.publishableKey}  revoked`,
      ]);
      for (const secret of [first.secretKey, second.secretKey]) {
        expect(result.stdout).not.toContain(secret);
        expect(result.stdout).not.toContain(sha256(secret).toString('hex'));
      }
    });

    it('roll --grace 2 issues a new pair; the old key works until the grace ends, then answers expired_api_key', async () => {
      const old = parseCreated(
        await keys('create', '--account', 'acct_x', '--role', 'level-2', '--file', file),
      );
      const before = Date.now();
      const result = await keys('roll', '--key', old.keyId, '--grace', '2', '--file', file);
      expect(result.code).toBe(0);
      const fresh = parseCreated({
        ...result,
        stdout: result.stdout.replace(/^Rolled key .*New key/m, 'Created key'),
      });
      expect(fresh.keyId).not.toBe(old.keyId);
      expect(occurrences(result.stdout, fresh.secretKey)).toBe(1);
      const document = JSON.parse(readFileSync(file, 'utf8')) as {
        accounts: { keys: { id: string; role: string; expiresAt?: string }[] }[];
      };
      const [oldEntry, freshEntry] = document.accounts[0]?.keys ?? [];
      const deadline = Date.parse(oldEntry?.expiresAt ?? '');
      expect(deadline).toBeGreaterThanOrEqual(before + 2000);
      expect(deadline).toBeLessThanOrEqual(Date.now() + 2000);
      expect(freshEntry).toMatchObject({ id: fresh.keyId, role: 'level-2' });
      expect(freshEntry?.expiresAt).toBeUndefined();

      const { app } = await gatewayOver();
      try {
        expect((await wallets(app, old.secretKey)).status).toBe(200);
        expect((await wallets(app, fresh.secretKey)).status).toBe(200);
        await new Promise((resolve) => setTimeout(resolve, deadline - Date.now() + 50));
        expectErrorBody(answerOf(await wallets(app, old.secretKey)), {
          status: 401,
          code: 'expired_api_key',
        });
        expect((await wallets(app, fresh.secretKey)).status).toBe(200);
      } finally {
        app.shutdown();
      }
    });

    it('rolls a key once: a second roll, whose grace would not shorten its deadline, is refused', async () => {
      const key = parseCreated(await keys('create', '--account', 'acct_once', '--file', file));
      expect((await keys('roll', '--key', key.keyId, '--grace', '600', '--file', file)).code).toBe(
        0,
      );
      const after = readFileSync(file, 'utf8');
      const again = await keys('roll', '--key', key.keyId, '--grace', '600', '--file', file);
      expect(again.code).toBe(1);
      expect(again.stderr).toMatch(
        new RegExp(
          `key ${key.keyId} is already rolled: it stops working at \\S+, within the grace`,
        ),
      );
      expect(readFileSync(file, 'utf8')).toBe(after);
    });

    it('roll refuses an expired key, naming the way on', async () => {
      const key = parseCreated(await keys('create', '--account', 'acct_old', '--file', file));
      const document = JSON.parse(readFileSync(file, 'utf8')) as {
        accounts: { id: string; keys: { id: string; expiresAt?: string }[] }[];
      };
      const record = document.accounts
        .flatMap((account) => account.keys)
        .find((each) => each.id === key.keyId);
      if (record === undefined) throw new Error('the key created is not in the file');
      record.expiresAt = '2000-01-01T00:00:00.000Z';
      writeFileSync(file, JSON.stringify(document));
      const before = readFileSync(file, 'utf8');
      const expired = await keys('roll', '--key', key.keyId, '--grace', '60', '--file', file);
      expect(expired.code).toBe(1);
      expect(expired.stderr).toContain(`key ${key.keyId} has expired: create a new key instead`);
      expect(readFileSync(file, 'utf8')).toBe(before);
    });

    it('roll refuses a missing or out-of-range grace and a revoked key, changing nothing', async () => {
      const key = parseCreated(await keys('create', '--account', 'acct_x', '--file', file));
      const before = readFileSync(file, 'utf8');
      for (const args of [[], ['--grace', '604801'], ['--grace', '-1'], ['--grace', '1.5']]) {
        const result = await keys('roll', '--key', key.keyId, ...args, '--file', file);
        expect(result.code).toBe(1);
        expect(result.stderr).toMatch(/--grace/);
        expect(result.stdout).not.toMatch(/sk_/);
      }
      await keys('revoke', '--key', key.keyId, '--file', file);
      const revoked = await keys('roll', '--key', key.keyId, '--grace', '60', '--file', file);
      expect(revoked.code).toBe(1);
      expect(revoked.stderr).toContain(`key ${key.keyId} is revoked: create a new key instead`);
      expect(readFileSync(file, 'utf8')).not.toBe(before);
      expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual({
        accounts: [
          {
            id: 'acct_x',
            keys: [
              {
                ...(JSON.parse(before) as { accounts: { keys: object[] }[] }).accounts[0]?.keys[0],
                revoked: true,
              },
            ],
          },
        ],
      });
    });

    it('set-role changes what the key may do, after a reload', async () => {
      const key = parseCreated(
        await keys('create', '--account', 'acct_x', '--role', 'level-2', '--file', file),
      );
      const approve = (app: GatewayApp) =>
        request(app)
          .post('/api/v1/payouts/po_1/approve/')
          .set('Authorization', `Bearer ${key.secretKey}`);
      const { app, store } = await gatewayOver();
      try {
        expectErrorBody(answerOf(await approve(app)), { status: 403, code: 'insufficient_role' });
        const result = await keys(
          'set-role',
          '--key',
          key.keyId,
          '--role',
          'level-3',
          '--file',
          file,
        );
        expect(result.code).toBe(0);
        await store.reload();
        expect((await approve(app)).status).toBe(200);
        const bad = await keys('set-role', '--key', key.keyId, '--role', 'owner', '--file', file);
        expect(bad.code).toBe(1);
        expect(bad.stderr).toContain('unknown role');
      } finally {
        app.shutdown();
      }
    });

    it('set-whitelist restricts the account, refuses a bad entry by name, and --none lifts it', async () => {
      const key = parseCreated(await keys('create', '--account', 'acct_x', '--file', file));
      const restricted = await keys(
        'set-whitelist',
        '--account',
        'acct_x',
        '--entries',
        '203.0.113.0/24, 2001:db8::/32',
        '--file',
        file,
      );
      expect(restricted.code).toBe(0);
      const { app, store } = await gatewayOver();
      try {
        expectErrorBody(answerOf(await wallets(app, key.secretKey)), {
          status: 403,
          code: 'ip_not_whitelisted',
        });
        const before = readFileSync(file, 'utf8');
        const bad = await keys(
          'set-whitelist',
          '--account',
          'acct_x',
          '--entries',
          '10.0.0.1/33',
          '--file',
          file,
        );
        expect(bad.code).toBe(1);
        expect(bad.stderr).toContain('ipWhitelist[0] "10.0.0.1/33"');
        expect(readFileSync(file, 'utf8')).toBe(before);
        const both = await keys(
          'set-whitelist',
          '--account',
          'acct_x',
          '--none',
          '--entries',
          '10.0.0.0/8',
          '--file',
          file,
        );
        expect(both.code).toBe(1);
        const lifted = await keys('set-whitelist', '--account', 'acct_x', '--none', '--file', file);
        expect(lifted.code).toBe(0);
        await store.reload();
        expect((await wallets(app, key.secretKey)).status).toBe(200);
      } finally {
        app.shutdown();
      }
    });

    it('prints its usage as the installed command, and refuses an unknown command with it', async () => {
      const help = await keys('--help');
      expect(help.stdout).toMatch(/^usage: tollgate-keys <command>/);
      for (const verb of ['list', 'create', 'roll', 'revoke', 'set-role', 'set-whitelist']) {
        expect(help.stdout).toContain(`\n  ${verb}`);
      }
      const bare = await keys();
      expect(bare.code).toBe(1);
      expect(bare.stdout).toBe('');
      expect(bare.stderr).toMatch(/^tollgate-keys: a command is required\nusage: tollgate-keys/);
      const unknown = await keys('rotate', '--file', file);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toMatch(
        /^tollgate-keys: unknown command "rotate"\nusage: tollgate-keys/,
      );
    });
  });
});
