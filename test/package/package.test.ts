import { type ChildProcess, execFile, spawn } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { generateKey, sha256 } from '../../lib';

/**
 * The kit as users get it: `npm pack` on this checkout (its `prepack` builds),
 * the tarball installed into throwaway apps on Express 5 and on Express 4, written in CommonJS,
 * in ESM and in TypeScript (`node16` resolution, type-checked), each protecting a route with one
 * `protect()` call and answered over real HTTP. The npm registry must be reachable: nothing skips.
 */

const run = promisify(execFile);
const ROOT = path.join(__dirname, '..', '..');
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const SETUP_TIMEOUT_MS = 300_000;

/**
 * A folder for the throwaway apps from which no `pg` can be found: Node looks for a package in
 * every ancestor's `node_modules`, so a `pg` installed above the temporary folder (by a benchmark
 * or another project on the machine) would answer the key command's database check.
 */
function workBase(): string {
  const candidates = [tmpdir(), '/var/tmp', homedir()];
  const clean = candidates.find((base) => {
    for (let dir = path.resolve(base); ; dir = path.dirname(dir)) {
      if (existsSync(path.join(dir, 'node_modules', 'pg'))) return false;
      if (path.dirname(dir) === dir) return true;
    }
  });
  if (clean === undefined) {
    throw new Error(`every candidate folder has a pg above it: ${candidates.join(', ')}`);
  }
  return clean;
}

const MAJORS = [
  { label: 'Express 5', express: 'express@5.3.0', types: '@types/express@5.0.6' },
  { label: 'Express 4', express: 'express@4.22.3', types: '@types/express@^4.17.21' },
] as const;

const KEYS = {
  level2: { id: 'key_l2', role: 'level-2', secret: generateKey('secret', 'test') },
  level1: { id: 'key_l1', role: 'level-1', secret: generateKey('secret', 'test') },
} as const;
const KEYS_DOCUMENT = JSON.stringify({
  accounts: [
    {
      id: 'acct_pkg',
      keys: Object.values(KEYS).map((key) => ({
        id: key.id,
        role: key.role,
        publishableKey: generateKey('publishable', 'test'),
        secretKeySha256: sha256(key.secret).toString('hex'),
      })),
    },
  ],
});

/** The package's entries, as package.json `exports` lists them. */
const PACKAGE_ENTRIES = [
  'tollgate',
  'tollgate/core',
  'tollgate/express',
  'tollgate/forward-auth',
  'tollgate/postgres',
  'tollgate/redis',
] as const;

/**
 * The same app in three module systems; each prints `PORT <n>` once listening. `entries.cjs` and
 * `entries.mjs` print the runtime names of every entry, loaded with `require` and with `import`.
 */
