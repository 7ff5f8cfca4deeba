import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import type { RateLimitState } from '../../lib';
import { ANSWER_CHECKS_VARIABLE } from '../../gateway/openapi/answer-check';
import { createFixtures, type Fixtures, TOKEN_SECRET } from '../helpers/fixtures';
import {
  closeFailedClient,
  describeWithRedis,
  freePort,
  onAFreePort,
  type OwnedRedis,
  redisServerPath,
  startRedisServer,
} from '../helpers/redis';

/**
 * Real gateway processes (`node dist/gateway/server.js`) for multi-instance tests, a keep-alive HTTP
 * client with bounded concurrency, and Redis topologies the tests own: one server, a three-master
 * cluster, a Sentinel. Every child is killed by `stopAll()` (call it in `afterAll`).
 */

const ROOT = path.resolve(__dirname, '..', '..');
const SERVER = path.join(ROOT, 'dist', 'gateway', 'server.js');
const execFileAsync = promisify(execFile);

// ---------------------------------------------------------------------------------------------
// Children and temporary files, cleaned up together.

const children = new Set<ChildProcess>();
const tempDirs = new Set<string>();

export function tempDir(label: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), `tollgate-${label}-`));
  tempDirs.add(dir);
  return dir;
}

async function killChild(child: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', () => {
      resolve();
    });
  });
  child.kill(signal);
  await exited;
}

/** Kills every child process started here and removes the temporary files. */
export async function stopAll(): Promise<void> {
  await Promise.all([...children].map((child) => killChild(child)));
  children.clear();
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  tempDirs.clear();
}

process.once('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

// ---------------------------------------------------------------------------------------------
// The built gateway.

/**
 * Throws unless `dist/gateway/server.js` exists; warns (loudly, without failing: other work may be
 * editing the tree) when a source file of `lib/` or `gateway/` is newer than its build.
 */
export function assertBuilt(): void {
  if (!existsSync(SERVER))
    throw new Error('dist/gateway/server.js is missing: run `npm run build` (npm test does)');
  const stale = ['lib', 'gateway'].flatMap((dir) =>
    listTs(path.join(ROOT, dir)).filter((file) => {
      const built = path.join(ROOT, 'dist', path.relative(ROOT, file)).replace(/\.ts$/, '.js');
      return !existsSync(built) || statSync(built).mtimeMs < statSync(file).mtimeMs;
    }),
  );
  if (stale.length > 0) {
    process.stderr.write(
      `\n*** dist/ is older than ${stale.map((file) => path.relative(ROOT, file)).join(', ')}: the gateway processes run the last build (npm test builds first) ***\n\n`,
    );
  }
}

function listTs(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return listTs(full);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [full] : [];
  });
}

/** The fixtures' keys, written as a keys file the gateway processes load. */
export interface KeysFile {
  readonly fixtures: Fixtures;
  readonly path: string;
}

export function writeKeysFile(): KeysFile {
  const fixtures = createFixtures();
  const file = path.join(tempDir('keys'), 'keys.json');
  writeFileSync(file, JSON.stringify(fixtures.document), { mode: 0o600 });
  return { fixtures, path: file };
}

export interface GatewayProcessOptions {
  keysFile: KeysFile;
  upstreamUrl: string;
  /** `REDIS_URL`, `REDIS_CLUSTER_NODES`, `TOLLGATE_REDIS_PREFIX`, … */
  env: Record<string, string>;
  /** Readiness: the longest wait for `/healthz` to answer. Defaults to 10 000 ms. */
  readyTimeoutMs?: number;
}

export type { RateLimitState };

export interface GatewayProcess {
  readonly url: string;
  readonly port: number;
  /** Raw stdout lines. */
  readonly lines: string[];
  /** Stdout lines parsed as JSON (pino); lines that are not JSON are left out. */
  logs(): Record<string, unknown>[];
  /** Log entries whose `event` is `event`. */
  events(event: string): Record<string, unknown>[];
  rateLimits(): Promise<RateLimitState>;
  /** Sends the process a signal (SIGHUP: reload the keys file). */
  signal(name: NodeJS.Signals): void;
  /** SIGTERM; resolves once the process has drained and exited. */
  stop(): Promise<void>;
  /** The exit code once it has exited, else `null`. */
  exitCode(): number | null;
}

const EMPTY_ENV_KEYS = ['REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_SENTINELS'];

