import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { generateKey, KeyRing, sha256, TokenService } from '../lib';
import { DEFAULT_AUTH_FAILURE_LIMIT } from '../lib/rate-limit/auth-failures';
import {
  answersWith,
  BUDGET_SPENT,
  type Expectation,
  SUCCESS,
  unexpectedAnswers,
  WRONG_CREDENTIAL,
} from './expect';
import {
  askProbe,
  type Child,
  cpuSecondsOf,
  freePort,
  httpRequest,
  type LoopDelay,
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
  median,
  notes,
  redisCommandLines,
  type Round,
  type Row,
} from './report';
import { addressNumber, sendFromDistinctIps } from './distinct-ips';
import { attributeToPauses, describeAttribution, type GcAttribution } from './gc-attribution';
import { type PacedResult, runPaced } from './paced';
import { commandCounts, commandsBetween } from './redis-stats';
import {
  countKeyedCommands,
  PAYOUT_BODY,
  PAYOUTS_PATH,
  payoutCheck,
  primeReplays,
} from './idempotency';
import { formatTargets, ratioTarget, type Target } from './targets';
import { runWrk, type WrkResult, writeRotatingScript } from './wrk';

/**
 * `npm run bench`: GET /api/v1/wallets/ measured with wrk, in one run, against
 *   (a) the stub upstream hit directly,
 *   (d) Express 5 alone answering the same JSON (the floor for anything built on Express),
 *   (d') the same Express app served with `expressServerOptions(app)`, as the gateway is,
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
 *   (g) Express 5 + http-proxy-middleware to the stub, no auth (bench/express-proxy.ts),
 *   (h) the naive composition (ten lines of the same libraries) with Redis limits
 *       (bench/naive-composition.ts),
 *   (i) the gateway's forward-auth endpoint (GET /authz/auth-request as nginx sends it) with
 *       Redis limits, TOLLGATE_TRUST_PROXY=127.0.0.1,
 * then the performance targets' ratios from side-by-side rounds of (d), (d'), (h), (c) and (i)
 * (medians of per-round ratios), Redis commands per allowed request (INFO commandstats of the
 * bench's own redis-server), the latency the gateway adds over the stub at a fixed 1,000 requests
 * a second (an open-loop stream, each request timed from when it was due: bench/paced.ts), next to
 * what (d'), (g) and (g') add in the same rounds ((g'): Express 5 with one Redis round trip and the
 * gateway's proxy, no check: bench/express-hops.ts), with each process's collector pauses and the
 * bytes it allocates per request (bench/keys/probe.ts), and (j) the gateway's RSS after
 * BENCH_DISTINCT_IPS (1,000,000) distinct client IPs in X-Forwarded-For on POST /api/v1/checkout/
 * (per-IP scope), memory and Redis limits, before, after, and after the 60 s window
 * (bench/distinct-ips.ts), and (k) POST /api/v1/payouts/ with and without an Idempotency-Key
 * (bench/idempotency.ts). The run ends with the table of performance targets, met or not.
 *
 * Settings (environment): BENCH_DURATION seconds per measured case (15), BENCH_WARMUP (3),
 * BENCH_CONNECTIONS (32), BENCH_THREADS (1), BENCH_ACCOUNTS (1000; also the number of wrong keys
 * rotated), BENCH_REDIS_URL (use this Redis instead of starting one; a unique key prefix keeps the
 * run apart from other users, and no Redis commands are counted), BENCH_NODE_FLAGS (Node flags
 * for the gateways, none), BENCH_DISTINCT_IPS (1000000), BENCH_ONLY (a comma-separated list of `direct` (a, d, d', g),
 * `memory` (b), `redis` (c), `naive` (h), `forward-auth` (i), `latency`, `wrong-credential` (e,
 * f), `rss` (j), `idempotency` (k); all by default).
 *
 * Side by side: BENCH_BASELINE_DIST, the `dist` directory of another build (an older commit, built
 * with `npm run build`). Then (e), (f) and, when `memory` is selected, (b) with a secret key also
 * run against `<BENCH_BASELINE_DIST>/gateway/server.js`, and so does (c) with a secret key when
 * `redis` is selected and Redis is there (with this build's stub upstream, keys
 * and wrk scripts) in BENCH_ROUNDS alternating rounds (3) of BENCH_ROUND_DURATION seconds (5, at
 * most BENCH_DURATION) after BENCH_WARMUP, each build in a fresh gateway process, which build goes
 * first swapped every round; the per-round and median ratios this build / baseline are printed.
 * With BENCH_BASELINE_CONCURRENT=1 both builds' gateways of a round run at the same time instead,
 * each under its own wrk: on a shared machine the other load then falls on both alike (Redis
 * commands are not counted in these rounds). BENCH_BASELINE_NODE_FLAGS gives the baseline's
 * gateways Node flags of their own (else BENCH_NODE_FLAGS): with BENCH_BASELINE_DIST=dist, the
 * same build with and without a flag. BENCH_GATEWAY_ENV (`NAME=value,…`) gives this build's
 * gateways more environment, e.g. `OTEL_EXPORTER_OTLP_ENDPOINT=…`: the same build traced and not.
 */

const WALLETS_PATH = '/api/v1/wallets/';
const CHECKOUT_PATH = '/api/v1/checkout/';
/**
 * Every bench account's whitelist: loopback (wrk), the forward-auth case's client address and the
 * RSS cases' 10/8, among ranges a payments customer would list. The gateway and the naive
 * composition both check it on every secret-key request.
 */
const WHITELIST = ['203.0.113.0/24', '2001:db8::/32', '10.0.0.0/8', '127.0.0.1'];
/** The client address the forward-auth case's proxy reports in `X-Forwarded-For`. */
const FORWARDED_CLIENT = '203.0.113.10';
const DIST = path.resolve(__dirname, '..');

interface Settings {
  readonly durationSeconds: number;
  readonly warmupSeconds: number;
  readonly connections: number;
  readonly threads: number;
  readonly accounts: number;
  readonly rounds: number;
  readonly roundSeconds: number;
  readonly distinctIps: number;
  /** BENCH_BASELINE_CONCURRENT=1: both builds of a side-by-side round under load at once. */
  readonly concurrent: boolean;
}

const GROUPS = [
  'direct',
  'memory',
  'redis',
  'naive',
  'forward-auth',
  'latency',
  'wrong-credential',
  'rss',
  'idempotency',
] as const;
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
  /** Node flags of this build's gateways (BENCH_NODE_FLAGS, or BENCH_BASELINE_NODE_FLAGS). */
  readonly nodeFlags: readonly string[];
  /** More environment of this build's gateways (BENCH_GATEWAY_ENV for this build only). */
  readonly env: Readonly<Record<string, string>>;
}

/**
 * `NAME=value,NAME=value`: variables given to this build's gateways only, e.g. an OTLP endpoint,
 * so that with BENCH_BASELINE_DIST=dist the ratios are the cost of what they turn on.
 */
function gatewayEnvFrom(raw: string | undefined): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of (raw ?? '').split(',')) {
    if (pair.trim() === '') continue;
    const equals = pair.indexOf('=');
    if (equals < 1) throw new Error(`BENCH_GATEWAY_ENV: ${JSON.stringify(pair)} is not NAME=value`);
    env[pair.slice(0, equals).trim()] = pair.slice(equals + 1).trim();
  }
  return env;
}

