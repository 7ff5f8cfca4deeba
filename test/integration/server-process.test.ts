import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { generateKey } from '../../lib/model/key-format';
import { sha256 } from '../../lib/keys/key-store';
import { ROLES } from '../../lib/model/roles';
import { expectErrorBody } from '../helpers/error-body';
import { findLeaks } from '../helpers/logs';
import {
  childEnv,
  distScript,
  httpRequest,
  NodeProcess,
  occurrences,
  ROOT,
  runNode,
} from '../helpers/process';
import { freePort } from '../helpers/redis';
import { startRecordingUpstream, type RecordingUpstream } from '../helpers/upstream';

/**
 * `node dist/gateway/server.js` as operators run it: demo credentials,
 * refusal of invalid configuration, SIGHUP reload of the keys file, SIGTERM drain.
 */

const TOKEN_SECRET = 'server-process-test-secret-0123456789-abcdefgh';

interface KeyPair {
  readonly id: string;
  readonly publishableKey: string;
  readonly secretKey: string;
}

function newKeyPair(id: string): KeyPair {
  return {
    id,
    publishableKey: generateKey('publishable', 'test'),
    secretKey: generateKey('secret', 'test'),
  };
}

function keysDocument(pairs: readonly KeyPair[], ipWhitelist?: readonly string[]): string {
  const account = {
    id: 'acct_proc',
    ...(ipWhitelist === undefined ? {} : { ipWhitelist }),
    keys: pairs.map((pair) => ({
      id: pair.id,
      publishableKey: pair.publishableKey,
      secretKeySha256: sha256(pair.secretKey).toString('hex'),
      role: 'administrator',
    })),
  };
  return `${JSON.stringify({ accounts: [account] }, null, 2)}\n`;
}