export async function startGatewayProcess(options: GatewayProcessOptions): Promise<GatewayProcess> {
  const port = await freePort();
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    // Every answer of the admin API, forward-auth and the error handler checked against the API description.
    [ANSWER_CHECKS_VARIABLE]: '1',
    PORT: String(port),
    HOST: '127.0.0.1',
    TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
    TOLLGATE_KEYS_FILE: options.keysFile.path,
    TOLLGATE_UPSTREAM_URL: options.upstreamUrl,
    LOG_LEVEL: 'info',
    ...Object.fromEntries(EMPTY_ENV_KEYS.map((key) => [key, ''])),
    ...options.env,
  };
  const child = spawn(process.execPath, [SERVER], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  const lines: string[] = [];
  const stderr: string[] = [];
  let pending = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (pending + chunk).split('\n');
    pending = parts.pop() ?? '';
    lines.push(...parts.filter((line) => line !== ''));
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => stderr.push(chunk));
  const url = `http://127.0.0.1:${port}`;

  const logs = (): Record<string, unknown>[] =>
    lines.flatMap((line) => {
      try {
        return [JSON.parse(line) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
  const rateLimits = async (): Promise<RateLimitState> => {
    const result = await requestOnce({ url, path: '/healthz', timeoutMs: 1000 });
    if (result.status !== 200) throw new Error(`/healthz answered ${result.status}`);
    return (result.body as { rate_limits: RateLimitState }).rate_limits;
  };

  const deadline = Date.now() + (options.readyTimeoutMs ?? 10_000);
  for (;;) {
    if (child.exitCode !== null) {
      throw new Error(`gateway exited with ${child.exitCode}: ${stderr.join('').trim()}`);
    }
    try {
      await rateLimits();
      break;
    } catch (error) {
      if (Date.now() > deadline) {
        await killChild(child);
        throw new Error(
          `gateway on ${url} not ready: ${(error as Error).message}; ${stderr.join('').trim()}`,
          { cause: error },
        );
      }
      await sleep(50);
    }
  }

  return {
    url,
    port,
    lines,
    logs,
    events: (event) => logs().filter((entry) => entry.event === event),
    rateLimits,
    signal: (name) => {
      child.kill(name);
    },
    exitCode: () => child.exitCode,
    stop: async () => {
      await killChild(child, 'SIGTERM');
      children.delete(child);
    },
  };
}

/**
 * Prints each gateway's `rate_limit.*` log events (with their reasons): why a count that should
 * have been shared was not. Call it when an admission count is off.
 */
export function printRateLimitEvents(label: string, fleet: readonly GatewayProcess[]): void {
  const events = fleet.map((gateway, index) =>
    gateway
      .logs()
      .filter((entry) => String(entry.event).startsWith('rate_limit.'))
      .map((entry) => `#${index} ${JSON.stringify([entry.time, entry.event, entry.reason])}`),
  );
  console.log(`${label}: rate-limit events of the gateways:\n${events.flat().join('\n')}`);
}

/** `count` gateway processes started side by side with the same options. */
export async function startGatewayFleet(
  count: number,
  options: GatewayProcessOptions,
): Promise<GatewayProcess[]> {
  return Promise.all(Array.from({ length: count }, () => startGatewayProcess(options)));
}

/** Resolves once every gateway's `/healthz` reports `state`; the ms that took. */
export async function waitForState(
  fleet: readonly GatewayProcess[],
  state: RateLimitState,
  timeoutMs = 5000,
): Promise<number> {
  return waitUntil(
    async () =>
      (await Promise.all(fleet.map((gateway) => gateway.rateLimits()))).every(
        (each) => each === state,
      ),
    timeoutMs,
  );
}

/** Resolves with the ms it took `check` to hold, or rejects after `timeoutMs`. */
export async function waitUntil(
  check: () => Promise<boolean> | boolean,
  timeoutMs: number,
  intervalMs = 20,
): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (
      await Promise.resolve()
        .then(check)
        .catch(() => false)
    )
      return Date.now() - started;
    if (Date.now() - started > timeoutMs)
      throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(intervalMs);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// ---------------------------------------------------------------------------------------------
// HTTP client: keep-alive, bounded concurrency, timing of every request.

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

export interface RequestSpec {
  url: string;
  path: string;
  method?: string;
  headers?: Record<string, string>;
  body?: unknown;
  timeoutMs?: number;
}

export interface Answer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: unknown;
  /** Time from sending to the end of the answer. */
  readonly ms: number;
  /** When it was sent (ms since epoch). */
  readonly sentAt: number;
  /** Set instead of `status` when the connection failed (status 0). */
  readonly error?: string;
}

export function requestOnce(spec: RequestSpec): Promise<Answer> {
  const payload = spec.body === undefined ? undefined : Buffer.from(JSON.stringify(spec.body));
  const sentAt = Date.now();
  const started = process.hrtime.bigint();
  const elapsed = (): number => Number(process.hrtime.bigint() - started) / 1e6;
  return new Promise((resolve) => {
    const req = http.request(
      `${spec.url}${spec.path}`,
      {
        method: spec.method ?? 'GET',
        agent,
        headers: {
          ...spec.headers,
          ...(payload === undefined
            ? {}
            : { 'content-type': 'application/json', 'content-length': String(payload.length) }),
        },
        timeout: spec.timeoutMs ?? 5000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: unknown;
          try {
            body = JSON.parse(text);
          } catch {
            body = text;
          }
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body,
            ms: elapsed(),
            sentAt,
          });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('client timeout')));
    req.on('error', (error) => {
      resolve({
        status: 0,
        headers: {},
        body: undefined,
        ms: elapsed(),
        sentAt,
        error: error.message,
      });
    });
    req.end(payload);
  });
}

