import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { generateKey, KeyRing, sha256, TokenService } from '../lib';
import {
  type Child,
  freePort,
  httpRequest,
  memoryOf,
  startChild,
  versionOf,
  waitUntil,
} from './processes';
import { runWrk, type WrkResult, writeRotatingScript } from './wrk';

/**
 * `npm run bench`: GET /api/v1/wallets/ measured with wrk, in one run, against
 *   (a) the stub upstream hit directly,
 *   (d) Express 5 alone answering the same JSON (the floor for anything built on Express),
 *   (b) the gateway in front of the stub with in-memory limits, with a secret key and a token,
 *   (c) the same with Redis-backed limits (a redis-server started for the run).
 * Every process listens on 127.0.0.1 only. The gateways run the real `dist/gateway/server.js`
 * with NODE_ENV=production and LOG_LEVEL=warn (at `info` two log lines per request dominate the
 * cost), a generated keys file of many accounts, and wrk rotating through them, so the per-account
 * limits (1,500/min) are never reached: any non-2xx answer is reported next to the figures.
 *
 * Settings (environment): BENCH_DURATION seconds per measured case (15), BENCH_WARMUP (3),
 * BENCH_CONNECTIONS (32), BENCH_THREADS (1), BENCH_ACCOUNTS (1000), BENCH_REDIS_URL (use this
 * Redis instead of starting one; a unique key prefix keeps the run apart from other users).
 */

const WALLETS_PATH = '/api/v1/wallets/';
const DIST = path.resolve(__dirname, '..');

interface Settings {
  readonly durationSeconds: number;
  readonly warmupSeconds: number;
  readonly connections: number;
  readonly threads: number;
  readonly accounts: number;
}

interface BenchAccount {
  readonly accountId: string;
  readonly keyId: string;
  readonly publishableKey: string;
  readonly secretKey: string;
}

interface Row {
  readonly target: string;
  readonly credential: string;
  readonly result: WrkResult;
}

interface Memory {
  readonly target: string;
  readonly rssMiB: number;
  readonly peakMiB: number;
}

function setting(name: string, fallback: number, min: number, max: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`${name} must be a whole number from ${min} to ${max}`);
  }
  return value;
}

function makeAccounts(count: number): BenchAccount[] {
  return Array.from({ length: count }, (_, index) => ({
    accountId: `acct_bench_${index}`,
    keyId: `key_bench_${index}`,
    publishableKey: generateKey('publishable', 'test'),
    secretKey: generateKey('secret', 'test'),
  }));
}

function keysDocument(accounts: readonly BenchAccount[]): unknown {
  return {
    accounts: accounts.map((account) => ({
      id: account.accountId,
      keys: [
        {
          id: account.keyId,
          publishableKey: account.publishableKey,
          secretKeySha256: sha256(account.secretKey).toString('hex'),
          role: 'level-1',
        },
      ],
    })),
  };
}

function log(message: string): void {
  process.stderr.write(`bench: ${message}\n`);
}

class Bench {
  readonly rows: Row[] = [];
  readonly memory: Memory[] = [];
  private readonly children: Child[] = [];

  constructor(
    private readonly settings: Settings,
    private readonly dir: string,
  ) {}

  /** Starts `dist/<script>` with only the given environment (plus PATH and NODE_ENV=production). */
  node(name: string, script: string, env: Record<string, string>): Child {
    return this.track(
      startChild(name, process.execPath, [path.join(DIST, script)], {
        PATH: process.env.PATH ?? '',
        NODE_ENV: 'production',
        ...env,
      }),
    );
  }

  /** Stopped by `stopAll()`. */
  track(child: Child): Child {
    this.children.push(child);
    return child;
  }

  async measure(target: string, credential: string, url: string, script: string): Promise<void> {
    const { warmupSeconds, durationSeconds, connections, threads } = this.settings;
    log(`${target}, ${credential}: ${warmupSeconds}s warm-up, ${durationSeconds}s measured`);
    if (warmupSeconds > 0) {
      await runWrk({ url, script, durationSeconds: warmupSeconds, connections, threads });
    }
    const result = await runWrk({ url, script, durationSeconds, connections, threads });
    this.rows.push({ target, credential, result });
  }

  recordMemory(target: string, child: Child): void {
    const memory = memoryOf(child.process.pid);
    if (memory !== undefined) this.memory.push({ target, ...memory });
  }