describe('the gateway process (dist/gateway/server.js)', () => {
  const server = distScript('gateway/server.js');
  let directory: string;
  const running: NodeProcess[] = [];

  const start = async (
    env: Record<string, string>,
  ): Promise<{ gateway: NodeProcess; port: number }> => {
    const port = await freePort();
    const gateway = new NodeProcess(server, [], { PORT: String(port), HOST: '127.0.0.1', ...env });
    running.push(gateway);
    await gateway.waitForEntry((entry) => entry.event === 'gateway.started');
    return { gateway, port };
  };

  beforeEach(() => {
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-process-'));
  });
  afterEach(async () => {
    for (const child of running.splice(0)) await child.stop();
    rmSync(directory, { recursive: true, force: true });
  });

  it('says at start which optional features are on', async () => {
    const plain = await start({});
    const adminTokenSha256 = sha256('server-process-admin-token').toString('hex');
    const managed = await start({
      TOLLGATE_ADMIN_PORT: String(await freePort()),
      TOLLGATE_ADMIN_TOKEN_SHA256: adminTokenSha256,
      TOLLGATE_IDEMPOTENCY_REQUIRED: '/api/v1/payouts/',
    });
    const started = (gateway: NodeProcess): Record<string, unknown> | undefined =>
      gateway.entries().find((entry) => entry.event === 'gateway.started');
    expect(started(plain.gateway)).toMatchObject({
      keys: 'demo',
      tracing: 'off',
      idempotency: { store: 'memory', required: [] },
      secret_scanning: 'off',
      key_management: 'off',
      dashboard: 'off',
    });
    expect(started(managed.gateway)).toMatchObject({
      idempotency: { store: 'memory', required: ['/api/v1/payouts/'] },
      key_management: 'read-only',
      dashboard: 'on',
    });
  });

  it('without a keys file, prints demo credentials once, and they work', async () => {
    const { gateway, port } = await start({});
    const block = /^\s+(\S+)\s+key id (\S+)\n\s+publishable (\S+)\n\s+secret\s+(\S+)$/gm;
    // On stderr, apart from the JSON lines of stdout.
    const printed = [...gateway.stderr.matchAll(block)].map((match) => ({
      role: match[1] ?? '',
      publishableKey: match[3] ?? '',
      secretKey: match[4] ?? '',
    }));
    expect(printed.map((entry) => entry.role)).toEqual([...ROLES]);
    expect(occurrences(gateway.stderr, 'Demo account')).toBe(1);
    expect(
      gateway.stdout.split('\n').filter((line) => line !== '' && !line.startsWith('{')),
    ).toEqual([]);

    const admin = printed.find((entry) => entry.role === 'administrator');
    const level1 = printed.find((entry) => entry.role === 'level-1');
    if (admin === undefined || level1 === undefined)
      throw new Error('demo credentials not printed');
    const exchange = await httpRequest({
      port,
      method: 'POST',
      path: '/api/v1/auth/generate-token/',
      json: { api_key: admin.publishableKey, api_secret: admin.secretKey },
    });
    expect(exchange.status).toBe(200);
    const token = exchange.body?.token as string;
    const wallets = await httpRequest({
      port,
      path: '/api/v1/wallets/',
      headers: { authorization: `Bearer ${token}` },
    });
    expect(wallets.status).toBe(200);
    expect(wallets.body?.account_id).toBe('acct_demo');
    expect(Array.isArray(wallets.body?.wallets)).toBe(true);
    const withSecret = await httpRequest({
      port,
      path: '/api/v1/wallets/',
      headers: { authorization: `Bearer ${level1.secretKey}` },
    });
    expect(withSecret.status).toBe(200);

    // Printed once, never logged: each secret appears exactly once in all the output.
    const output = gateway.stdout + gateway.stderr;
    for (const entry of printed) expect(occurrences(output, entry.secretKey)).toBe(1);
    expect(
      findLeaks(JSON.stringify(gateway.entries()), [
        ...printed.map((entry) => entry.secretKey),
        token,
      ]),
    ).toEqual([]);
    expect(
      gateway
        .entries()
        .some((entry) => entry.event === 'config.token_secret' && entry.level === 'warn'),
    ).toBe(true);
  });

  describe('invalid configuration: exit code 1 and exactly one line on stderr naming the culprit', () => {
    const cases: readonly (readonly [string, (dir: string) => Record<string, string>, RegExp])[] = [
      [
        'TOLLGATE_TRUST_PROXY=true',
        () => ({ TOLLGATE_TRUST_PROXY: 'true' }),
        /TOLLGATE_TRUST_PROXY/,
      ],
      [
        'a 31-byte TOLLGATE_TOKEN_SECRET',
        () => ({ TOLLGATE_TOKEN_SECRET: 'x'.repeat(31) }),
        /TOLLGATE_TOKEN_SECRET/,
      ],
      [
        'NODE_ENV=production without TOLLGATE_TOKEN_SECRET',
        () => ({ NODE_ENV: 'production' }),
        /TOLLGATE_TOKEN_SECRET/,
      ],
      [
        'a non-numeric TOLLGATE_TOKEN_TTL_SECONDS',
        () => ({ TOLLGATE_TOKEN_TTL_SECONDS: '30m' }),
        /TOLLGATE_TOKEN_TTL_SECONDS/,
      ],
      [
        'a keys file with a bad whitelist entry',
        (dir) => {
          const file = path.join(dir, 'keys.json');
          writeFileSync(file, keysDocument([newKeyPair('key_one')], ['127.0.0.1', '10.0.0.0/33']));
          return { TOLLGATE_KEYS_FILE: file };
        },
        /ipWhitelist\[1\].*10\.0\.0\.0\/33/,
      ],
      [
        'a misspelt setting, TOLLGATE_KEY_FILE for TOLLGATE_KEYS_FILE',
        () => ({ TOLLGATE_KEY_FILE: '/etc/tollgate/keys.json' }),
        /TOLLGATE_KEY_FILE is not a Tollgate setting \(did you mean TOLLGATE_KEYS_FILE\?\)/,
      ],
      [
        'a setting in the wrong case',
        () => ({ TOLLGATE_Trust_Proxy: 'loopback' }),
        /TOLLGATE_Trust_Proxy is not a Tollgate setting \(did you mean TOLLGATE_TRUST_PROXY\?\)/,
      ],
      [
        'a keys file that does not exist',
        (dir) => ({ TOLLGATE_KEYS_FILE: path.join(dir, 'missing.json') }),
        /missing\.json/,
      ],
    ];

    it.each(cases)('%s', async (_name, envOf, culprit) => {
      const port = await freePort();
      const result = await runNode(server, [], {
        PORT: String(port),
        HOST: '127.0.0.1',
        ...envOf(directory),
      });
      expect(result.code).toBe(1);
      const lines = result.stderr.split('\n').filter((line) => line !== '');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(culprit);
      expect(result.stdout).not.toContain('gateway.started');
      await expect(httpRequest({ port, path: '/healthz' })).rejects.toThrow(/ECONNREFUSED/);
    });
  });

  it('`npm start` passes SIGTERM on: the gateway drains and stops, and the port is free', async () => {
    const port = await freePort();
    // --ignore-scripts skips `prestart` (the build): `npm test` has built dist/ already.
    const npm = spawn('npm', ['start', '--ignore-scripts'], {
      cwd: ROOT,
      env: childEnv({ PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'info' }),
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group: whatever npm leaves behind can be killed with it.
      detached: true,
    });
    let output = '';
    npm.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    npm.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    const exited = new Promise<number | null>((resolve) => npm.once('exit', resolve));
    try {
      const deadline = Date.now() + 15_000;
      while (!output.includes('gateway.started')) {
        if (Date.now() > deadline) throw new Error(`npm start did not start:\n${output}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect((await httpRequest({ port, path: '/healthz' })).status).toBe(200);

      npm.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(output).toContain('gateway.stopping');
      await expect(httpRequest({ port, path: '/healthz' })).rejects.toThrow(/ECONNREFUSED/);
    } finally {
      try {
        process.kill(-(npm.pid ?? 0), 'SIGKILL');
      } catch {
        // The group is gone: nothing was left behind.
      }
    }
  });

  it('a port already in use: exit code 1 and one line naming the address, no stack', async () => {
    const blocker = net.createServer();
    await new Promise<void>((resolve) => {
      blocker.listen(0, '127.0.0.1', resolve);
    });
    const { port } = blocker.address() as net.AddressInfo;
    try {
      const result = await runNode(server, [], { PORT: String(port), HOST: '127.0.0.1' });
      expect(result.code).toBe(1);
      const lines = result.stderr.split('\n').filter((line) => line !== '');
      expect(lines).toEqual([
        `tollgate: configuration error: 127.0.0.1:${port} is already in use (another process listens there; set PORT or HOST)`,
      ]);
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });

  describe('with a keys file and an upstream', () => {
    let upstream: RecordingUpstream;

    beforeEach(async () => {
      upstream = await startRecordingUpstream();
    });
    afterEach(async () => {
      await upstream.close();
    });

    it('SIGHUP reloads the keys file; a broken file leaves the old keys in force and logs why', async () => {
      const file = path.join(directory, 'keys.json');
      const first = newKeyPair('key_first');
      const second = newKeyPair('key_second');
      writeFileSync(file, keysDocument([first]));
      const { gateway, port } = await start({
        TOLLGATE_KEYS_FILE: file,
        TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
        TOLLGATE_UPSTREAM_URL: upstream.url,
      });
      const wallets = (pair: KeyPair) =>
        httpRequest({
          port,
          path: '/api/v1/wallets/',
          headers: { authorization: `Bearer ${pair.secretKey}` },
        });

      expect((await wallets(first)).status).toBe(200);
      expectErrorBody(await wallets(second), {
        status: 401,
        code: 'invalid_api_key',
        message: 'Invalid API key',
      });

      writeFileSync(file, keysDocument([first, second]));
      let seen = gateway.entries().length;
      gateway.kill('SIGHUP');
      expect(
        await gateway.waitForEntry((entry) => entry.event === 'keys.reloaded', seen),
      ).toMatchObject({ keys: 2 });
      expect((await wallets(second)).status).toBe(200);
      expect((await wallets(first)).status).toBe(200);
      expect(upstream.requests.map((request) => request.headers['x-gateway-key-id'])).toEqual([
        'key_first',
        'key_second',
        'key_first',
      ]);

      writeFileSync(file, keysDocument([newKeyPair('key_third')], ['not-an-address']));
      seen = gateway.entries().length;
      gateway.kill('SIGHUP');
      const failure = await gateway.waitForEntry(
        (entry) => entry.event === 'keys.reload_failed',
        seen,
      );
      // The entry is named by its place: one not shaped like an address is never echoed.
      expect(failure.reason).toMatch(/accounts\[0\]\.ipWhitelist\[0\] is not an IPv4 address/);
      expect(failure.reason).not.toContain('not-an-address');
      expect((await wallets(first)).status).toBe(200);
      expect((await wallets(second)).status).toBe(200);
      expect(gateway.running).toBe(true);

      writeFileSync(file, '{"accounts": [');
      seen = gateway.entries().length;
      gateway.kill('SIGHUP');
      expect(
        (await gateway.waitForEntry((entry) => entry.event === 'keys.reload_failed', seen)).reason,
      ).toMatch(/JSON/);
      expect((await wallets(second)).status).toBe(200);
      expect(
        findLeaks(gateway.stdout + gateway.stderr, [first.secretKey, second.secretKey]),
      ).toEqual([]);
    });

    it('SIGTERM drains an in-flight request: it completes with 200 and the process exits 0', async () => {
      const file = path.join(directory, 'keys.json');
      const pair = newKeyPair('key_drain');
      writeFileSync(file, keysDocument([pair]));
      const upstreamDelayMs = 1000;
      upstream.respond = (_request, res) => {
        setTimeout(() => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end('{"slow":true}');
        }, upstreamDelayMs);
      };
      const { gateway, port } = await start({
        TOLLGATE_KEYS_FILE: file,
        TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
        TOLLGATE_UPSTREAM_URL: upstream.url,
      });

      const inFlight = httpRequest({
        port,
        path: '/api/v1/wallets/',
        headers: { authorization: `Bearer ${pair.secretKey}` },
      });
      const deadline = Date.now() + 5000;
      while (upstream.requests.length === 0 && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 10));
      expect(upstream.requests).toHaveLength(1);

      const seen = gateway.entries().length;
      gateway.kill('SIGTERM');
      await gateway.waitForEntry((entry) => entry.event === 'gateway.stopping', seen);
      // No new connections once draining.
      await expect(httpRequest({ port, path: '/healthz' })).rejects.toThrow(/ECONNREFUSED/);

      const answer = await inFlight;
      expect(answer.status).toBe(200);
      expect(answer.text).toBe('{"slow":true}');
      expect(await gateway.exited).toEqual({ code: 0, signal: null });
    });
  });
});