/** Runs `count` requests, at most `concurrency` in flight; answers in request order. */
export async function hammer(
  count: number,
  concurrency: number,
  spec: (index: number) => RequestSpec,
): Promise<Answer[]> {
  const answers = new Array<Answer>(count);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) {
      const index = next++;
      answers[index] = await requestOnce(spec(index));
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return answers;
}

/** Traffic that keeps flowing until `stop()` is called; `stop()` resolves with every answer. */
export function startTraffic(
  concurrency: number,
  spec: (index: number) => RequestSpec,
): { stop(): Promise<Answer[]> } {
  const answers: Answer[] = [];
  let running = true;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (running) answers.push(await requestOnce(spec(next++)));
  };
  const workers = Promise.all(Array.from({ length: concurrency }, worker));
  return {
    stop: async () => {
      running = false;
      await workers;
      return answers;
    },
  };
}

export function closeClient(): void {
  agent.destroy();
}

/** The `fraction` quantile (0.5, 0.99, 1) of the answers' times, in ms. */
export function quantileMs(answers: readonly Answer[], fraction: number): number {
  const times = answers.map((answer) => answer.ms).sort((a, b) => a - b);
  return (
    times[Math.min(times.length - 1, Math.max(0, Math.ceil(fraction * times.length) - 1))] ?? 0
  );
}

/** `p50 … ms, p99 … ms, max … ms` of the answers' times. */
export function describeTimes(answers: readonly Answer[]): string {
  return [0.5, 0.99, 1]
    .map((q) => `${q === 1 ? 'max' : `p${q * 100}`} ${quantileMs(answers, q).toFixed(1)} ms`)
    .join(', ');
}

/** Counts of answers by status, e.g. `{ 200: 100, 429: 200 }`. */
export function statusCounts(answers: readonly Answer[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const answer of answers) counts[answer.status] = (counts[answer.status] ?? 0) + 1;
  return counts;
}

// ---------------------------------------------------------------------------------------------
// Redis topologies.

/**
 * `describeWithRedis` for suites that stop, restart or cluster a Redis of their own: they need
 * `redis-server` itself, `REDIS_URL` is not enough. Without it they are skipped with a notice,
 * unless `REQUIRE_REDIS=1`, which makes them fail.
 */
export const describeWithOwnedRedis: jest.Describe = (() => {
  if (redisServerPath() !== undefined || process.env.REQUIRE_REDIS === '1')
    return describeWithRedis;
  process.stderr.write(
    '\n*** Suites that own a Redis SKIPPED: redis-server is not on PATH ***\n\n',
  );
  return describe.skip;
})();

/** A redis-server on `port` (default: a free one), killed by `stopAll()` too. */
export async function startOwnedRedis(
  port?: number,
  extraArgs: string[] = [],
): Promise<OwnedRedis> {
  const server = await startRedisServer(port, extraArgs);
  children.add(server.process);
  return server;
}

/** Masters on loopback ports, slots spread by `redis-cli --cluster create`. */
export interface OwnedCluster {
  readonly nodes: readonly OwnedRedis[];
  /** `host:port` of every master, as `REDIS_CLUSTER_NODES` takes them. */
  readonly addresses: readonly string[];
  stop(): Promise<void>;
}