  async stopAll(): Promise<void> {
    await Promise.all(this.children.map((child) => child.stop()));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** One real token exchange, then wallets with that token and with the secret key: all 200. */
async function sanityCheck(gatewayUrl: string, account: BenchAccount): Promise<void> {
  const exchange = await httpRequest(`${gatewayUrl}/api/v1/auth/generate-token/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_key: account.publishableKey, api_secret: account.secretKey }),
  });
  if (exchange.status !== 200) throw new Error(`token exchange answered ${exchange.status}`);
  const { token } = JSON.parse(exchange.body) as { token: string };
  for (const credential of [token, account.secretKey]) {
    const reply = await httpRequest(`${gatewayUrl}${WALLETS_PATH}`, {
      headers: { authorization: `Bearer ${credential}` },
    });
    if (reply.status !== 200) throw new Error(`wallets answered ${reply.status}: ${reply.body}`);
  }
}

async function redisAnswers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.setTimeout(500);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString().startsWith('+PONG'));
    });
    socket.once('error', () => {
      resolve(false);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

/** A Redis for the run: BENCH_REDIS_URL, else a redis-server started on a free loopback port. */
async function obtainRedis(bench: Bench): Promise<{ url: string; origin: string } | undefined> {
  const fromEnv = process.env.BENCH_REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') return { url: fromEnv, origin: 'BENCH_REDIS_URL' };
  const version = versionOf('redis-server');
  if (version === undefined) return undefined;
  const port = await freePort();
  const child = startChild(
    'redis-server',
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { PATH: process.env.PATH ?? '' },
  );
  bench.track(child);
  const deadline = Date.now() + 5000;
  while (!(await redisAnswers(port))) {
    if (Date.now() > deadline) throw new Error(`redis-server did not start:\n${child.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const shortVersion = /v=(\S+)/.exec(version)?.[1] ?? version;
  return {
    url: `redis://127.0.0.1:${port}`,
    origin: `redis-server ${shortVersion} started for this run`,
  };
}

function formatRows(rows: readonly Row[]): string {
  const lines = [
    '| target | credential | requests/s | p50 (ms) | p99 (ms) | non-2xx | socket errors |',
    '|---|---|---:|---:|---:|---:|---:|',
  ];
  for (const { target, credential, result } of rows) {
    lines.push(
      `| ${target} | ${credential} | ${Math.round(result.requestsPerSecond).toLocaleString('en-US')} | ` +
        `${result.p50Ms.toFixed(2)} | ${result.p99Ms.toFixed(2)} | ${result.errorStatuses} | ${result.socketErrors} |`,
    );
  }
  return lines.join('\n');
}

function ratioLines(rows: readonly Row[]): string[] {
  const find = (target: string, credential: string): WrkResult | undefined =>
    rows.find((row) => row.target === target && row.credential === credential)?.result;
  const upstream = find(TARGETS.upstream, 'gateway headers');
  const floor = find(TARGETS.floor, 'gateway headers');
  const lines: string[] = [];
  const ratio = (label: string, a: WrkResult | undefined, b: WrkResult | undefined): void => {
    if (a === undefined || b === undefined) return;
    lines.push(
      `- ${label}: throughput ${(a.requestsPerSecond / b.requestsPerSecond).toFixed(2)}x, ` +
        `p50 ${(a.p50Ms / b.p50Ms).toFixed(2)}x, p99 ${(a.p99Ms / b.p99Ms).toFixed(2)}x`,
    );
  };
  for (const credential of ['secret key', 'token']) {
    const memory = find(TARGETS.memory, credential);
    const redis = find(TARGETS.redis, credential);
    ratio(`gateway (memory) / upstream direct, ${credential}`, memory, upstream);
    ratio(`gateway (memory) / Express floor, ${credential}`, memory, floor);
    ratio(`gateway (Redis) / gateway (memory), ${credential}`, redis, memory);
  }
  return lines;
}

const TARGETS = {
  upstream: '(a) stub upstream, direct',
  floor: '(d) Express 5 alone (floor)',
  memory: '(b) gateway, in-memory limits',
  redis: '(c) gateway, Redis limits',
} as const;

async function main(): Promise<void> {
  const wrk = versionOf('wrk')?.replace(/\s+Copyright.*$/, '');
  if (wrk === undefined) {
    console.error(
      'bench: wrk is not installed. On Debian/Ubuntu: sudo apt-get install -y wrk ' +
        '(macOS: brew install wrk), then run npm run bench again.',
    );
    process.exit(1);
  }
  const settings: Settings = {
    durationSeconds: setting('BENCH_DURATION', 15, 1, 600),
    warmupSeconds: setting('BENCH_WARMUP', 3, 0, 60),
    connections: setting('BENCH_CONNECTIONS', 32, 1, 10_000),
    threads: setting('BENCH_THREADS', 1, 1, 64),
    accounts: setting('BENCH_ACCOUNTS', 1000, 1, 100_000),
  };
  const loadBefore = os.loadavg();
  if ((loadBefore[0] ?? 0) > 3) {
    log(`load average is ${loadBefore[0]?.toFixed(2)}: the machine is busy, figures will be low`);
  }
  const started = Date.now();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-'));
  const bench = new Bench(settings, dir);
  let redisOrigin = 'not available: (c) skipped';
  try {
    const accounts = makeAccounts(settings.accounts);
    const document = keysDocument(accounts);
    KeyRing.fromDocument(document, 'bench keys');
    const keysFile = path.join(dir, 'keys.json');
    writeFileSync(keysFile, JSON.stringify(document), { mode: 0o600 });
    const tokenSecret = randomBytes(48).toString('base64');
    // Minted with the kit's TokenService and the gateway's secret: what the exchange returns.
    const tokens = new TokenService({ secret: tokenSecret });
    const scripts = {
      upstream: path.join(dir, 'upstream.lua'),
      secret: path.join(dir, 'secret.lua'),
      token: path.join(dir, 'token.lua'),
    };
    writeRotatingScript(
      scripts.upstream,
      WALLETS_PATH,
      accounts.map((account) => ({
        'X-Gateway-Account-Id': account.accountId,
        'X-Gateway-Key-Id': account.keyId,
        'X-Gateway-Role': 'level-1',
        'X-Gateway-Credential': 'secret',
      })),
    );
    writeRotatingScript(
      scripts.secret,
      WALLETS_PATH,
      accounts.map((account) => ({ Authorization: `Bearer ${account.secretKey}` })),
    );
    writeRotatingScript(
      scripts.token,
      WALLETS_PATH,
      accounts.map((account) => ({
        Authorization: `Bearer ${tokens.issue({ id: account.keyId, accountId: account.accountId, role: 'level-1' }).token}`,
      })),
    );

    const upstreamPort = await freePort();
    const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
    const upstream = bench.node('stub upstream', 'gateway/stub-upstream-server.js', {
      PORT: String(upstreamPort),
      HOST: '127.0.0.1',
    });
    await waitUntil(upstream, `${upstreamUrl}/`, (reply) => reply.status > 0);
    await bench.measure(TARGETS.upstream, 'gateway headers', upstreamUrl, scripts.upstream);

    const floorPort = await freePort();
    const floor = bench.node('express floor', 'bench/express-floor.js', {
      PORT: String(floorPort),
    });
    const floorUrl = `http://127.0.0.1:${floorPort}`;
    await waitUntil(floor, `${floorUrl}${WALLETS_PATH}`, (reply) => reply.status === 200);
    await bench.measure(TARGETS.floor, 'gateway headers', floorUrl, scripts.upstream);
    await floor.stop();

    const gatewayEnv = {
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      TOLLGATE_KEYS_FILE: keysFile,
      TOLLGATE_TOKEN_SECRET: tokenSecret,
      TOLLGATE_UPSTREAM_URL: upstreamUrl,
    };
    const runGateway = async (
      target: string,
      env: Record<string, string>,
      limits: string,
    ): Promise<void> => {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const gateway = bench.node(target, 'gateway/server.js', {
        ...gatewayEnv,
        ...env,
        PORT: String(port),
      });
      await waitUntil(
        gateway,
        `${url}/healthz`,
        (reply) => reply.status === 200 && reply.body.includes(`"${limits}"`),
      );
      const first = accounts[0];
      if (first === undefined) throw new Error('no accounts');
      await sanityCheck(url, first);
      await bench.measure(target, 'secret key', url, scripts.secret);
      await bench.measure(target, 'token', url, scripts.token);
      bench.recordMemory(target, gateway);
      await gateway.stop();
    };
    await runGateway(TARGETS.memory, {}, 'memory');

    const redis = await obtainRedis(bench);
    if (redis === undefined) {
      log('no redis-server on PATH and no BENCH_REDIS_URL: (c) skipped');
    } else {
      redisOrigin = redis.origin;
      const prefix = `tollgate-bench:${randomBytes(6).toString('hex')}:`;
      await runGateway(
        TARGETS.redis,
        { REDIS_URL: redis.url, TOLLGATE_REDIS_PREFIX: prefix },
        'shared',
      );
    }
  } finally {
    await bench.stopAll();
  }

  const cpus = os.cpus();
  const loadAfter = os.loadavg();
  const out = [
    '',
    `## Tollgate benchmark: GET ${WALLETS_PATH}`,
    '',
    `- machine: ${cpus.length} x ${cpus[0]?.model ?? 'unknown CPU'}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, ${os.type()} ${os.release()}`,
    `- node ${process.version}; ${wrk}; Redis: ${redisOrigin}`,
    `- wrk: ${settings.threads} thread(s), ${settings.connections} connections, ${settings.durationSeconds}s per case after ${settings.warmupSeconds}s warm-up; ${settings.accounts} accounts rotated`,
    `- gateways: NODE_ENV=production LOG_LEVEL=warn; load average before ${loadBefore.map((value) => value.toFixed(2)).join(' ')}, after ${loadAfter.map((value) => value.toFixed(2)).join(' ')}`,
    `- total time ${Math.round((Date.now() - started) / 1000)}s`,
    '',
    formatRows(bench.rows),
    '',
    ...ratioLines(bench.rows),
    '',
    ...bench.memory.map(
      (memory) =>
        `- ${memory.target}: RSS after the run ${memory.rssMiB.toFixed(0)} MiB (peak ${memory.peakMiB.toFixed(0)} MiB)`,
    ),
    '',
  ];
  console.log(out.join('\n'));
  const failures = bench.rows.filter(
    (row) => row.result.errorStatuses > 0 || row.result.socketErrors > 0,
  );
  if (failures.length > 0) {
    log('some cases had non-2xx answers or socket errors: the figures above are not clean');
    process.exitCode = 1;
  }
}

main().catch((error: unknown) => {
  console.error(`bench: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
