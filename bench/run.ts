import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { DEFAULT_AUTH_FAILURE_LIMIT, generateKey, KeyRing, sha256, TokenService } from '../lib';
import {
  answersWith,
  BUDGET_SPENT,
  type Expectation,
  SUCCESS,
  unexpectedAnswers,
  WRONG_CREDENTIAL,
} from './expect';
import {
  type Child,
  freePort,
  httpRequest,
  memoryOf,
  startChild,
  versionOf,
  waitUntil,
} from './processes';
import {
  type Comparison,
  formatComparisons,
  formatRows,
  isClean,
  notes,
  type Round,
  type Row,
} from './report';
import { runWrk, type WrkResult, writeRotatingScript } from './wrk';

/**
 * `npm run bench`: GET /api/v1/wallets/ measured with wrk, in one run, against
 *   (a) the stub upstream hit directly,
 *   (d) Express 5 alone answering the same JSON (the floor for anything built on Express),
 *   (b) the gateway in front of the stub with in-memory limits, with a secret key and a token,
 *   (c) the same with Redis-backed limits (a redis-server started for the run),
 *   (e) the gateway refusing wrong secret keys while the IP's failure budget lasts: plausible keys
 *       (right shape and checksum) that are in no keys file, compared and answered 401, with
 *       TOLLGATE_AUTH_FAILURE_LIMIT=100000 (the highest allowed),
 *   (f) the same wrong keys once the budget (the default 20) is spent: every attempt refused with
 *       429 before any comparison, the cheap refusal.
 * Every process listens on 127.0.0.1 only. The gateways run the real `dist/gateway/server.js`
 * with NODE_ENV=production and LOG_LEVEL=warn (at `info` two log lines per request dominate the
 * cost), a generated keys file of many accounts, and wrk rotating through them, so the per-account
 * limits (1,500/min) are never reached. Each case says which statuses it expects (2xx for
 * (a)-(d), 401 for (e), also 429 once its budget runs out, 429 for (f)); any other answer or a
 * socket error is reported next to the figures and the run exits with 1.
 *
 * All wrk traffic comes from 127.0.0.1, one client IP: (e) spends its budget of 100 000 failures
 * per minute at several thousand requests a second, so its measured time is cut (and said so) to
 * what the budget allows after the warm-up, and its 401 and 429 answers are counted apart.
 *
 * Settings (environment): BENCH_DURATION seconds per measured case (15), BENCH_WARMUP (3),
 * BENCH_CONNECTIONS (32), BENCH_THREADS (1), BENCH_ACCOUNTS (1000; also the number of wrong keys
 * rotated), BENCH_REDIS_URL (use this Redis instead of starting one; a unique key prefix keeps the
 * run apart from other users), BENCH_ONLY (a comma-separated list of `direct` (a, d), `memory`
 * (b), `redis` (c), `wrong-credential` (e, f); all by default).
 *
 * Side by side: BENCH_BASELINE_DIST, the `dist` directory of another build (an older commit, built
 * with `npm run build`). Then (e), (f) and, when `memory` is selected, (b) with a secret key also
 * run against `<BENCH_BASELINE_DIST>/gateway/server.js` (with this build's stub upstream, keys
 * and wrk scripts) in BENCH_ROUNDS alternating rounds (3) of BENCH_ROUND_DURATION seconds (5, at
 * most BENCH_DURATION) after BENCH_WARMUP, each build in a fresh gateway process, which build goes
 * first swapped every round; the per-round and median ratios this build / baseline are printed.
 */

const WALLETS_PATH = '/api/v1/wallets/';
const DIST = path.resolve(__dirname, '..');

interface Settings {
  readonly durationSeconds: number;
  readonly warmupSeconds: number;
  readonly connections: number;
  readonly threads: number;
  readonly accounts: number;
  readonly rounds: number;
  readonly roundSeconds: number;
}