/** How a build's gateways were started, for the report. */
function flagsNote(build: Build): string {
  const flags =
    build.nodeFlags.length > 0 ? `, gateways with \`${build.nodeFlags.join(' ')}\`` : '';
  const names = Object.keys(build.env);
  return names.length > 0 ? `${flags}, gateways' environment adds ${names.join(', ')}` : flags;
}

/** Node flags from a space-separated setting. */
function flagsFrom(raw: string | undefined): string[] {
  return (raw ?? '').split(' ').filter((flag) => flag !== '');
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
  const ownFlags = process.env.BENCH_BASELINE_NODE_FLAGS;
  const nodeFlags = flagsFrom(ownFlags ?? process.env.BENCH_NODE_FLAGS);
  if (dist === DIST && ownFlags === undefined) {
    log('BENCH_BASELINE_DIST is this build: the ratios compare it with itself');
  }
  return { label: 'baseline', dist, nodeFlags, env: {} };
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

function keysDocument(accounts: readonly BenchAccount[], role = 'level-1'): unknown {
  return {
    accounts: accounts.map((account) => ({
      id: account.accountId,
      ipWhitelist: WHITELIST,
      keys: [
        {
          id: account.keyId,
          publishableKey: account.publishableKey,
          secretKeySha256: sha256(account.secretKey).toString('hex'),
          role,
        },
      ],
    })),
  };
}

function log(message: string): void {
  process.stderr.write(`bench: ${message}\n`);
}

/**
 * With BENCH_CPU_PROFILE=<dir>, every server (gateways and the stub) writes a V8 CPU profile there
 * when it stops (250 µs sampling); `node dist/bench/profile-groups.js <dir>/*.cpuprofile` groups
 * it by library. (The gateways' own Node flags come with their build.)
 */
function profileFlags(script: string): string[] {
  const dir = process.env.BENCH_CPU_PROFILE;
  if (dir === undefined || dir === '' || !script.endsWith('server.js')) return [];
  return ['--cpu-prof', `--cpu-prof-dir=${dir}`, '--cpu-prof-interval=250'];
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
  /**
   * The port of the bench's own redis-server: `INFO commandstats` is read just before and just
   * after the measured run, and the commands counted per allowed (2xx) answer.
   */
  readonly redisPort?: number;
  /** The gateway's process: its CPU time per answer over the measured run is recorded. */
  readonly pid?: number;
}

class Bench {
  readonly rows: Row[] = [];
  readonly comparisons: Comparison[] = [];
  /** With an Idempotency-Key (current) against without (baseline), the same build. */
  readonly keyComparisons: Comparison[] = [];
  /** The Redis commands of each kind of keyed request, counted one request at a time. */
  readonly keyedCommands: string[] = [];
  readonly memory: Memory[] = [];
  /** The side-by-side rounds of the target ratios: each round's results, and all their rows. */
  readonly rounds: ReadonlyMap<RoundCase, WrkResult>[] = [];
  readonly roundRows: Row[] = [];
  /** The fixed-rate runs, and per round the latency the gateway added over the stub. */
  readonly pacedRows: Row[] = [];
  /** What the gateway added over the stub in each fixed-rate round. */
  readonly added: Added[] = [];
  /** What Express 5 answering alone (expressServerOptions) added over the stub in the same rounds. */
  readonly expressAdded: Added[] = [];
  /** What Express 5 and http-proxy-middleware, with no check, added over the stub in the same rounds. */
  readonly proxyAdded: Added[] = [];
  /** What (g'), the gateway's hops on Express without its checks, added over the stub in the same rounds. */
  readonly hopsAdded: Added[] = [];
  readonly rss: RssCase[] = [];
  private readonly children: Child[] = [];

  constructor(
    private readonly settings: Settings,
    private readonly dir: string,
  ) {}

  /** Starts `<dist>/<script>` with only the given environment (plus PATH and NODE_ENV=production). */
  node(
    name: string,
    script: string,
    env: Record<string, string>,
    dist = DIST,
    options: { readonly probe?: boolean; readonly nodeFlags?: readonly string[] } = {},
  ): Child {
    // The probe answers, over an IPC channel, the longest event-loop delay since it was last asked.
    const probe =
      options.probe === true ? ['-r', path.join(DIST, 'bench', 'keys', 'probe.js')] : [];
    return this.track(
      startChild(
        name,
        process.execPath,
        [...(options.nodeFlags ?? []), ...profileFlags(script), ...probe, path.join(dist, script)],
        { PATH: process.env.PATH ?? '', NODE_ENV: 'production', ...env },
        { ipc: options.probe === true },
      ),
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
    const before =
      options.redisPort === undefined ? undefined : await commandCounts(options.redisPort);
    const cpuBefore = cpuSecondsOf(options.pid);
    const result = await runWrk({ url, script, durationSeconds, connections, threads });
    const cpuAfter = cpuSecondsOf(options.pid);
    const cpuPerRequestUs =
      cpuBefore === undefined || cpuAfter === undefined || result.requests === 0
        ? undefined
        : ((cpuAfter - cpuBefore) * 1e6) / result.requests;
    let redisCommands: Row['redisCommands'];
    if (options.redisPort !== undefined && before !== undefined) {
      const { total, scripts, byName } = commandsBetween(
        before,
        await commandCounts(options.redisPort),
      );
      const allowed = result.requests - result.errorStatuses;
      redisCommands = {
        // Commands clients sent: all, less those the scripts ran (commandstats counts both).
        perRequest: allowed > 0 ? (total - scriptInner(byName, scripts)) / allowed : Number.NaN,
        executedPerRequest: allowed > 0 ? total / allowed : Number.NaN,
        byName: [...byName.entries()].map(([name, calls]) => `${name} ${calls}`).join(', '),
      };
    }
    const row: Row = {
      target,
      credential,
      expected: options.expected,
      result,
      measuredSeconds: durationSeconds,
      ...(note === undefined ? {} : { note }),
      ...(cpuPerRequestUs === undefined ? {} : { cpuPerRequestUs }),
      ...(redisCommands === undefined ? {} : { redisCommands }),
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

/** The forward-auth endpoint allows the first account's secret key: 200, empty body. */
async function forwardAuthCheck(gatewayUrl: string, account: BenchAccount): Promise<void> {
  const reply = await httpRequest(`${gatewayUrl}${FORWARD_AUTH_PATH}`, {
    headers: { ...FORWARD_AUTH_HEADERS, authorization: `Bearer ${account.secretKey}` },
  });
  if (reply.status !== 200 || reply.body !== '') {
    throw new Error(`forward-auth answered ${reply.status}: ${reply.body}`);
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
async function obtainRedis(
  bench: Bench,
): Promise<{ url: string; origin: string; port?: number } | undefined> {
  const fromEnv = process.env.BENCH_REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') {
    // INFO commandstats counts every client of a shared server: no command counts then.
    return { url: fromEnv, origin: 'BENCH_REDIS_URL (no command counts: a shared server)' };
  }
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
    port,
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
  bornFloor: "(d') Express 5 alone, expressServerOptions",
  proxy: '(g) Express 5 + http-proxy-middleware, no auth',
  hops: "(g') Express 5 + one Redis command + the gateway's proxy, no check",
  naive: '(h) naive composition, Redis limits',
  forwardAuth: '(i) gateway forward-auth (auth-request), Redis limits',
  paced: '(c) gateway, Redis limits',
  memory: '(b) gateway, in-memory limits',
  redis: '(c) gateway, Redis limits',
  wrongLeft: '(e) gateway, wrong key, budget left',
  wrongSpent: '(f) gateway, wrong key, budget spent',
  payoutsMemory: `(k) gateway, in-memory limits, POST ${PAYOUTS_PATH}`,
  payoutsRedis: `(k) gateway, Redis limits, POST ${PAYOUTS_PATH}`,
} as const;

const WRONG_KEY = 'unknown secret key';

/** The processes of a fixed-rate round. */
type PacedCase = 'stub' | 'express' | 'proxy' | 'hops' | 'gateway';
const PACED_CASES: readonly PacedCase[] = ['stub', 'express', 'proxy', 'hops', 'gateway'];

/** Round `round` (from 1) starts one process later than the round before, so none is always first. */
function pacedOrder(round: number): PacedCase[] {
  const shift = (round - 1) % PACED_CASES.length;
  return [...PACED_CASES.slice(shift), ...PACED_CASES.slice(0, shift)];
}

/** A fixed-rate run through a process with the probe preloaded, and what the probe saw. */
interface Probed {
  readonly result: PacedResult;
  readonly loop: LoopDelay;
}

/** What a probed process added over the stub in one fixed-rate round. */
interface Added {
  readonly p50: number;
  readonly p99: number;
  readonly loop: LoopDelay;
  readonly gc: GcAttribution;
  /** Requests answered over the measured time (what the probe's figures are divided by). */
  readonly requests: number;
}

function addedOver(direct: PacedResult, through: Probed): Added {
  return {
    p50: through.result.p50Ms - direct.p50Ms,
    p99: through.result.p99Ms - direct.p99Ms,
    loop: through.loop,
    gc: attributeToPauses(through.result.samples, through.loop.pauses, through.result.p99Ms),
    requests: through.result.samples.length,
  };
}

/** The cases run side by side in rounds for the target ratios. */
type RoundCase = 'floor' | 'born-floor' | 'naive' | 'redis-secret' | 'redis-token' | 'forward-auth';
const ROUND_LABELS: Readonly<Record<RoundCase, string>> = {
  floor: TARGETS.floor,
  'born-floor': TARGETS.bornFloor,
  naive: TARGETS.naive,
  'redis-secret': `${TARGETS.redis}, secret key`,
  'redis-token': `${TARGETS.redis}, token`,
  'forward-auth': TARGETS.forwardAuth,
};

/** Requests a second of the latency cases. */
const PACED_RATE = 1000;

const FORWARD_AUTH_PATH = '/authz/auth-request';
/** nginx's auth_request subrequest for a client's `GET /api/v1/wallets/` (test/helpers/forward-auth.ts). */
const FORWARD_AUTH_HEADERS: Readonly<Record<string, string>> = {
  'X-Original-Method': 'GET',
  'X-Original-URI': WALLETS_PATH,
  'X-Forwarded-For': FORWARDED_CLIENT,
};

/** TOLLGATE_AUTH_FAILURE_LIMIT for (e): the highest the gateway accepts. */
const LARGE_FAILURE_BUDGET = 100_000;

/** RSS of a gateway before, after a million distinct client IPs, and after the window. */
interface RssCase {
  readonly target: string;
  readonly ips: number;
  readonly perSecond: number;
  readonly beforeMiB: number;
  readonly afterMiB: number;
  /** The most RSS was (VmHWM) by the end of the addresses: after the warm-up, at least `beforeMiB`. */
  readonly peakMiB: number;
  /** After the 60 s window, and `flushIps` more new addresses. */
  readonly afterWindowMiB: number;
  /** The most RSS was by the end of those addresses. */
  readonly peakAfterWindowMiB: number;
  readonly flushIps: number;
  /** Answers that were not 2xx, and request errors. */
  readonly unexpected: number;
}

/** A limit window of the per-IP scopes, and a margin. */
const WINDOW_WAIT_MS = 61_000;
/** RSS may move this much after the window and still count as flat. */
const FLAT_MIB = 8;
const RSS_GROWTH_TARGET_MIB = 64;
/** Addresses of the RSS cases' warm-up, before the first reading. */
const RSS_WARMUP_IPS = 5000;

async function measureRss(
  target: string,
  url: string,
  gateway: Child,
  account: BenchAccount,
  ips: number,
): Promise<RssCase> {
  const request = {
    url,
    method: 'POST',
    path: CHECKOUT_PATH,
    headers: {
      'content-type': 'application/json',
      'x-service-public-api-key': account.publishableKey,
    },
    body: '{"amount":100}',
  };
  const check = await httpRequest(`${url}${CHECKOUT_PATH}`, {
    method: 'POST',
    headers: { ...request.headers, 'x-forwarded-for': addressNumber(2 ** 24 - 1) },
    body: request.body,
  });
  if (check.status !== 201) throw new Error(`${target}: a checkout answered ${check.status}`);
  const rss = (): number => memoryOf(gateway.process.pid)?.rssMiB ?? Number.NaN;
  const peak = (): number => memoryOf(gateway.process.pid)?.peakMiB ?? Number.NaN;
  const unexpected = (statuses: Readonly<Record<number, number>>, errors: number): number =>
    errors +
    Object.entries(statuses).reduce(
      (sum, [status, count]) => (Number(status) >= 200 && Number(status) < 300 ? sum : sum + count),
      0,
    );
  // Warm-up from another block of addresses (the top of 10/8), so that "before" is a warmed
  // process, not a fresh one growing its heap for the first time.
  const warmup = await sendFromDistinctIps({
    ...request,
    first: 2 ** 24 - RSS_WARMUP_IPS - 1,
    count: RSS_WARMUP_IPS,
  });
  if (unexpected(warmup.statuses, warmup.errors) > 0) {
    throw new Error(
      `${target}: the warm-up had ${unexpected(warmup.statuses, warmup.errors)} unexpected answers`,
    );
  }
  const beforeMiB = rss();
  log(
    `${target}: ${ips.toLocaleString('en-US')} distinct client IPs, RSS before ${beforeMiB.toFixed(0)} MiB`,
  );
  const sent = await sendFromDistinctIps({
    ...request,
    first: 0,
    count: ips,
    onProgress: (answered) => {
      log(`${target}: ${answered.toLocaleString('en-US')} answered, RSS ${rss().toFixed(0)} MiB`);
    },
  });
  const afterMiB = rss();
  const peakMiB = peak();
  log(
    `${target}: RSS after ${afterMiB.toFixed(0)} MiB (peak ${peakMiB.toFixed(0)} MiB); waiting ${WINDOW_WAIT_MS / 1000}s for the window`,
  );
  await new Promise((resolve) => setTimeout(resolve, WINDOW_WAIT_MS));
  const flushIps = Math.max(1000, Math.floor(ips / 10));
  const flushed = await sendFromDistinctIps({ ...request, first: ips, count: flushIps });
  const afterWindowMiB = rss();
  const peakAfterWindowMiB = peak();
  log(
    `${target}: RSS after the window and ${flushIps.toLocaleString('en-US')} more IPs ${afterWindowMiB.toFixed(0)} MiB (peak ${peakAfterWindowMiB.toFixed(0)} MiB)`,
  );
  return {
    target,
    ips,
    perSecond: sent.answered / sent.seconds,
    beforeMiB,
    afterMiB,
    peakMiB,
    afterWindowMiB,
    peakAfterWindowMiB,
    flushIps,
    unexpected:
      unexpected(sent.statuses, sent.errors) + unexpected(flushed.statuses, flushed.errors),
  };
}

/** One fixed-rate round of a probed process, as a line of the report. */
function describeAdded(added: Added, index: number, subject: string): string {
  return (
    `- round ${index + 1}: ${subject} added p50 ${added.p50.toFixed(2)} ms, p99 ${added.p99.toFixed(2)} ms over the stub` +
    `; its event loop turned at most ${added.loop.maxMs.toFixed(1)} ms late (p99 ${added.loop.p99Ms.toFixed(1)} ms) over the measured time` +
    `. Over its requests ${describeAttribution(added.gc, subject)}` +
    `; it allocated ${formatPerRequest(added.loop.allocatedBytes, added.requests)} on V8's heap per request, of which ${formatPerRequest(added.loop.toOldBytes, added.requests)} reached the old generation (${formatPerRequest(added.loop.promotedBytes, added.requests)} promoted by scavenges)` +
    (added.loop.droppedPauses > 0 ? ` (${added.loop.droppedPauses} more pauses not kept)` : '')
  );
}

/** Bytes per request, in KiB with one decimal (`n/a` without requests). */
function formatPerRequest(bytes: number, requests: number): string {
  return requests > 0 ? `${(bytes / requests / 1024).toFixed(1)} KiB` : 'n/a';
}

function formatRss(cases: readonly RssCase[]): string {
  const lines = [
    '| target | distinct IPs | requests/s | RSS before (MiB) | after (MiB) | peak (MiB) | peak growth (MiB) | after the window (MiB) | its peak (MiB) | unexpected |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const c of cases) {
    lines.push(
      `| ${c.target} | ${c.ips.toLocaleString('en-US')} | ${Math.round(c.perSecond).toLocaleString('en-US')} | ` +
        `${c.beforeMiB.toFixed(0)} | ${c.afterMiB.toFixed(0)} | ${c.peakMiB.toFixed(0)} | ${(c.peakMiB - c.beforeMiB).toFixed(0)} | ` +
        `${c.afterWindowMiB.toFixed(0)} (+${c.flushIps.toLocaleString('en-US')} IPs) | ${c.peakAfterWindowMiB.toFixed(0)} | ${c.unexpected} |`,
    );
  }
  return lines.join('\n');
}

/**
 * Commands the scripts ran, as counted by commandstats: the calls of the data commands a limit
 * script uses (the gateway's admission script: TIME, GETRANGE, SETRANGE, PEXPIRE and SET for a
 * rolling counter, PTTL, GET and INCR or SET for a fixed one; rate-limit-redis's: INCR and PTTL),
 * none of which the gateway sends itself, up to a bound per script call. An upper bound on what
 * clients did not send.
 */
function scriptInner(byName: ReadonlyMap<string, number>, scripts: number): number {
  const inner = [
    'time',
    'getrange',
    'setrange',
    'incr',
    'decr',
    'pttl',
    'pexpire',
    'expire',
    'get',
    'set',
    'incrby',
    'pexpireat',
  ];
  const called = inner.reduce((sum, name) => sum + (byName.get(name) ?? 0), 0);
  return Math.min(called, scripts * SCRIPT_INNER_CALLS);
}
/** The most commands one script call runs: a few per counter, and a search of a long ring. */
const SCRIPT_INNER_CALLS = 64;

/** Requests a second of case `a` over case `b`, per side-by-side round that ran both. */
function roundRatios(bench: Bench, a: RoundCase, b: RoundCase): number[] | undefined {
  const values = bench.rounds.flatMap((round) => {
    const x = round.get(a);
    const y = round.get(b);
    return x === undefined || y === undefined ? [] : [x.requestsPerSecond / y.requestsPerSecond];
  });
  return values.length > 0 ? values : undefined;
}

/** The performance targets from what this run measured. */
function targetsOf(bench: Bench): Target[] {
  const ratios = (a: RoundCase, b: RoundCase): number[] | undefined => roundRatios(bench, a, b);
  const commands = bench.rows.filter(
    (row) => row.redisCommands !== undefined && row.target !== TARGETS.naive,
  );
  const worst = Math.max(...commands.map((row) => row.redisCommands?.perRequest ?? Number.NaN));
  const addedP99 = median(bench.added.map((added) => added.p99));
  const addedP50 = median(bench.added.map((added) => added.p50));
  const expressP99 = median(bench.expressAdded.map((added) => added.p99));
  const proxyP99 = median(bench.proxyAdded.map((added) => added.p99));
  const hopsP99 = median(bench.hopsAdded.map((added) => added.p99));
  return [
    ratioTarget(
      'gateway, Redis, secret key / naive composition',
      ratios('redis-secret', 'naive'),
      1.4,
    ),
    ratioTarget('gateway, Redis, secret key / Express alone', ratios('redis-secret', 'floor'), 0.5),
    ratioTarget(
      'gateway, Redis, token / gateway, Redis, secret key',
      ratios('redis-token', 'redis-secret'),
      0.95,
    ),
    ratioTarget(
      'forward-auth endpoint, Redis / Express alone',
      ratios('forward-auth', 'floor'),
      0.7,
    ),
    {
      label: 'Redis commands per allowed request (gateway cases, the most of them)',
      goal: '1',
      figure: commands.length > 0 ? worst.toFixed(2) : undefined,
      met: commands.length > 0 ? worst <= 1.01 : undefined,
    },
    {
      label: `added p99 over the direct stub at ${PACED_RATE.toLocaleString('en-US')} req/s (gateway, Redis, secret key)`,
      goal: '< 2 ms',
      figure:
        bench.added.length > 0
          ? `${addedP99.toFixed(2)} ms (p50 ${addedP50.toFixed(2)} ms; median of ${bench.added.length} round(s); in the same rounds, Express 5 answering alone on expressServerOptions added ${expressP99.toFixed(2)} ms, Express 5 + http-proxy-middleware with no check ${proxyP99.toFixed(2)} ms, and Express 5 + one Redis command + the gateway's proxy with no check ${hopsP99.toFixed(2)} ms)`
          : undefined,
      met: bench.added.length > 0 ? addedP99 < 2 : undefined,
    },
    ...(bench.rss.length > 0
      ? bench.rss.map((c) => {
          // The peak, not the reading at the last address: RSS follows the collector's sawtooth,
          // so a single reading lands anywhere between the trough and the crest.
          const growth = c.peakMiB - c.beforeMiB;
          const later = c.peakAfterWindowMiB - c.peakMiB;
          const signed = (mib: number): string => {
            const whole = Math.round(mib);
            return `${whole >= 0 ? '+' : ''}${whole}`;
          };
          return {
            label: `RSS growth after ${c.ips.toLocaleString('en-US')} distinct client IPs (peak): ${c.target}`,
            goal: `< ${RSS_GROWTH_TARGET_MIB} MiB, flat after the window (peak within ${FLAT_MIB} MiB)`,
            figure: `${growth.toFixed(0)} MiB at the peak (${signed(c.afterMiB - c.beforeMiB)} at the last address), then peak ${signed(later)} MiB after the window`,
            met: growth < RSS_GROWTH_TARGET_MIB && later <= FLAT_MIB,
          };
        })
      : [
          {
            label: 'RSS growth after 1,000,000 distinct client IPs',
            goal: `< ${RSS_GROWTH_TARGET_MIB} MiB, flat after the window`,
            figure: undefined,
            met: undefined,
          },
        ]),
  ];
}

/** The ratios against the floor served with `expressServerOptions(app)` (no target). */
function servedAlikeRatios(bench: Bench): string[] {
  const pairs: readonly (readonly [RoundCase, RoundCase])[] = [
    ['born-floor', 'floor'],
    ['redis-secret', 'born-floor'],
    ['forward-auth', 'born-floor'],
  ];
  return pairs.flatMap(([of, over]) => {
    const values = roundRatios(bench, of, over);
    if (values === undefined) return [];
    const rounds = values.map((ratio) => ratio.toFixed(2)).join(', ');
    return [
      `- ${ROUND_LABELS[of]} / ${ROUND_LABELS[over]}: ${median(values).toFixed(2)} (rounds: ${rounds})`,
    ];
  });
}

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
    distinctIps: setting('BENCH_DISTINCT_IPS', 1_000_000, 1000, 8_000_000),
    concurrent: setting('BENCH_BASELINE_CONCURRENT', 0, 0, 1) === 1,
  };
  const groups = selectedGroups();
  const baseline = baselineBuild();
  const current: Build = {
    label: 'this',
    dist: DIST,
    nodeFlags: flagsFrom(process.env.BENCH_NODE_FLAGS),
    env: gatewayEnvFrom(process.env.BENCH_GATEWAY_ENV),
  };
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
      forwardAuth: path.join(dir, 'forward-auth.lua'),
    };
    const upstreamHeaders = accounts.map((account) => ({
      'X-Gateway-Account-Id': account.accountId,
      'X-Gateway-Key-Id': account.keyId,
      'X-Gateway-Role': 'level-1',
      'X-Gateway-Credential': 'secret',
    }));
    const secretHeaders = accounts.map((account) => ({
      Authorization: `Bearer ${account.secretKey}`,
    }));
    writeRotatingScript(scripts.upstream, WALLETS_PATH, upstreamHeaders);
    writeRotatingScript(scripts.secret, WALLETS_PATH, secretHeaders);
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
    // What nginx's auth_request sends (test/helpers/forward-auth.ts), for each account in turn.
    writeRotatingScript(
      scripts.forwardAuth,
      FORWARD_AUTH_PATH,
      secretHeaders.map((headers) => ({ ...headers, ...FORWARD_AUTH_HEADERS })),
    );
    // The idempotency cases: the same accounts with level-2 keys (POST payouts needs level-2).
    const payoutKeysFile = path.join(dir, 'keys-level-2.json');
    const payoutScripts = {
      noKey: path.join(dir, 'payouts.lua'),
      unique: path.join(dir, 'payouts-unique-keys.lua'),
      replay: path.join(dir, 'payouts-replays.lua'),
    };
    if (groups.has('idempotency')) {
      writeFileSync(payoutKeysFile, JSON.stringify(keysDocument(accounts, 'level-2')), {
        mode: 0o600,
      });
      const post = { method: 'POST', body: PAYOUT_BODY, countStatuses: true } as const;
      writeRotatingScript(payoutScripts.noKey, PAYOUTS_PATH, secretHeaders, post);
      writeRotatingScript(payoutScripts.unique, PAYOUTS_PATH, secretHeaders, {
        ...post,
        idempotencyKeys: 'unique',
      });
      writeRotatingScript(payoutScripts.replay, PAYOUTS_PATH, secretHeaders, {
        ...post,
        idempotencyKeys: 'per-set',
      });
    }
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
    // The payouts' upstream answers 201 and keeps nothing; the held one holds each answer 1 s.
    let payoutUpstreamUrl = upstreamUrl;
    let heldUpstreamUrl = upstreamUrl;
    if (groups.has('idempotency')) {
      for (const [name, delay] of [
        ['sink upstream (payouts)', '0'],
        ['sink upstream, held 1 s', '1000'],
      ] as const) {
        const port = await freePort();
        const sink = bench.node(name, 'bench/sink-upstream.js', {
          PORT: String(port),
          SINK_DELAY_MS: delay,
        });
        await waitUntil(sink, `http://127.0.0.1:${port}/`, (reply) => reply.status > 0);
        if (delay === '0') payoutUpstreamUrl = `http://127.0.0.1:${port}`;
        else heldUpstreamUrl = `http://127.0.0.1:${port}`;
      }
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
      probe = false,
    ): Promise<{ url: string; gateway: Child }> => {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const gateway = bench.node(
        name,
        'gateway/server.js',
        { ...gatewayEnv, ...build.env, ...env, PORT: String(port) },
        build.dist,
        { probe, nodeFlags: build.nodeFlags },
      );
      await waitUntil(
        gateway,
        `${url}/healthz`,
        (reply) => reply.status === 200 && reply.body.includes(`"${limits}"`),
      );
      return { url, gateway };
    };
    /** A bench process of `bench/` on a free loopback port, once `GET readyPath` answers. */
    const startBenchServer = async (
      name: string,
      script: string,
      env: Record<string, string>,
      readyPath = WALLETS_PATH,
      probe = false,
    ): Promise<{ url: string; child: Child }> => {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const child = bench.node(name, script, { ...env, PORT: String(port) }, DIST, { probe });
      await waitUntil(child, `${url}${readyPath}`, (reply) => reply.status > 0);
      return { url, child };
    };

    // Kept running until the side-by-side rounds of the target ratios are done.
    const roundUrls = new Map<RoundCase, string>();

    if (groups.has('direct')) {
      await bench.measure(TARGETS.upstream, 'gateway headers', upstreamUrl, scripts.upstream);
      const floor = await startBenchServer('express floor', 'bench/express-floor.js', {});
      await bench.measure(TARGETS.floor, 'gateway headers', floor.url, scripts.upstream);
      roundUrls.set('floor', floor.url);
      const bornFloor = await startBenchServer('express floor, born', 'bench/express-floor.js', {
        FLOOR_BORN: '1',
      });
      await bench.measure(TARGETS.bornFloor, 'gateway headers', bornFloor.url, scripts.upstream);
      roundUrls.set('born-floor', bornFloor.url);
      const proxy = await startBenchServer('express + proxy', 'bench/express-proxy.js', {
        UPSTREAM_URL: upstreamUrl,
      });
      await bench.measure(TARGETS.proxy, 'gateway headers', proxy.url, scripts.upstream);
      await proxy.child.stop();
    }

    if (groups.has('memory')) {
      const { url, gateway } = await startGateway(TARGETS.memory, {}, 'memory');
      await sanityCheck(url, first);
      await bench.measure(TARGETS.memory, 'secret key', url, scripts.secret);
      await bench.measure(TARGETS.memory, 'token', url, scripts.token);
      bench.recordMemory(TARGETS.memory, gateway);
      await gateway.stop();
    }

    const redisGroups: readonly Group[] = [
      'redis',
      'naive',
      'forward-auth',
      'latency',
      'rss',
      'idempotency',
    ];
    const redis = redisGroups.some((group) => groups.has(group))
      ? await obtainRedis(bench)
      : undefined;
    if (redis === undefined && redisGroups.some((group) => groups.has(group))) {
      log('no redis-server on PATH and no BENCH_REDIS_URL: the Redis cases are skipped');
    }
    if (redis !== undefined) redisOrigin = redis.origin;
    const redisPort = redis?.port;
    const withRedis = (): Record<string, string> =>
      redis === undefined
        ? {}
        : {
            REDIS_URL: redis.url,
            TOLLGATE_REDIS_PREFIX: `tollgate-bench:${randomBytes(6).toString('hex')}:`,
          };
    const counted: MeasureOptions = { expected: SUCCESS, redisPort };

    if (redis !== undefined && groups.has('redis')) {
      const { url, gateway } = await startGateway(TARGETS.redis, withRedis(), 'shared');
      await sanityCheck(url, first);
      await bench.measure(TARGETS.redis, 'secret key', url, scripts.secret, counted);
      await bench.measure(TARGETS.redis, 'token', url, scripts.token, counted);
      bench.recordMemory(TARGETS.redis, gateway);
      roundUrls.set('redis-secret', url).set('redis-token', url);
    }

    if (redis !== undefined && groups.has('naive')) {
      const env = withRedis();
      const naive = await startBenchServer('naive composition', 'bench/naive-composition.js', {
        KEYS_FILE: keysFile,
        REDIS_URL: redis.url,
        REDIS_PREFIX: env.TOLLGATE_REDIS_PREFIX ?? 'tollgate-bench:naive:',
        UPSTREAM_URL: upstreamUrl,
      });
      const status = await walletsWith(naive.url, first.secretKey);
      if (status !== 200) throw new Error(`the naive composition answered ${status}`);
      await bench.measure(TARGETS.naive, 'secret key', naive.url, scripts.secret, counted);
      roundUrls.set('naive', naive.url);
    }

    if (redis !== undefined && groups.has('forward-auth')) {
      const { url, gateway } = await startGateway(
        TARGETS.forwardAuth,
        { ...withRedis(), TOLLGATE_TRUST_PROXY: '127.0.0.1' },
        'shared',
      );
      await forwardAuthCheck(url, first);
      await bench.measure(TARGETS.forwardAuth, 'secret key', url, scripts.forwardAuth, counted);
      bench.recordMemory(TARGETS.forwardAuth, gateway);
      roundUrls.set('forward-auth', url);
    }

    if (roundUrls.size > 1) {
      const scriptOf: Readonly<Record<RoundCase, string>> = {
        floor: scripts.upstream,
        'born-floor': scripts.upstream,
        naive: scripts.secret,
        'redis-secret': scripts.secret,
        'redis-token': scripts.token,
        'forward-auth': scripts.forwardAuth,
      };
      const cases = [...roundUrls.keys()];
      for (let round = 1; round <= settings.rounds; round++) {
        // Which case goes first moves by one every round.
        const shift = (round - 1) % cases.length;
        const order = [...cases.slice(shift), ...cases.slice(0, shift)];
        const results = new Map<RoundCase, WrkResult>();
        for (const name of order) {
          const row = await bench.run(
            ROUND_LABELS[name],
            `round ${round}`,
            roundUrls.get(name) ?? '',
            scriptOf[name],
            {
              expected: SUCCESS,
              durationSeconds: settings.roundSeconds,
              context: `round ${round} of ${settings.rounds}`,
            },
          );
          bench.roundRows.push(row);
          results.set(name, row.result);
        }
        bench.rounds.push(results);
      }
    }

    if (redis !== undefined && groups.has('latency')) {
      const { url, gateway } = await startGateway(
        TARGETS.paced,
        withRedis(),
        'shared',
        current,
        true,
      );
      await sanityCheck(url, first);
      // Floors: Express 5 answering alone, its server built as the gateway's is (with
      // `app.listen()` it promotes 16 times the bytes and collects fully every few seconds), and
      // the ten-line gateway: Express 5 with http-proxy-middleware and no check at all.
      const expressAlone = await startBenchServer(
        'express floor, born, paced',
        'bench/express-floor.js',
        { FLOOR_BORN: '1' },
        WALLETS_PATH,
        true,
      );
      const expressProxy = await startBenchServer(
        'express + proxy, paced',
        'bench/express-proxy.js',
        { UPSTREAM_URL: upstreamUrl },
        WALLETS_PATH,
        true,
      );
      // The gateway's own hops (a Redis round trip, its proxy) on Express, without its checks.
      const expressHops = await startBenchServer(
        'express + redis + proxy, paced',
        'bench/express-hops.js',
        { UPSTREAM_URL: upstreamUrl, REDIS_URL: redis.url },
        WALLETS_PATH,
        true,
      );
      const paced = async (
        target: string,
        credential: string,
        targetUrl: string,
        headerSets: readonly Readonly<Record<string, string>>[],
        context: string,
      ): Promise<PacedResult> => {
        const { warmupSeconds } = settings;
        log(
          `${target}, ${PACED_RATE}/s [${context}]: ${warmupSeconds}s warm-up, ${settings.roundSeconds}s measured`,
        );
        const result = await runPaced({
          url: targetUrl,
          path: WALLETS_PATH,
          headerSets,
          rate: PACED_RATE,
          warmupSeconds,
          durationSeconds: settings.roundSeconds,
        });
        const short = result.requestsPerSecond < PACED_RATE * 0.95;
        bench.pacedRows.push({
          target,
          credential: `${credential}, ${context}`,
          expected: SUCCESS,
          result,
          measuredSeconds: settings.roundSeconds,
          ...(short
            ? {
                note: `${context}: answered ${Math.round(result.requestsPerSecond)} of the ${PACED_RATE} requests due each second within the measured time`,
              }
            : {}),
        });
        return result;
      };
      for (let round = 1; round <= settings.rounds; round++) {
        const context = `round ${round}`;
        const stub = (): Promise<PacedResult> =>
          paced(TARGETS.upstream, 'gateway headers', upstreamUrl, upstreamHeaders, context);
        /** A round through a probed process; the probe's count starts again after the warm-up. */
        const probed = async (
          child: Child,
          target: string,
          credential: string,
          targetUrl: string,
          headerSets: readonly Readonly<Record<string, string>>[],
        ): Promise<Probed> => {
          const loopDelay = (): Promise<LoopDelay> =>
            askProbe<LoopDelay>(child.process, child.name, 'loop');
          const warmedUp = new Promise((resolve) =>
            setTimeout(resolve, settings.warmupSeconds * 1000),
          ).then(loopDelay);
          const result = await paced(target, credential, targetUrl, headerSets, context);
          await warmedUp;
          return { result, loop: await loopDelay() };
        };
        const gate = (): Promise<Probed> =>
          probed(gateway, TARGETS.paced, 'secret key', url, secretHeaders);
        const alone = (): Promise<Probed> =>
          probed(
            expressAlone.child,
            TARGETS.bornFloor,
            'gateway headers',
            expressAlone.url,
            upstreamHeaders,
          );
        const bare = (): Promise<Probed> =>
          probed(
            expressProxy.child,
            TARGETS.proxy,
            'gateway headers',
            expressProxy.url,
            upstreamHeaders,
          );
        const hops = (): Promise<Probed> =>
          probed(
            expressHops.child,
            TARGETS.hops,
            'gateway headers',
            expressHops.url,
            upstreamHeaders,
          );
        let direct: PacedResult | undefined;
        let through: Probed | undefined;
        let answered: Probed | undefined;
        let proxied: Probed | undefined;
        let hopped: Probed | undefined;
        const runs: Record<PacedCase, () => Promise<void>> = {
          stub: async () => {
            direct = await stub();
          },
          express: async () => {
            answered = await alone();
          },
          proxy: async () => {
            proxied = await bare();
          },
          hops: async () => {
            hopped = await hops();
          },
          gateway: async () => {
            through = await gate();
          },
        };
        for (const name of pacedOrder(round)) await runs[name]();
        if (
          direct === undefined ||
          through === undefined ||
          answered === undefined ||
          proxied === undefined ||
          hopped === undefined
        ) {
          throw new Error('a fixed-rate round did not run');
        }
        bench.added.push(addedOver(direct, through));
        bench.expressAdded.push(addedOver(direct, answered));
        bench.proxyAdded.push(addedOver(direct, proxied));
        bench.hopsAdded.push(addedOver(direct, hopped));
      }
      await gateway.stop();
      await expressAlone.child.stop();
      await expressProxy.child.stop();
      await expressHops.child.stop();
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
      /** Limits shared in Redis (a fresh key prefix per gateway) instead of process memory. */
      readonly redis?: boolean;
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
    const redisSecretKeyCase: GatewayCase = {
      name: '(c) secret key, Redis',
      target: TARGETS.redis,
      credential: 'secret key',
      env: {},
      script: scripts.secret,
      prepare: (url) => sanityCheck(url, first),
      options: counted,
      redis: true,
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
    const payoutEnv = {
      TOLLGATE_KEYS_FILE: payoutKeysFile,
      TOLLGATE_UPSTREAM_URL: payoutUpstreamUrl,
    };
    const payoutCase = (
      name: string,
      credential: string,
      script: string,
      redis: boolean,
    ): GatewayCase => ({
      name,
      target: redis ? TARGETS.payoutsRedis : TARGETS.payoutsMemory,
      credential,
      env: payoutEnv,
      script,
      prepare: async (url) => {
        await payoutCheck(url, first.secretKey);
        if (script === payoutScripts.replay) {
          await primeReplays(
            url,
            accounts.map((account) => account.secretKey),
          );
        }
      },
      options: redis ? counted : { expected: SUCCESS },
      redis,
    });
    const payoutsMemoryCase = payoutCase(
      '(k) POST payouts, no key, memory',
      'secret key, no Idempotency-Key',
      payoutScripts.noKey,
      false,
    );
    const payoutsRedisCase = payoutCase(
      '(k) POST payouts, no key, Redis',
      'secret key, no Idempotency-Key',
      payoutScripts.noKey,
      true,
    );
    /** Keyed payouts, each measured side by side with the same build's payouts without a key. */
    const keyedCases: readonly [GatewayCase, GatewayCase][] = [
      [
        payoutCase(
          '(k) first uses (a new key each request), memory',
          'secret key, a new Idempotency-Key each request',
          payoutScripts.unique,
          false,
        ),
        payoutsMemoryCase,
      ],
      [
        payoutCase(
          '(k) replays (one key per account), memory',
          'secret key, replayed Idempotency-Key',
          payoutScripts.replay,
          false,
        ),
        payoutsMemoryCase,
      ],
      [
        payoutCase(
          '(k) first uses (a new key each request), Redis',
          'secret key, a new Idempotency-Key each request',
          payoutScripts.unique,
          true,
        ),
        payoutsRedisCase,
      ],
      [
        payoutCase(
          '(k) replays (one key per account), Redis',
          'secret key, replayed Idempotency-Key',
          payoutScripts.replay,
          true,
        ),
        payoutsRedisCase,
      ],
    ];
    /** A case's gateway of `build`, started and prepared; the caller stops it. */
    const startCase = async (
      gatewayCase: GatewayCase,
      build: Build,
    ): Promise<{ url: string; gateway: Child }> => {
      const started = await startGateway(
        `${gatewayCase.target} (${build.label} build)`,
        { ...gatewayCase.env, ...(gatewayCase.redis === true ? withRedis() : {}) },
        gatewayCase.redis === true ? 'shared' : 'memory',
        build,
      );
      try {
        await gatewayCase.prepare(started.url);
      } catch (error) {
        await started.gateway.stop();
        throw error;
      }
      return started;
    };
    const measureCase = (
      gatewayCase: GatewayCase,
      { url, gateway }: { url: string; gateway: Child },
      measuredSeconds?: number,
      context?: string,
      options: MeasureOptions = gatewayCase.options,
    ): Promise<Row> =>
      bench.run(gatewayCase.target, gatewayCase.credential, url, gatewayCase.script, {
        ...options,
        durationSeconds: measuredSeconds,
        context,
        pid: gateway.process.pid,
      });
    const runCase = async (
      gatewayCase: GatewayCase,
      build: Build,
      measuredSeconds?: number,
      context?: string,
    ): Promise<Row> => {
      const started = await startCase(gatewayCase, build);
      try {
        return await measureCase(gatewayCase, started, measuredSeconds, context);
      } finally {
        await started.gateway.stop();
      }
    };
    /**
     * Both builds' gateways of a case under load at the same time (BENCH_BASELINE_CONCURRENT):
     * the machine's other load falls on both alike. Redis commands are not counted (one server).
     */
    const runConcurrently = async (
      gatewayCase: GatewayCase,
      other: Build,
      round: number,
      otherCase: GatewayCase = gatewayCase,
    ): Promise<{ mine: Row; theirs: Row }> => {
      const mine = await startCase(gatewayCase, current);
      const theirs = await startCase(otherCase, other).catch(async (error: unknown) => {
        await mine.gateway.stop();
        throw error;
      });
      const { redisPort: _counted, ...options } = gatewayCase.options;
      const { redisPort: _alsoCounted, ...otherOptions } = otherCase.options;
      const context = (build: Build): string =>
        `${build.label} build, both at once, round ${round} of ${settings.rounds}`;
      try {
        const [mineRow, theirsRow] = await Promise.all([
          measureCase(gatewayCase, mine, settings.roundSeconds, context(current), options),
          measureCase(otherCase, theirs, settings.roundSeconds, context(other), otherOptions),
        ]);
        return { mine: mineRow, theirs: theirsRow };
      } finally {
        await Promise.all([mine.gateway.stop(), theirs.gateway.stop()]);
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
        ...(redis !== undefined && groups.has('redis') ? [redisSecretKeyCase] : []),
        ...(groups.has('wrong-credential') ? [wrongLeftCase, wrongSpentCase] : []),
        ...(groups.has('idempotency') ? [payoutsMemoryCase] : []),
        ...(redis !== undefined && groups.has('idempotency') ? [payoutsRedisCase] : []),
      ];
      for (const gatewayCase of compared) {
        const rounds: Round[] = [];
        for (let round = 1; round <= settings.rounds; round++) {
          const order: Round['order'] = settings.concurrent
            ? 'at once'
            : round % 2 === 1
              ? 'this first'
              : 'baseline first';
          const runOne = (build: Build): Promise<Row> =>
            runCase(
              gatewayCase,
              build,
              settings.roundSeconds,
              `${build.label} build, round ${round} of ${settings.rounds}`,
            );
          let mine: Row;
          let theirs: Row;
          if (order === 'at once') {
            ({ mine, theirs } = await runConcurrently(gatewayCase, baseline, round));
          } else if (order === 'this first') {
            mine = await runOne(current);
            theirs = await runOne(baseline);
          } else {
            theirs = await runOne(baseline);
            mine = await runOne(current);
          }
          rounds.push({ round, order, current: mine, baseline: theirs });
        }
        bench.comparisons.push({ name: gatewayCase.name, rounds });
      }
    }

    if (groups.has('idempotency')) {
      // The Redis commands of each kind of keyed request, one at a time, then under load.
      if (redis !== undefined) {
        const held = await startGateway(
          `${TARGETS.payoutsRedis}, upstream held 1 s`,
          { ...payoutEnv, TOLLGATE_UPSTREAM_URL: heldUpstreamUrl, ...withRedis() },
          'shared',
        );
        if (redisPort !== undefined) {
          bench.keyedCommands.push(
            ...(await countKeyedCommands(held.url, first.secretKey, redisPort, 1000)),
          );
        }
        await held.gateway.stop();
        bench.rows.push(await runCase(payoutsRedisCase, current));
        for (const [keyed] of keyedCases) {
          if (keyed.redis === true) bench.rows.push(await runCase(keyed, current));
        }
      }
      // With a key against without, the same build, both gateways under load at once.
      for (const [keyed, unkeyed] of keyedCases) {
        if (keyed.redis === true && redis === undefined) continue;
        const rounds: Round[] = [];
        for (let round = 1; round <= settings.rounds; round++) {
          const { mine, theirs } = await runConcurrently(keyed, current, round, unkeyed);
          rounds.push({ round, order: 'at once', current: mine, baseline: theirs });
        }
        bench.keyComparisons.push({ name: keyed.name, rounds });
      }
    }

    if (groups.has('rss')) {
      const sink = await startBenchServer('sink upstream', 'bench/sink-upstream.js', {}, '/');
      const kinds: { limits: string; env: Record<string, string>; healthz: string }[] = [
        { limits: 'memory', env: {}, healthz: 'memory' },
        ...(redis === undefined ? [] : [{ limits: 'Redis', env: withRedis(), healthz: 'shared' }]),
      ];
      for (const kind of kinds) {
        const target = `(j) gateway, ${kind.limits} limits, POST ${CHECKOUT_PATH} per IP`;
        const { url, gateway } = await startGateway(
          target,
          { ...kind.env, TOLLGATE_TRUST_PROXY: '127.0.0.1', TOLLGATE_UPSTREAM_URL: sink.url },
          kind.healthz,
        );
        bench.rss.push(await measureRss(target, url, gateway, first, settings.distinctIps));
        await gateway.stop();
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
    ...redisCommandLines(bench.rows),
    '',
  ];
  if (bench.roundRows.length > 0) {
    out.push(
      '### Side by side, for the target ratios',
      '',
      `- ${settings.rounds} round(s); in each, every case below in turn (${settings.warmupSeconds}s warm-up, ${settings.roundSeconds}s measured), the first case moving by one every round`,
      '',
      formatRows(bench.roundRows),
      '',
    );
  }
  if (bench.pacedRows.length > 0) {
    out.push(
      `### At a fixed ${PACED_RATE.toLocaleString('en-US')} requests a second (open loop)`,
      '',
      `- one request due every ${1000 / PACED_RATE} ms on keep-alive connections, each timed from when it was due; ${settings.roundSeconds}s measured after ${settings.warmupSeconds}s warm-up, the stub, (d'), (g), (g') and the gateway in turn, each round starting one later, over ${settings.rounds} round(s)`,
      '',
      formatRows(bench.pacedRows),
      '',
      ...notes(bench.pacedRows),
      ...bench.added.map((added, index) => describeAdded(added, index, 'the gateway')),
      ...bench.expressAdded.map((added, index) =>
        describeAdded(added, index, 'Express 5 answering alone (expressServerOptions)'),
      ),
      ...bench.proxyAdded.map((added, index) =>
        describeAdded(added, index, 'Express 5 + http-proxy-middleware (no check)'),
      ),
      ...bench.hopsAdded.map((added, index) =>
        describeAdded(
          added,
          index,
          "Express 5 + one Redis command + the gateway's proxy (no check)",
        ),
      ),
      '',
    );
  }
  if (bench.rss.length > 0) {
    out.push(
      `### RSS after distinct client IPs on the per-IP scopes (POST ${CHECKOUT_PATH}, X-Forwarded-For from loopback)`,
      '',
      formatRss(bench.rss),
      '',
    );
  }
  out.push('### Performance targets', '', formatTargets(targetsOf(bench)), '');
  const served = servedAlikeRatios(bench);
  if (served.length > 0) {
    out.push(
      '### Against Express served as the gateway is (no target)',
      '',
      `The targets compare with Express served by \`app.listen()\`; the gateway's server is built with \`expressServerOptions(app)\`. The same ratios against ${TARGETS.bornFloor}, from the same rounds:`,
      '',
      ...served,
      '',
    );
  }
  if (baseline !== undefined) {
    out.push(
      '### This build / baseline, side by side',
      '',
      `- this: ${DIST} (${commitOf(DIST)})${flagsNote(current)}; baseline: ${baseline.dist} (${commitOf(baseline.dist)})${flagsNote(baseline)}, same stub upstream, keys and wrk scripts`,
      settings.concurrent
        ? `- ${settings.rounds} round(s) per case; in each, both builds in fresh gateway processes under load at the same time (BENCH_BASELINE_CONCURRENT, one wrk each): ${settings.warmupSeconds}s warm-up, then ${settings.roundSeconds}s measured`
        : `- ${settings.rounds} round(s) per case; in each, each build in a fresh gateway process: ${settings.warmupSeconds}s warm-up, then ${settings.roundSeconds}s measured; which build goes first swaps every round`,
      '',
      ...formatComparisons(bench.comparisons),
      '',
    );
  }
  if (bench.keyComparisons.length > 0 || bench.keyedCommands.length > 0) {
    out.push(
      `### Idempotency-Key: POST ${PAYOUTS_PATH}, with a key / without, side by side (this build)`,
      '',
      `- level-2 secret keys of the same accounts; the sink upstream (201 {}, nothing kept); ${settings.rounds} round(s) per case, in each both gateways of this build under load at the same time, one with the keyed script and one without a key: ${settings.warmupSeconds}s warm-up, then ${settings.roundSeconds}s measured`,
      '',
      '#### Redis commands per keyed request, one request at a time (INFO commandstats)',
      '',
      ...bench.keyedCommands,
      '',
      ...formatComparisons(bench.keyComparisons, { current: 'key', baseline: 'no key' }),
      '',
    );
  }
  // One blank line between blocks, whichever blocks are empty.
  console.log(out.filter((line, index) => line !== '' || out[index - 1] !== '').join('\n'));
  const badRss = bench.rss.filter((c) => c.unexpected > 0);
  if (badRss.length > 0) {
    log(
      `RSS cases had unexpected answers: ${badRss.map((c) => `${c.target}: ${c.unexpected}`).join('; ')}`,
    );
    process.exitCode = 1;
  }
  const failures = [
    ...bench.rows,
    ...bench.roundRows,
    ...bench.pacedRows,
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