const SOURCES = {
  'app.cjs': `
const express = require('express');
const { KeyRing, TokenService, tollgate } = require('tollgate');
const gate = tollgate({
  keyStore: KeyRing.fromDocument(JSON.parse(process.env.KEYS_DOCUMENT)),
  tokens: new TokenService({ secret: 'package-test-token-secret-0123456789abcdef' }),
  scopes: { orders: { limit: 2, per: 'account' }, payouts: { limit: 100, per: 'account' } },
  idempotency: { secret: 'package-test-idempotency-secret-0123456789abcdef' },
});
const app = express();
app.use(gate.context());
app.get('/orders', gate.protect({ accept: ['secret'], role: 'level-2', limit: 'orders' }), (req, res) => {
  res.json({ account: req.auth.accountId, module: 'cjs' });
});
let payouts = 0;
app.post('/payouts', gate.protect({ accept: ['secret'], role: 'level-2', limit: 'payouts', idempotency: 'required' }), (req, res) => {
  payouts += 1;
  res.status(201).json({ payout: payouts, amount: req.body.amount, module: 'cjs' });
});
app.use(gate.errorHandler());
const server = app.listen(0, '127.0.0.1', () => console.log('PORT ' + server.address().port));
`,
  'app.mjs': `
import express from 'express';
import { KeyRing, TokenService, tollgate } from 'tollgate';
const gate = tollgate({
  keyStore: KeyRing.fromDocument(JSON.parse(process.env.KEYS_DOCUMENT)),
  tokens: new TokenService({ secret: 'package-test-token-secret-0123456789abcdef' }),
  scopes: { orders: { limit: 2, per: 'account' }, payouts: { limit: 100, per: 'account' } },
  idempotency: { secret: 'package-test-idempotency-secret-0123456789abcdef' },
});
const app = express();
app.use(gate.context());
app.get('/orders', gate.protect({ accept: ['secret'], role: 'level-2', limit: 'orders' }), (req, res) => {
  res.json({ account: req.auth.accountId, module: 'esm' });
});
let payouts = 0;
app.post('/payouts', gate.protect({ accept: ['secret'], role: 'level-2', limit: 'payouts', idempotency: 'required' }), (req, res) => {
  payouts += 1;
  res.status(201).json({ payout: payouts, amount: req.body.amount, module: 'esm' });
});
app.use(gate.errorHandler());
const server = app.listen(0, '127.0.0.1', () => console.log('PORT ' + server.address().port));
`,
  'app.ts': `
import type { AddressInfo } from 'node:net';
import express from 'express';
import { KeyRing, TokenService, tollgate } from 'tollgate';

const gate = tollgate({
  keyStore: KeyRing.fromDocument(JSON.parse(process.env.KEYS_DOCUMENT ?? '{}')),
  tokens: new TokenService({ secret: 'package-test-token-secret-0123456789abcdef' }),
  scopes: { orders: { limit: 2, per: 'account' }, payouts: { limit: 100, per: 'account' } },
  idempotency: { secret: 'package-test-idempotency-secret-0123456789abcdef' },
});
const app = express();
app.use(gate.context());
app.get('/orders', gate.protect({ accept: ['secret'], role: 'level-2', limit: 'orders' }), (req, res) => {
  const account: string | undefined = req.auth?.accountId;
  res.json({ account, module: 'ts' });
});
let payouts = 0;
app.post(
  '/payouts',
  gate.protect({ accept: ['secret'], role: 'level-2', limit: 'payouts', idempotency: 'required' }),
  (req, res) => {
    payouts += 1;
    const amount: unknown = (req.body as { amount?: unknown }).amount;
    res.status(201).json({ payout: payouts, amount, module: 'ts' });
  },
);
app.use(gate.errorHandler());
const server = app.listen(0, '127.0.0.1', () => {
  console.log('PORT ' + String((server.address() as AddressInfo).port));
});

// Each subpath's types resolve under node16 resolution.
export type Subpaths = [
  import('tollgate/core').Gate,
  import('tollgate/express').RateLimiter,
  import('tollgate/forward-auth').AuthzAnswer,
  import('tollgate/postgres').KeyView,
  import('tollgate/redis').LimiterRedisConnection,
];
`,
  'entries.cjs': `
const ENTRIES = ${JSON.stringify(PACKAGE_ENTRIES)};
const entries = {};
for (const entry of ENTRIES) entries[entry] = Object.keys(require(entry)).sort();
console.log(JSON.stringify(entries));
`,
  'entries.mjs': `
const ENTRIES = ${JSON.stringify(PACKAGE_ENTRIES)};
const entries = {};
for (const entry of ENTRIES) entries[entry] = Object.keys(await import(entry)).sort();
console.log(JSON.stringify(entries));
`,
  // Wrong calls a JavaScript user makes, each caught and printed as { label: message }; then one
  // request to an app whose chain is mounted out of order, with no logger anywhere.
  'misuse.cjs': `
const http = require('node:http');
const express = require('express');
const { KeyRing, TokenService, tollgate } = require('tollgate');
const { authenticate, errorHandler, requireRole, requireWhitelistedIp } = require('tollgate/express');
const keyStore = KeyRing.fromDocument(JSON.parse(process.env.KEYS_DOCUMENT));
const secret = 'package-test-token-secret-0123456789abcdef';
const gate = tollgate({ keyStore, scopes: { orders: { limit: 10, per: 'account' } } });
const calls = {
  whitelst: () => requireWhitelistedIp({ whitelst: ['10.0.0.0/8'] }),
  method: () => gate.cors({ method: ['POST'] }),
  ttl: () => new TokenService({ secret, ttl: 60 }),
  windowMs: () => tollgate({ keyStore, scopes: { orders: { limit: 10, windowMs: 1000 } } }),
  keystore: () => authenticate({ keystore: keyStore }),
  protectNothing: () => gate.protect(),
  tokenExchangeNothing: () => gate.tokenExchange(),
  scopes: () => tollgate({ keyStore }),
  limit: () => gate.protect({ accept: ['secret'] }),
  limt: () => gate.tokenExchange({ limt: 'orders' }),
};
const messages = {};
for (const [label, call] of Object.entries(calls)) {
  try {
    call();
    messages[label] = 'no error';
  } catch (error) {
    messages[label] = error.constructor.name + ': ' + error.message;
  }
}
const app = express();
app.use(gate.context());
// A list given as a route's ipWhitelist is that route's own whitelist.
app.get('/listed', gate.protect({ accept: ['secret'], ipWhitelist: ['10.0.0.0/8'], limit: 'orders' }), (req, res) => res.json({}));
app.get('/mis-mounted', requireRole('level-1'), (req, res) => res.json({}));
app.use(errorHandler());
const statusOf = (port, path) =>
  new Promise((resolve) => {
    const headers = { Authorization: 'Bearer ' + process.env.SECRET };
    http.get({ host: '127.0.0.1', port, path, headers }, (res) => {
      let body = '';
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () => resolve(res.statusCode + ' ' + JSON.parse(body).code));
    });
  });
const server = app.listen(0, '127.0.0.1', async () => {
  const port = server.address().port;
  const listed = await statusOf(port, '/listed');
  const misMounted = await statusOf(port, '/mis-mounted');
  console.log(JSON.stringify({ messages, listed, misMounted }));
  server.close();
  gate.close();
});
`,
  'tsconfig.json': JSON.stringify({
    compilerOptions: {
      module: 'node16',
      moduleResolution: 'node16',
      target: 'es2022',
      strict: true,
      esModuleInterop: true,
      skipLibCheck: false,
      types: ['node'],
      outDir: 'out',
    },
    files: ['app.ts'],
  }),
};