/** Starts one master on each of `ports` (default: three free ports) and forms the cluster. */
export async function startRedisCluster(ports?: readonly number[]): Promise<OwnedCluster> {
  const dir = tempDir('cluster');
  const nodes: OwnedRedis[] = [];
  const startNode = (port: number): Promise<OwnedRedis> =>
    startOwnedRedis(port, [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      path.join(dir, `nodes-${port}.conf`),
      '--cluster-node-timeout',
      '2000',
      '--dir',
      dir,
    ]);
  for (const chosen of ports ?? [undefined, undefined, undefined]) {
    nodes.push(await (chosen === undefined ? onAFreePort(startNode) : startNode(chosen)));
  }
  const addresses = nodes.map((node) => `127.0.0.1:${node.port}`);
  await execFileAsync(
    'redis-cli',
    ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'],
    {
      timeout: 15_000,
    },
  );
  await waitUntil(
    async () => {
      const states = await Promise.all(
        nodes.map((node) => redisCommand(node.port, ['CLUSTER', 'INFO'])),
      );
      return states.every((info) => String(info).includes('cluster_state:ok'));
    },
    15_000,
    100,
  );
  return {
    nodes,
    addresses,
    stop: async () => Promise.all(nodes.map((node) => node.stop())).then(() => undefined),
  };
}

/** The port of the cluster master that holds `key` (CLUSTER KEYSLOT, then CLUSTER SLOTS). */
export async function masterPortOf(cluster: OwnedCluster, key: string): Promise<number> {
  const port = cluster.nodes[0]?.port ?? 0;
  const slot = Number(await redisCommand(port, ['CLUSTER', 'KEYSLOT', key]));
  const ranges = (await redisCommand(port, ['CLUSTER', 'SLOTS'])) as [
    number,
    number,
    [string, number, ...unknown[]],
  ][];
  const range = ranges.find(([first, last]) => slot >= first && slot <= last);
  if (range === undefined) throw new Error(`no master serves slot ${slot}`);
  return range[2][1];
}

/** A Sentinel (`redis-server --sentinel`) monitoring one master under `name`. */
export interface OwnedSentinel {
  readonly port: number;
  readonly name: string;
  /** `host:port`, as `REDIS_SENTINELS` takes it. */
  readonly address: string;
  /** The master's port as this Sentinel reports it now. */
  masterPort(): Promise<number>;
  stop(): Promise<void>;
}

export interface SentinelOptions {
  masterPort: number;
  /** A replica Sentinel knows from the start (otherwise it learns of it from INFO, within 10 s). */
  replicaPort?: number;
  /** Defaults to `tollgate-test`. */
  name?: string;
  /** Defaults to 1000. */
  downAfterMs?: number;
}

/** Starts a Sentinel with quorum 1, so that it alone can declare the master down and fail over. */
export async function startSentinel(options: SentinelOptions): Promise<OwnedSentinel> {
  const { masterPort, name = 'tollgate-test', downAfterMs = 1000 } = options;
  const port = await freePort();
  const dir = tempDir('sentinel');
  const file = path.join(dir, 'sentinel.conf');
  writeFileSync(
    file,
    [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${name} 127.0.0.1 ${masterPort} 1`,
      `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
      `sentinel failover-timeout ${name} 10000`,
      ...(options.replicaPort === undefined
        ? []
        : [`sentinel known-replica ${name} 127.0.0.1 ${options.replicaPort}`]),
      '',
    ].join('\n'),
  );
  const child = spawn(redisServerPath() ?? 'redis-server', [file, '--sentinel'], {
    stdio: 'ignore',
  });
  children.add(child);
  const current = async (): Promise<number> => {
    const reply = await redisCommand(port, ['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name]);
    return Array.isArray(reply) ? Number(reply[1]) : 0;
  };
  await waitUntil(async () => (await current()) === masterPort, 10_000, 50);
  return {
    port,
    name,
    address: `127.0.0.1:${port}`,
    masterPort: current,
    stop: () => killChild(child),
  };
}

/** One command on a short-lived connection to a loopback Redis. */
export async function redisCommand(port: number, command: [string, ...string[]]): Promise<unknown> {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return await client.call(...command);
  } finally {
    closeFailedClient(client);
  }
}

/**
 * A rolling-window key as Redis holds it: its admissions (before those that left the window are
 * dropped) and the ms since its oldest one, by Redis's clock; `undefined` when the key is absent.
 */
export async function rollingState(
  port: number,
  key: string,
): Promise<{ count: number; oldestAgeMs: number } | undefined> {
  const client = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 0 });
  client.on('error', () => undefined);
  try {
    const ring = await client.getBuffer(key);
    const [seconds, micros] = await client.time();
    if (ring === null) return undefined;
    const start = ring.readUInt32BE(2);
    const count = ring.readUInt32BE(6);
    const cap = ring.readUInt32BE(10);
    const oldest = ring.readUInt32BE(18 + 4 * (start % cap));
    const now = (Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)) % 2 ** 32;
    return { count, oldestAgeMs: (now - oldest + 2 ** 32) % 2 ** 32 };
  } finally {
    client.disconnect();
  }
}