const GROUPS = ['direct', 'memory', 'redis', 'wrong-credential'] as const;
type Group = (typeof GROUPS)[number];

function selectedGroups(): ReadonlySet<Group> {
  const raw = process.env.BENCH_ONLY;
  if (raw === undefined || raw.trim() === '') return new Set(GROUPS);
  const names = raw.split(',').map((name) => name.trim());
  const unknown = names.filter((name) => !(GROUPS as readonly string[]).includes(name));
  if (unknown.length > 0 || names.length === 0) {
    throw new Error(`BENCH_ONLY takes a comma-separated list of: ${GROUPS.join(', ')}`);
  }
  return new Set(names as Group[]);
}

interface Build {
  readonly label: string;
  readonly dist: string;
}

/** `<commit>[-dirty]` of the checkout a `dist` directory sits in, when it is a git checkout. */
function commitOf(dist: string): string {
  const result = spawnSync('git', ['-C', path.dirname(dist), 'describe', '--always', '--dirty'], {
    encoding: 'utf8',
  });
  return result.status === 0 ? result.stdout.trim() : 'commit unknown';
}

function baselineBuild(): Build | undefined {
  const raw = process.env.BENCH_BASELINE_DIST;
  if (raw === undefined || raw === '') return undefined;
  const dist = path.resolve(raw);
  if (!existsSync(path.join(dist, 'gateway', 'server.js'))) {
    throw new Error(`BENCH_BASELINE_DIST: no gateway/server.js in ${dist} (build it first)`);
  }
  if (dist === DIST) log('BENCH_BASELINE_DIST is this build: the ratios compare it with itself');
  return { label: 'baseline', dist };
}

interface BenchAccount {
  readonly accountId: string;
  readonly keyId: string;
  readonly publishableKey: string;
  readonly secretKey: string;
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

/** How a measured case is run. */
interface MeasureOptions {
  readonly expected: Expectation;
  /** Measured seconds; `settings.durationSeconds` unless given. */
  readonly durationSeconds?: number;
  /**
   * Failures the IP may still make before the gateway answers 429: the measured time is cut to
   * what the warm-up's rate says the budget allows (with a margin), so the figures are those of
   * compared credentials, not of the cheap refusal. 429s that still come are counted.
   */
  readonly failureBudget?: number;
  /** Added to the progress line (which build, which round). */
  readonly context?: string;
}

class Bench {
  readonly rows: Row[] = [];
  readonly comparisons: Comparison[] = [];
  readonly memory: Memory[] = [];
  private readonly children: Child[] = [];

  constructor(
    private readonly settings: Settings,
    private readonly dir: string,
  ) {}

