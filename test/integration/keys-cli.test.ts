import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { createApp, type GatewayApp } from '../../gateway/app';
import { DEFAULT_LIMITS } from '../../gateway/config';
import { keyShape } from '../../lib/keys/key-format';
import { FileKeyStore, sha256 } from '../../lib/keys/key-store';
import { ROLES } from '../../lib/core/roles';
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

  it('revoking an unknown key exits 1 and names it', async () => {
    await keys('create', '--account', 'acct_x', '--file', file);
    const result = await keys('revoke', '--key', 'key_nope', '--file', file);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('key_nope');
  });
});