interface Reply {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Record<string, unknown>;
}

function get(port: number, secret: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: '127.0.0.1', port, path: '/orders', headers: { Authorization: `Bearer ${secret}` } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: JSON.parse(text) as Record<string, unknown>,
          });
        });
      },
    );
    req.on('error', reject);
  });
}

interface RawReply {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly text: string;
}

/** POST /payouts with a JSON body and, when given, an Idempotency-Key. */
function postPayout(
  port: number,
  secret: string,
  body: string,
  idempotencyKey?: string,
): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/payouts',
        headers: {
          Authorization: `Bearer ${secret}`,
          'Content-Type': 'application/json',
          'Content-Length': String(Buffer.byteLength(body)),
          ...(idempotencyKey === undefined ? {} : { 'Idempotency-Key': idempotencyKey }),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Starts `node <entry>` in `dir` and resolves with its port once it prints it. */
function startApp(dir: string, entry: string): Promise<{ child: ChildProcess; port: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [entry], {
      cwd: dir,
      env: { PATH: process.env.PATH, KEYS_DOCUMENT },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const onData = (chunk: Buffer): void => {
      output += chunk.toString('utf8');
      const match = /PORT (\d+)/.exec(output);
      if (match?.[1] !== undefined) resolve({ child, port: Number(match[1]) });
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => {
      reject(new Error(`${entry} exited with ${String(code)}:\n${output}`));
    });
  });
}

function expectErrorBody(reply: Reply, status: number, code: string): void {
  expect({ status: reply.status, body: reply.body }).toEqual({
    status,
    body: {
      status,
      code,
      message: expect.any(String) as unknown,
      request_id: expect.any(String) as unknown,
      // A 429 names the limit that refused.
      ...(status === 429 ? { scope: expect.stringMatching(/^[a-z][a-z0-9-]*$/) as unknown } : {}),
    },
  });
}

