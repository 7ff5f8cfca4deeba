import { createHash, randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { currentPlatform, portSharing } from '../gateway/workers/plan';
import { type Child, cpuSecondsOf, freePort, startChild, waitUntil } from './processes';
import { runWrk, writeRotatingScript } from './wrk';
import { median } from './report';

/**
 * `npm run bench:workers`: the gateway on one thread and on two (`TOLLGATE_WORKERS`), both
 * running, loaded in turn with the same load, round after round (the order flips each round, so
 * neither always goes first on a noisy machine): requests per second and the gateway process's
 * CPU time per answer (every thread's), each as the two-thread gateway's over the one-thread
 * gateway's, the median of the rounds; and the two-thread gateway's main thread's CPU per answer
 * alone. The load is the peer bench's: one wrk thread, 32 connections, `GET /api/v1/wallets/`
 * rotating over the secret keys of 1,000 accounts, answered by an upstream that keeps nothing.
 *
 * Limits in memory (`memory`) and in Redis (`redis`, BENCH_REDIS_URL or
 * `redis://127.0.0.1:6379/14`), as BENCH_WORKERS_MODES says (both). BENCH_ROUNDS (5),
 * BENCH_DURATION (5 s measured), BENCH_WARMUP (3 s per thread, discarded, once per gateway).
 */

const ACCOUNTS = 1000;
const CONNECTIONS = 32;
const WALLETS = '/api/v1/wallets/';
const TOKEN_SECRET = 'bench-workers-token-secret-0123456789-abcdefghijklmn';
const DIST = path.resolve(__dirname, '..');
const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

type Mode = 'memory' | 'redis';

interface Settings {
  readonly modes: readonly Mode[];
  readonly rounds: number;
  readonly duration: number;
  readonly warmup: number;
  readonly redisUrl: string;
}

function settings(): Settings {
  const modes = (process.env.BENCH_WORKERS_MODES ?? 'memory,redis').split(',').map((value) => {
    const mode = value.trim();
    if (mode !== 'memory' && mode !== 'redis') {
      throw new Error(`BENCH_WORKERS_MODES: ${JSON.stringify(value)} is neither memory nor redis`);
    }
    return mode;
  });
  const whole = (name: string, fallback: number): number => {
    const value = Number(process.env[name] ?? fallback);
    if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a whole number`);
    return value;
  };
  return {
    modes,
    rounds: whole('BENCH_ROUNDS', 5),
    duration: whole('BENCH_DURATION', 5),
    warmup: whole('BENCH_WARMUP', 3),
    redisUrl: process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379/14',
  };
}

/** A keys file of `ACCOUNTS` accounts of one administrator key each, and their secret keys. */
function writeKeys(file: string): string[] {
  const secrets: string[] = [];
  const accounts = Array.from({ length: ACCOUNTS }, (_, i) => {
    const secret = `sk_test_bench_${i}_${randomBytes(12).toString('hex')}`;
    secrets.push(secret);
    return {
      id: `acct_b${i}`,
      ipWhitelist: ['127.0.0.0/8'],
      keys: [
        {
          id: `key_b${i}`,
          publishableKey: `pk_test_bench_${i}_${randomBytes(12).toString('hex')}`,
          secretKeySha256: createHash('sha256').update(secret).digest('hex'),
          role: 'administrator',
        },
      ],
    };
  });
  writeFileSync(file, JSON.stringify({ accounts }));
  return secrets;
}

interface Gateway {
  readonly threads: number;
  readonly url: string;
  readonly child: Child;
}

async function startGateway(threads: number, env: Record<string, string>): Promise<Gateway> {
  const port = await freePort();
  const child = startChild(
    `gateway, ${threads} threads`,
    process.execPath,
    [path.join(DIST, 'gateway', 'server.js')],
    {
      PATH: process.env.PATH ?? '',
      NODE_ENV: 'production',
      LOG_LEVEL: 'warn',
      HOST: '127.0.0.1',
      PORT: String(port),
      TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
      TOLLGATE_WORKERS: String(threads),
      ...env,
    },
  );
  const url = `http://127.0.0.1:${port}`;
  // Every thread serves once `/readyz` answers 200.
  await waitUntil(child, `${url}/readyz`, (reply) => reply.status === 200, 30_000);
  return { threads, url, child };
}

interface Round {
  readonly rps: number;
  /** Gateway CPU per answer, in µs. */
  readonly cpuUs: number;
  /** Of it, the main thread's (which decides in-memory limits for the workers), in µs. */
  readonly mainUs: number;
  readonly errors: number;
}

/** The CPU time of a process's main thread so far, in seconds (its `/proc` task entry). */
function mainThreadCpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}

async function measure(gateway: Gateway, script: string, seconds: number): Promise<Round> {
  const pid = gateway.child.process.pid;
  const before = cpuSecondsOf(pid) ?? 0;
  const mainBefore = mainThreadCpuSeconds(pid);
  const result = await runWrk({
    url: `${gateway.url}${WALLETS}`,
    script,
    durationSeconds: seconds,
    connections: CONNECTIONS,
    threads: 1,
  });
  const cpu = (cpuSecondsOf(pid) ?? 0) - before;
  const main = mainThreadCpuSeconds(pid) - mainBefore;
  return {
    rps: result.requestsPerSecond,
    cpuUs: (cpu * 1e6) / Math.max(1, result.requests),
    mainUs: (main * 1e6) / Math.max(1, result.requests),
    errors: result.errorStatuses + result.socketErrors,
  };
}

const fmt = (value: number, digits = 0): string =>
  value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

async function runMode(
  mode: Mode,
  env: Record<string, string>,
  script: string,
  options: Settings,
): Promise<void> {
  const extra: Record<string, string> = mode === 'redis' ? { REDIS_URL: options.redisUrl } : {};
  const one = await startGateway(1, { ...env, ...extra, TOLLGATE_REDIS_PREFIX: 'bw1:' });
  const two = await startGateway(2, { ...env, ...extra, TOLLGATE_REDIS_PREFIX: 'bw2:' });
  try {
    // Each thread's code warms up on the requests it gets: a gateway of n threads gets n times
    // the warm-up, so that each of its threads sees as many as the one thread does.
    for (const gateway of [one, two]) {
      await measure(gateway, script, options.warmup * gateway.threads);
    }
    const rounds: { one: Round; two: Round }[] = [];
    for (let round = 0; round < options.rounds; round++) {
      const order = round % 2 === 0 ? [one, two] : [two, one];
      const results = new Map<number, Round>();
      for (const gateway of order) {
        results.set(gateway.threads, await measure(gateway, script, options.duration));
      }
      const a = results.get(1);
      const b = results.get(2);
      if (a === undefined || b === undefined) continue;
      rounds.push({ one: a, two: b });
      process.stdout.write(
        `${mode} round ${round + 1}: 1 thread ${fmt(a.rps)} req/s, ${fmt(a.cpuUs, 1)} µs CPU/answer; ` +
          `2 threads ${fmt(b.rps)} req/s, ${fmt(b.cpuUs, 1)} µs CPU/answer ` +
          `(main thread ${fmt(b.mainUs, 1)} µs)` +
          (a.errors + b.errors > 0 ? `; ${a.errors + b.errors} errors` : '') +
          '\n',
      );
    }
    const throughput = median(rounds.map((r) => r.two.rps / r.one.rps));
    const cpu = median(rounds.map((r) => r.two.cpuUs / r.one.cpuUs));
    process.stdout.write(
      `${mode}: 2 threads against 1, median of ${rounds.length} rounds: ` +
        `throughput ${fmt(throughput, 2)}x, CPU per answer ${fmt(cpu, 2)}x ` +
        `(1 thread ${fmt(median(rounds.map((r) => r.one.rps)))} req/s, ` +
        `2 threads ${fmt(median(rounds.map((r) => r.two.rps)))} req/s; ` +
        `the 2-thread gateway's main thread ${fmt(median(rounds.map((r) => r.two.mainUs)), 1)} µs CPU per answer)\n`,
    );
  } finally {
    await Promise.all([one.child.stop(), two.child.stop()]);
  }
}

async function main(): Promise<void> {
  const sharing = portSharing(currentPlatform());
  if (!sharing.ok) throw new Error(`bench:workers needs threads that share a port: ${sharing.why}`);
  const options = settings();
  const directory = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-workers-'));
  const upstreamPort = await freePort();
  const upstream = startChild(
    'sink upstream',
    process.execPath,
    [path.join(DIST, 'bench', 'sink-upstream.js')],
    { PATH: process.env.PATH ?? '', PORT: String(upstreamPort) },
  );
  try {
    const keysFile = path.join(directory, 'keys.json');
    const secrets = writeKeys(keysFile);
    const script = path.join(directory, 'rotate.lua');
    writeRotatingScript(
      script,
      WALLETS,
      secrets.map((secret) => ({ Authorization: `Bearer ${secret}` })),
    );
    process.stdout.write(
      `bench:workers on node ${process.version}, ${os.availableParallelism()} cores; ` +
        `wrk -t1 -c${CONNECTIONS}, ${ACCOUNTS} keys in turn, ${options.rounds} rounds of ${options.duration} s\n`,
    );
    const env = {
      TOLLGATE_KEYS_FILE: keysFile,
      TOLLGATE_UPSTREAM_URL: `http://127.0.0.1:${upstreamPort}`,
    };
    for (const mode of options.modes) await runMode(mode, env, script, options);
  } finally {
    await upstream.stop();
    rmSync(directory, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(
    `bench:workers failed: ${error instanceof Error ? error.message : String(error)}\n`,
  );
  process.exit(1);
});