  /** Starts `<dist>/<script>` with only the given environment (plus PATH and NODE_ENV=production). */
  node(name: string, script: string, env: Record<string, string>, dist = DIST): Child {
    return this.track(
      startChild(name, process.execPath, [path.join(dist, script)], {
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

  /** Warm-up then measurement; the row is returned, not recorded. */
  async run(
    target: string,
    credential: string,
    url: string,
    script: string,
    options: MeasureOptions,
  ): Promise<Row> {
    const { warmupSeconds, connections, threads } = this.settings;
    const wanted = options.durationSeconds ?? this.settings.durationSeconds;
    const context = options.context === undefined ? '' : ` [${options.context}]`;
    log(`${target}, ${credential}${context}: ${warmupSeconds}s warm-up, ${wanted}s measured`);
    let warmup: WrkResult | undefined;
    if (warmupSeconds > 0) {
      warmup = await runWrk({ url, script, durationSeconds: warmupSeconds, connections, threads });
    }
    let durationSeconds = wanted;
    let note: string | undefined;
    if (options.failureBudget !== undefined && warmup !== undefined) {
      const left = options.failureBudget - warmup.requests;
      const fits = Math.floor(left / (warmup.requestsPerSecond * 1.5));
      if (fits < wanted) {
        durationSeconds = Math.max(1, fits);
        note =
          `measured ${durationSeconds}s instead of ${wanted}s: the warm-up spent ` +
          `${warmup.requests.toLocaleString('en-US')} of the ${options.failureBudget.toLocaleString('en-US')} ` +
          `failures left at ${Math.round(warmup.requestsPerSecond).toLocaleString('en-US')}/s`;
        log(`${target}: ${note}`);
      }
    }
    const result = await runWrk({ url, script, durationSeconds, connections, threads });
    const row: Row = {
      target,
      credential,
      expected: options.expected,
      result,
      measuredSeconds: durationSeconds,
      ...(note === undefined ? {} : { note }),
    };
    const spent = options.expected === WRONG_CREDENTIAL ? answersWith(result, 429) : 0;
    if (spent > 0) {
      log(
        `${target}: the failure budget ran out, ${spent} of ${result.requests} answers were 429 ` +
          '(the cheap refusal): the figures mix both paths',
      );
    }
    return row;
  }

  /** `run()`, recorded in the main table. */
  async measure(
    target: string,
    credential: string,
    url: string,
    script: string,
    options: MeasureOptions = { expected: SUCCESS },
  ): Promise<void> {
    this.rows.push(await this.run(target, credential, url, script, options));
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

async function walletsWith(gatewayUrl: string, credential: string): Promise<number> {
  const reply = await httpRequest(`${gatewayUrl}${WALLETS_PATH}`, {
    headers: { authorization: `Bearer ${credential}` },
  });
  return reply.status;
}

/** A wrong key is answered 401 while the budget lasts. Spends one failure. */
async function wrongKeyCheck(gatewayUrl: string, wrongKey: string): Promise<void> {
  const status = await walletsWith(gatewayUrl, wrongKey);
  if (status !== 401) throw new Error(`a wrong secret key answered ${status}, not 401`);
}

/** Spends the whole budget (`limit` answers 401), then checks that the next attempt gets 429. */
async function spendBudget(gatewayUrl: string, wrongKey: string, limit: number): Promise<void> {
  for (let attempt = 1; attempt <= limit; attempt++) {
    const status = await walletsWith(gatewayUrl, wrongKey);
    if (status !== 401) {
      throw new Error(`wrong secret key ${attempt} of a budget of ${limit} answered ${status}`);
    }
  }
  const status = await walletsWith(gatewayUrl, wrongKey);
  if (status !== 429) throw new Error(`with the budget spent a wrong key answered ${status}`);
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
  const secretKey = find(TARGETS.memory, 'secret key');
  ratio(
    'wrong key, budget left / right secret key (memory)',
    find(TARGETS.wrongLeft, WRONG_KEY),
    secretKey,
  );
  ratio(
    'wrong key, budget spent / right secret key (memory)',
    find(TARGETS.wrongSpent, WRONG_KEY),
    secretKey,
  );
  return lines;
}

const TARGETS = {
  upstream: '(a) stub upstream, direct',
  floor: '(d) Express 5 alone (floor)',
  memory: '(b) gateway, in-memory limits',
  redis: '(c) gateway, Redis limits',
  wrongLeft: '(e) gateway, wrong key, budget left',
  wrongSpent: '(f) gateway, wrong key, budget spent',
} as const;

const WRONG_KEY = 'unknown secret key';

/** TOLLGATE_AUTH_FAILURE_LIMIT for (e): the highest the gateway accepts. */
const LARGE_FAILURE_BUDGET = 100_000;

async function main(): Promise<void> {
  const wrk = versionOf('wrk')?.replace(/\s+Copyright.*$/, '');
  if (wrk === undefined) {
    console.error(
      'bench: wrk is not installed. On Debian/Ubuntu: sudo apt-get install -y wrk ' +
        '(macOS: brew install wrk), then run npm run bench again.',
    );
    process.exit(1);
  }
  const durationSeconds = setting('BENCH_DURATION', 15, 1, 600);
  const settings: Settings = {
    durationSeconds,
    warmupSeconds: setting('BENCH_WARMUP', 3, 0, 60),
    connections: setting('BENCH_CONNECTIONS', 32, 1, 10_000),
    threads: setting('BENCH_THREADS', 1, 1, 64),
    accounts: setting('BENCH_ACCOUNTS', 1000, 1, 100_000),
    rounds: setting('BENCH_ROUNDS', 3, 1, 20),
    roundSeconds: setting('BENCH_ROUND_DURATION', Math.min(5, durationSeconds), 1, 600),
  };
  const groups = selectedGroups();
  const baseline = baselineBuild();
  const current: Build = { label: 'this', dist: DIST };
  const loadBefore = os.loadavg();
  if ((loadBefore[0] ?? 0) > 3) {
    log(`load average is ${loadBefore[0]?.toFixed(2)}: the machine is busy, figures will be low`);
  }
  const started = Date.now();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-'));
  const bench = new Bench(settings, dir);
  let redisOrigin = groups.has('redis') ? 'not available: (c) skipped' : 'not selected';
  try {
    const accounts = makeAccounts(settings.accounts);
    const document = keysDocument(accounts);
    KeyRing.fromDocument(document, 'bench keys');
    const keysFile = path.join(dir, 'keys.json');
    writeFileSync(keysFile, JSON.stringify(document), { mode: 0o600 });
    const tokenSecret = randomBytes(48).toString('base64');
    // Minted with the kit's TokenService and the gateway's secret: what the exchange returns.
    const tokens = new TokenService({ secret: tokenSecret });
    // Plausible secret keys (shape and checksum right) that no account holds: compared, refused.
    const wrongKeys = Array.from({ length: settings.accounts }, () =>
      generateKey('secret', 'test'),
    );
    const scripts = {
      upstream: path.join(dir, 'upstream.lua'),
      secret: path.join(dir, 'secret.lua'),
      token: path.join(dir, 'token.lua'),
      wrong: path.join(dir, 'wrong.lua'),
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
    writeRotatingScript(
      scripts.wrong,
      WALLETS_PATH,
      wrongKeys.map((key) => ({ Authorization: `Bearer ${key}` })),
      { countStatuses: true },
    );
    const first = accounts[0];
    const wrongKey = wrongKeys[0];
    if (first === undefined || wrongKey === undefined) throw new Error('no accounts');

    // The gateways' upstream, measured directly only with `direct`.
    const upstreamPort = await freePort();
    const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
    const upstream = bench.node('stub upstream', 'gateway/stub-upstream-server.js', {
      PORT: String(upstreamPort),
      HOST: '127.0.0.1',
    });
    await waitUntil(upstream, `${upstreamUrl}/`, (reply) => reply.status > 0);

    if (groups.has('direct')) {
      await bench.measure(TARGETS.upstream, 'gateway headers', upstreamUrl, scripts.upstream);
      const floorPort = await freePort();
      const floor = bench.node('express floor', 'bench/express-floor.js', {
        PORT: String(floorPort),
      });
      const floorUrl = `http://127.0.0.1:${floorPort}`;
      await waitUntil(floor, `${floorUrl}${WALLETS_PATH}`, (reply) => reply.status === 200);
      await bench.measure(TARGETS.floor, 'gateway headers', floorUrl, scripts.upstream);
      await floor.stop();
    }

    const gatewayEnv = {
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      TOLLGATE_KEYS_FILE: keysFile,
      TOLLGATE_TOKEN_SECRET: tokenSecret,
      TOLLGATE_UPSTREAM_URL: upstreamUrl,
    };
    const startGateway = async (
      name: string,
      env: Record<string, string>,
      limits: string,
      build: Build = current,
    ): Promise<{ url: string; gateway: Child }> => {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const gateway = bench.node(
        name,
        'gateway/server.js',
        { ...gatewayEnv, ...env, PORT: String(port) },
        build.dist,
      );
      await waitUntil(
        gateway,
        `${url}/healthz`,
        (reply) => reply.status === 200 && reply.body.includes(`"${limits}"`),
      );
      return { url, gateway };
    };
    const runGateway = async (
      target: string,
      env: Record<string, string>,
      limits: string,
    ): Promise<void> => {
      const { url, gateway } = await startGateway(target, env, limits);
      await sanityCheck(url, first);
      await bench.measure(target, 'secret key', url, scripts.secret);
      await bench.measure(target, 'token', url, scripts.token);
      bench.recordMemory(target, gateway);
      await gateway.stop();
    };
    if (groups.has('memory')) await runGateway(TARGETS.memory, {}, 'memory');

    if (groups.has('redis')) {
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
    }

    /** A case measured in a gateway process of its own (in-memory limits), for either build. */
    interface GatewayCase {
      readonly name: string;
      readonly target: string;
      readonly credential: string;
      readonly env: Record<string, string>;
      readonly script: string;
      /** Checks the answers before measuring (and spends the budget for (f)). */
      readonly prepare: (url: string) => Promise<void>;
      readonly options: MeasureOptions;
    }
    const secretKeyCase: GatewayCase = {
      name: '(b) secret key',
      target: TARGETS.memory,
      credential: 'secret key',
      env: {},
      script: scripts.secret,
      prepare: (url) => sanityCheck(url, first),
      options: { expected: SUCCESS },
    };
    const wrongLeftCase: GatewayCase = {
      name: '(e) wrong key, budget left',
      target: TARGETS.wrongLeft,
      credential: WRONG_KEY,
      env: { TOLLGATE_AUTH_FAILURE_LIMIT: String(LARGE_FAILURE_BUDGET) },
      script: scripts.wrong,
      prepare: (url) => wrongKeyCheck(url, wrongKey),
      // `prepare` spent one.
      options: { expected: WRONG_CREDENTIAL, failureBudget: LARGE_FAILURE_BUDGET - 1 },
    };
    const wrongSpentCase: GatewayCase = {
      name: '(f) wrong key, budget spent',
      target: TARGETS.wrongSpent,
      credential: WRONG_KEY,
      env: { TOLLGATE_AUTH_FAILURE_LIMIT: String(DEFAULT_AUTH_FAILURE_LIMIT) },
      script: scripts.wrong,
      prepare: (url) => spendBudget(url, wrongKey, DEFAULT_AUTH_FAILURE_LIMIT),
      options: { expected: BUDGET_SPENT },
    };
    const runCase = async (
      gatewayCase: GatewayCase,
      build: Build,
      measuredSeconds?: number,
      context?: string,
    ): Promise<Row> => {
      const { url, gateway } = await startGateway(
        `${gatewayCase.target} (${build.label} build)`,
        gatewayCase.env,
        'memory',
        build,
      );
      try {
        await gatewayCase.prepare(url);
        return await bench.run(
          gatewayCase.target,
          gatewayCase.credential,
          url,
          gatewayCase.script,
          { ...gatewayCase.options, durationSeconds: measuredSeconds, context },
        );
      } finally {
        await gateway.stop();
      }
    };

    if (groups.has('wrong-credential')) {
      if (settings.warmupSeconds + settings.durationSeconds >= 60) {
        log(`${TARGETS.wrongSpent}: the budget's 1-minute window resets during the case`);
      }
      bench.rows.push(await runCase(wrongLeftCase, current));
      bench.rows.push(await runCase(wrongSpentCase, current));
    }

    if (baseline !== undefined) {
      const compared = [
        ...(groups.has('memory') ? [secretKeyCase] : []),
        ...(groups.has('wrong-credential') ? [wrongLeftCase, wrongSpentCase] : []),
      ];
      for (const gatewayCase of compared) {
        const rounds: Round[] = [];
        for (let round = 1; round <= settings.rounds; round++) {
          const thisFirst = round % 2 === 1;
          const runOne = (build: Build): Promise<Row> =>
            runCase(
              gatewayCase,
              build,
              settings.roundSeconds,
              `${build.label} build, round ${round} of ${settings.rounds}`,
            );
          let mine: Row;
          let theirs: Row;
          if (thisFirst) {
            mine = await runOne(current);
            theirs = await runOne(baseline);
          } else {
            theirs = await runOne(baseline);
            mine = await runOne(current);
          }
          rounds.push({ round, thisFirst, current: mine, baseline: theirs });
        }
        bench.comparisons.push({ name: gatewayCase.name, rounds });
      }
    }
  } finally {
    await bench.stopAll();
  }

  const cpus = os.cpus();
  const loadAfter = os.loadavg();
  const wrongKeysNote = groups.has('wrong-credential')
    ? `, and as many unknown secret keys for (e), (f)`
    : '';
  const out = [
    '',
    `## Tollgate benchmark: GET ${WALLETS_PATH}`,
    '',
    `- machine: ${cpus.length} x ${cpus[0]?.model ?? 'unknown CPU'}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, ${os.type()} ${os.release()}`,
    `- node ${process.version}; ${wrk}; Redis: ${redisOrigin}`,
    `- cases: ${[...groups].join(', ')}${groups.size < GROUPS.length ? ' (BENCH_ONLY)' : ''}; this build: ${DIST} (${commitOf(DIST)})`,
    `- wrk: ${settings.threads} thread(s), ${settings.connections} connections, ${settings.durationSeconds}s per case after ${settings.warmupSeconds}s warm-up; ${settings.accounts} accounts rotated${wrongKeysNote}`,
    `- gateways: NODE_ENV=production LOG_LEVEL=warn; load average before ${loadBefore.map((value) => value.toFixed(2)).join(' ')}, after ${loadAfter.map((value) => value.toFixed(2)).join(' ')}`,
    `- total time ${Math.round((Date.now() - started) / 1000)}s`,
    '',
    formatRows(bench.rows),
    '',
    ...notes(bench.rows),
    ...ratioLines(bench.rows),
    '',
    ...bench.memory.map(
      (memory) =>
        `- ${memory.target}: RSS after the run ${memory.rssMiB.toFixed(0)} MiB (peak ${memory.peakMiB.toFixed(0)} MiB)`,
    ),
    '',
  ];
  if (baseline !== undefined) {
    out.push(
      '### This build / baseline, side by side',
      '',
      `- this: ${DIST} (${commitOf(DIST)}); baseline: ${baseline.dist} (${commitOf(baseline.dist)}), same stub upstream, keys and wrk scripts`,
      `- ${settings.rounds} round(s) per case; in each, each build in a fresh gateway process: ${settings.warmupSeconds}s warm-up, then ${settings.roundSeconds}s measured; which build goes first swaps every round`,
      '',
      ...formatComparisons(bench.comparisons),
      '',
    );
  }
  // One blank line between blocks, whichever blocks are empty.
  console.log(out.filter((line, index) => line !== '' || out[index - 1] !== '').join('\n'));
  const failures = [
    ...bench.rows,
    ...bench.comparisons.flatMap((comparison) =>
      comparison.rounds.flatMap((round) => [round.current, round.baseline]),
    ),
  ].filter((row) => !isClean(row));
  if (failures.length > 0) {
    log(
      'some cases had unexpected answers or socket errors: the figures above are not clean ' +
        `(${failures.map((row) => `${row.target}: ${unexpectedAnswers(row.result, row.expected)} unexpected, ${row.result.socketErrors} socket errors`).join('; ')})`,
    );
    process.exitCode = 1;
  }
}

main().catch((error: unknown) => {
  console.error(`bench: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