describe('the packed kit, installed into fresh apps', () => {
  let work = '';
  let tarball: string;
  const appDirs = new Map<string, string>();
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    work = mkdtempSync(path.join(workBase(), 'tollgate-package-'));
    // A checkout without dist/, as a clean clone is: `npm pack` must build it (prepack), and the
    // build must not touch this checkout's dist/, which other tests are running.
    const checkout = path.join(work, 'checkout');
    const tracked = await run('git', ['ls-files', '-z'], {
      cwd: ROOT,
      maxBuffer: 16 * 1024 * 1024,
    });
    for (const file of tracked.stdout.split('\0').filter((name) => name !== '')) {
      if (!existsSync(path.join(ROOT, file))) continue;
      mkdirSync(path.dirname(path.join(checkout, file)), { recursive: true });
      copyFileSync(path.join(ROOT, file), path.join(checkout, file));
    }
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(checkout, 'node_modules'), 'dir');
    expect(existsSync(path.join(checkout, 'dist'))).toBe(false);
    const packed = await run('npm', ['pack', '--silent', '--pack-destination', work], {
      cwd: checkout,
      maxBuffer: 16 * 1024 * 1024,
    });
    const name = packed.stdout.trim().split('\n').pop() ?? '';
    tarball = path.join(work, name);
    for (const major of MAJORS) {
      const dir = path.join(work, major.label.replace(' ', '-').toLowerCase());
      mkdirSync(dir, { recursive: true });
      writeFileSync(
        path.join(dir, 'package.json'),
        JSON.stringify({ name: 'throwaway-app', version: '1.0.0', private: true }),
      );
      for (const [file, text] of Object.entries(SOURCES)) writeFileSync(path.join(dir, file), text);
      await run(
        'npm',
        [
          'install',
          '--no-audit',
          '--no-fund',
          '--prefer-offline',
          '--ignore-scripts',
          tarball,
          major.express,
          major.types,
          '@types/node@20',
        ],
        { cwd: dir, maxBuffer: 16 * 1024 * 1024 },
      );
      await run(process.execPath, [TSC, '-p', dir], { cwd: dir });
      appDirs.set(major.label, dir);
    }
  }, SETUP_TIMEOUT_MS);

  afterAll(() => {
    for (const child of children) child.kill('SIGKILL');
    if (work !== '') rmSync(work, { recursive: true, force: true });
  });

  it('ships the built library, its types, the ESM entries, the key command and the SQL migrations, and nothing else', async () => {
    const { stdout } = await run('tar', ['tzf', tarball]);
    const files = stdout.trim().split('\n');
    expect(files).toEqual(
      expect.arrayContaining([
        'package/dist/lib/index.js',
        'package/dist/lib/index.d.ts',
        'package/dist/esm/index.mjs',
        'package/dist/esm/core.mjs',
        'package/dist/esm/express.mjs',
        'package/dist/esm/forward-auth.mjs',
        'package/dist/esm/postgres.mjs',
        'package/dist/esm/redis.mjs',
        'package/dist/gateway/keys-cli.js',
        'package/dist/gateway/keys-cli/database-commands.js',
        // PgKeyStore.migrate() applies them; PgKeyStore.open() checks the database against them.
        'package/migrations/001_keys.sql',
        'package/migrations/002_limits_and_permissions.sql',
        'package/package.json',
      ]),
    );
    const unexpected = files.filter(
      (file) =>
        !/^package\/(dist\/lib\/.+\.(js|d\.ts)|dist\/esm\/[a-z-]+\.mjs|dist\/gateway\/keys-cli(\.js|\/[a-z-]+\.js)|migrations\/\d{3}_[a-z0-9_]+\.sql|package\.json|README\.md|SECURITY\.md|CHANGELOG\.md)$/.test(
          file,
        ),
    );
    expect(unexpected).toEqual([]);
  });

  it.each(MAJORS.map((major) => major.label))(
    '%s: every entry loads with require and with import, the same names, the root at most 40',
    async (label) => {
      const dir = appDirs.get(label) ?? '';
      const loaded = await Promise.all(
        ['entries.cjs', 'entries.mjs'].map(async (script) => {
          const { stdout } = await run(process.execPath, [script], { cwd: dir });
          return JSON.parse(stdout) as Record<string, string[]>;
        }),
      );
      const [required, imported] = loaded;
      expect(Object.keys(required ?? {})).toEqual(PACKAGE_ENTRIES);
      expect(imported).toEqual(required);
      for (const entry of PACKAGE_ENTRIES) expect(required?.[entry]?.length).toBeGreaterThan(0);
      const root = required?.tollgate ?? [];
      expect(root.length).toBeLessThanOrEqual(40);
      expect(root).toEqual(
        expect.arrayContaining(['tollgate', 'FileKeyStore', 'KeyRing', 'TokenService']),
      );
      // Neither pg nor ioredis is installed here: no entry loads one before it is used. What moved
      // behind a subpath, or became internal, is not in the root.
      for (const name of [
        'createGate',
        'createLimiterRedis',
        'PgKeyStore',
        'authenticate',
        'RateLimitedError',
        'ADMIT_SCRIPT',
      ]) {
        expect(root).not.toContain(name);
      }
      expect(required?.['tollgate/redis']).toContain('createLimiterRedis');
      expect(required?.['tollgate/postgres']).toContain('PgKeyStore');
      expect(required?.['tollgate/core']).toContain('createGate');
      // Each name in one entry; an ES module gets the named exports only, no untyped default.
      const names = Object.values(required ?? {}).flat();
      expect(names.filter((name, index) => names.indexOf(name) !== index)).toEqual([]);
      expect(names).not.toContain('default');
    },
  );

  it('a wrong option throws when called, naming it; a misconfiguration without a logger is written to stderr', async () => {
    const dir = appDirs.get('Express 5') ?? '';
    const { stdout, stderr } = await run(process.execPath, ['misuse.cjs'], {
      cwd: dir,
      env: { PATH: process.env.PATH, KEYS_DOCUMENT, SECRET: KEYS.level2.secret },
    });
    const { messages, listed, misMounted } = JSON.parse(stdout) as {
      messages: Record<string, string>;
      listed: string;
      misMounted: string;
    };
    const expected: Record<string, RegExp> = {
      whitelst: /ConfigurationError: requireWhitelistedIp\(\): unknown option "whitelst"/,
      method: /ConfigurationError: cors\(\): unknown option "method"/,
      ttl: /ConfigurationError: TokenService: unknown option "ttl"/,
      windowMs: /ConfigurationError: tollgate\(\): .*unknown option "windowMs"/,
      keystore: /ConfigurationError: authenticate\(\): unknown option "keystore"/,
      protectNothing: /ConfigurationError: protect\(\): expected an options object/,
      tokenExchangeNothing: /ConfigurationError: tokenExchange\(\): expected an options object/,
      scopes: /ConfigurationError: tollgate\(\): scopes is required/,
      limit: /ConfigurationError: protect\(\): limit is required .*orders/,
      limt: /ConfigurationError: tokenExchange\(\): unknown option "limt"/,
    };
    expect(Object.keys(messages)).toEqual(Object.keys(expected));
    for (const [label, pattern] of Object.entries(expected)) {
      expect(`${label}: ${messages[label] ?? ''}`).toMatch(
        new RegExp(`^${label}: ${pattern.source}`),
      );
    }
    expect(listed).toBe('403 ip_not_whitelisted');
    expect(misMounted).toBe('500 internal_error');
    expect(stderr).toMatch(/\(node:\d+\) \[TOLLGATE_[A-Z_]+\] .*requireRole/);
  });

  it('the installed tollgate-keys runs: its usage, a keys file, and without pg one line for a database', async () => {
    const dir = appDirs.get('Express 5') ?? '';
    const bin = path.join(dir, 'node_modules', '.bin', 'tollgate-keys');
    const help = await run(bin, ['--help'], { cwd: dir });
    expect(help.stdout).toMatch(
      /^usage: tollgate-keys <command> \[--file keys\.json \| --database-url/,
    );
    const created = await run(bin, ['create', '--account', 'acct_bin', '--file', 'bin-keys.json'], {
      cwd: dir,
    });
    expect(created.stdout).toMatch(
      /^Created key \S+ \(administrator\) for account acct_bin in bin-keys\.json\./,
    );
    // pg is an optional peer dependency, not installed here.
    const refused = await run(
      bin,
      ['list', '--database-url', 'postgres://tollgate:pw-in-url@127.0.0.1:1/tollgate'],
      { cwd: dir },
    ).then(
      () => ({ code: 0, stderr: '' }),
      (error: unknown) => error as { code: number; stderr: string },
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      'tollgate-keys: cannot use the database postgres://tollgate:***@127.0.0.1:1/tollgate: TOLLGATE_DATABASE_URL (the PostgreSQL key store) needs the package pg: npm install pg\n',
    );
  });

  it.each(MAJORS.map((major) => major.label))(
    '%s: installing the kit brings neither the gateway dependencies nor the Redis packages',
    (label) => {
      const modules = readdirSync(path.join(appDirs.get(label) ?? '', 'node_modules'));
      expect(modules).toContain('tollgate');
      expect(
        modules.filter((name) => ['pino', 'undici', 'ioredis', 'rate-limit-redis'].includes(name)),
      ).toEqual([]);
    },
  );

  const entries: readonly (readonly [kind: string, entry: string, module: string])[] = [
    ['CommonJS', 'app.cjs', 'cjs'],
    ['ESM', 'app.mjs', 'esm'],
    ['TypeScript (node16)', path.join('out', 'app.js'), 'ts'],
  ];
  const cases = MAJORS.flatMap((major) =>
    entries.map(([kind, entry, module]) => [major.label, kind, entry, module] as const),
  );

  it.each(cases)(
    '%s, %s: one protect() call; right key 200, wrong key 401, level-1 403, over the limit 429, and the app lives on',
    async (label, _kind, entry, module) => {
      const dir = appDirs.get(label) ?? '';
      expect(existsSync(path.join(dir, entry))).toBe(true);
      const { child, port } = await startApp(dir, entry);
      children.push(child);

      const first = await get(port, KEYS.level2.secret);
      expect({ status: first.status, body: first.body }).toEqual({
        status: 200,
        body: { account: 'acct_pkg', module },
      });
      expect(first.headers.ratelimit).toMatch(/^"orders"; r=1; t=\d+$/);
      expect(first.headers['ratelimit-policy']).toMatch(/^"orders"; q=2; w=60; pk=:.+:$/);

      expectErrorBody(await get(port, generateKey('secret', 'test')), 401, 'invalid_api_key');
      expectErrorBody(await get(port, KEYS.level1.secret), 403, 'insufficient_role');

      const second = await get(port, KEYS.level2.secret);
      expect(second.status).toBe(200);
      const third = await get(port, KEYS.level2.secret);
      expectErrorBody(third, 429, 'rate_limited');
      expect(Number(third.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(child.exitCode).toBeNull();
    },
  );

  it.each(cases)(
    '%s, %s: protect({ idempotency }) replays the first answer to a retry, the handler run once',
    async (label, _kind, entry, module) => {
      const dir = appDirs.get(label) ?? '';
      const { child, port } = await startApp(dir, entry);
      children.push(child);
      const secret = KEYS.level2.secret;

      const first = await postPayout(port, secret, '{"amount":42}', 'payout-0001');
      expect({ status: first.status, text: first.text }).toEqual({
        status: 201,
        text: JSON.stringify({ payout: 1, amount: 42, module }),
      });
      expect(first.headers['idempotent-replayed']).toBeUndefined();
      const retry = await postPayout(port, secret, '{"amount":42}', 'payout-0001');
      expect({ status: retry.status, text: retry.text }).toEqual({
        status: 201,
        text: first.text,
      });
      expect(retry.headers['content-type']).toBe(first.headers['content-type']);
      expect(retry.headers['idempotent-replayed']).toBe('true');

      const reused = await postPayout(port, secret, '{"amount":43}', 'payout-0001');
      expectErrorBody(
        {
          status: reused.status,
          headers: reused.headers,
          body: JSON.parse(reused.text) as Record<string, unknown>,
        },
        422,
        'idempotency_key_reused',
      );
      const missing = await postPayout(port, secret, '{"amount":42}');
      expectErrorBody(
        {
          status: missing.status,
          headers: missing.headers,
          body: JSON.parse(missing.text) as Record<string, unknown>,
        },
        400,
        'idempotency_key_required',
      );
      // A new key is a new payout: the handler ran twice in all.
      const next = await postPayout(port, secret, '{"amount":42}', 'payout-0002');
      expect(JSON.parse(next.text)).toEqual({ payout: 2, amount: 42, module });
      expect(child.exitCode).toBeNull();
    },
  );
});
