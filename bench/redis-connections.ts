import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { EventEmitter } from 'node:events';
import {
  isMainThread,
  MessageChannel,
  type MessagePort,
  parentPort,
  Worker,
  workerData,
} from 'node:worker_threads';
import { Redis } from 'ioredis';
import { type AuthContext } from '../lib/model/auth-context';
import {
  admitAll,
  type HeaderPair,
  type LimitFinding,
  type LimitUse,
  ScopeCounter,
} from '../lib/core/limits';
import { AdmissionStore } from '../lib/rate-limit/admission-store';
import { createLimiterRedis, type LimiterRedisConnection } from '../lib/rate-limit/redis-client';
import type { RedisCommandClient } from '../lib/rate-limit/redis-commands';
import { RedisHealth } from '../lib/rate-limit/redis-health';
import type { LimiterRedis } from '../lib/rate-limit/window';
import { DEFAULT_LIMITS } from '../gateway/config';
import { median } from './report';

/**
 * `npm run bench:redis-connections`: the gateway's Redis limit check run from N worker threads
 * (BENCH_THREADS, 2) in one process, with its Redis connections kept two ways, both set up in the
 * same process and loaded in turn, round after round (the order flips each round):
 *
 * - `thread`: each worker thread has its own connection (`createLimiterRedis()`), as the gateway's
 *   threads do;
 * - `host`: the worker threads send their Redis commands over a `MessagePort` to the main thread,
 *   which owns the one connection of the process (`createLimiterRedis()` as well, so its commands
 *   of one event-loop turn leave in one socket write) and posts the answers back. Each thread's
 *   commands of one turn leave in one message and come back in one, as the host client of the
 *   in-memory limits sends its operations.
 *
 * Each thread runs BENCH_CONCURRENCY (16) loops, each admitting one request after another the way
 * the gateway admits `GET /api/v1/wallets/` with a secret key: `admitAll()` over the route's
 * scope (`payments`, rolling, per account, at the gateway's default limit) on an `AdmissionStore`,
 * one script call per request, over BENCH_ACCOUNTS (10,000) accounts in turn, so no account
 * reaches its limit and every admission asks Redis.
 *
 * Per mode and round: admissions per second, the process's CPU time per admission (every
 * thread's), the main thread's part of it, and Redis's CPU time per admission (`INFO cpu`, the
 * server's user and system time), with the admissions per read Redis made of a client socket (the
 * depth of the pipelines it was sent; server-wide, like its CPU). The medians of the rounds'
 * ratios, host over thread, close the run. Redis is BENCH_REDIS_URL (`redis://127.0.0.1:6379/13`),
 * shared with whatever else uses the server: the script calls that were not the bench's are
 * printed when there are any, as are admissions decided in memory (fewer script calls than
 * admissions: Redis did not answer in time). BENCH_ROUNDS (5), BENCH_DURATION (5 s measured),
 * BENCH_WARMUP (3 s per mode, discarded).
 */

type Mode = 'thread' | 'host';
const MODES: readonly Mode[] = ['thread', 'host'];

interface Settings {
  readonly threads: number;
  readonly concurrency: number;
  readonly accounts: number;
  readonly rounds: number;
  readonly duration: number;
  readonly warmup: number;
  readonly redisUrl: string;
}

function settings(): Settings {
  const whole = (name: string, fallback: number): number => {
    const value = Number(process.env[name] ?? fallback);
    if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a whole number`);
    return value;
  };
  return {
    threads: whole('BENCH_THREADS', 2),
    concurrency: whole('BENCH_CONCURRENCY', 16),
    accounts: whole('BENCH_ACCOUNTS', 10_000),
    rounds: whole('BENCH_ROUNDS', 5),
    duration: whole('BENCH_DURATION', 5),
    warmup: whole('BENCH_WARMUP', 3),
    redisUrl: process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379/13',
  };
}

/** What a worker thread is started with. */
interface WorkerSetup {
  readonly mode: Mode;
  readonly index: number;
  readonly settings: Settings;
  /** Each run's prefix of Redis keys, so that the two modes count apart. */
  readonly prefix: string;
  /** `host` mode: the port to the main thread's connection. */
  readonly redisPort?: MessagePort;
}

type ToWorker = { readonly type: 'start' } | { readonly type: 'stop' } | { readonly type: 'close' };
type FromWorker =
  | { readonly type: 'ready' }
  | { readonly type: 'stopped'; readonly admitted: number; readonly refused: number }
  | { readonly type: 'failed'; readonly message: string };

// --- The port between a worker's limiter and the main thread's connection ---------------------

/**
 * A worker's side: the limiter's `RedisCommandClient`, whose commands of one event-loop turn leave
 * in one message (`[batch, command, argument count, ...arguments, ...]`) in the turn's check
 * phase, answered with one message (`[batch, ok, value, ...]`, a list reply flattened as its
 * length then its items, with `ok` 2 for a list, 1 for a value and 0 for an error's message).
 */
class PortCommandClient implements RedisCommandClient {
  readonly status = 'ready';
  private outgoing: (string | number)[] = [];
  private queued: { resolve(value: unknown): void; reject(error: Error): void }[] = [];
  private scheduled = false;
  private nextBatch = 0;
  private readonly inFlight = new Map<number, typeof this.queued>();

  constructor(private readonly port: MessagePort) {
    port.on('message', this.onAnswer);
  }

  call(command: string, ...args: string[]): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (!this.scheduled) {
        this.scheduled = true;
        this.outgoing.push(this.nextBatch);
        setImmediate(this.flush);
      }
      this.outgoing.push(command, args.length);
      for (const arg of args) this.outgoing.push(arg);
      this.queued.push({ resolve, reject });
    });
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    this.inFlight.set(this.nextBatch++, this.queued);
    this.port.postMessage(this.outgoing);
    this.outgoing = [];
    this.queued = [];
  };

  private readonly onAnswer = (answer: readonly (string | number)[]): void => {
    const id = Number(answer[0]);
    const batch = this.inFlight.get(id) ?? [];
    this.inFlight.delete(id);
    let at = 1;
    for (const pending of batch) {
      const ok = answer[at++];
      if (ok === 2) {
        const length = Number(answer[at++]);
        pending.resolve(answer.slice(at, at + length));
        at += length;
      } else if (ok === 1) {
        pending.resolve(answer[at++]);
      } else {
        pending.reject(new Error(String(answer[at++])));
      }
    }
  };
}

/** The main thread's side: runs each batch on `connection` and answers it in one message. */
function serveCommands(port: MessagePort, connection: LimiterRedisConnection): void {
  const { client } = connection;
  port.on('message', (message: readonly (string | number)[]) => {
    const id = message[0] ?? 0;
    const replies: unknown[] = [];
    const failures: (string | undefined)[] = [];
    let unanswered = 0;
    const answer = (): void => {
      const values: (string | number)[] = [id];
      for (let i = 0; i < replies.length; i++) {
        const failure = failures[i];
        const reply = replies[i];
        if (failure !== undefined) values.push(0, failure);
        else if (Array.isArray(reply))
          values.push(2, reply.length, ...(reply as (string | number)[]));
        else values.push(1, reply as string | number);
      }
      port.postMessage(values);
    };
    let at = 1;
    while (at < message.length) {
      const command = String(message[at++]);
      const count = Number(message[at++]);
      const args = message.slice(at, at + count).map(String);
      at += count;
      const slot = replies.length;
      replies.push(undefined);
      failures.push(undefined);
      unanswered += 1;
      client.call(command, ...args).then(
        (reply) => {
          replies[slot] = reply;
          if (--unanswered === 0) answer();
        },
        (error: unknown) => {
          failures[slot] = error instanceof Error ? error.message : String(error);
          if (--unanswered === 0) answer();
        },
      );
    }
  });
}

/** Resolves once `connection` may be used: connected, and no failure cooling down. */
async function untilUsable(connection: LimiterRedisConnection): Promise<void> {
  for (let waited = 0; !connection.health.usable; waited += 10) {
    if (waited > 5000) throw new Error('Redis did not answer within 5 s');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// --- A worker thread ------------------------------------------------------------------------

/** A status source that is always ready: the main thread's connection answers for it. */
class AlwaysReady extends EventEmitter {
  readonly status = 'ready';
}

async function runWorker(setup: WorkerSetup, port: NonNullable<typeof parentPort>): Promise<void> {
  const { settings: options } = setup;
  let connection: LimiterRedisConnection | undefined;
  let redis: LimiterRedis;
  if (setup.mode === 'thread') {
    connection = createLimiterRedis({ url: options.redisUrl });
    redis = connection;
    await untilUsable(connection);
  } else {
    if (setup.redisPort === undefined) throw new Error('host mode needs a port');
    redis = {
      client: new PortCommandClient(setup.redisPort),
      health: new RedisHealth(new AlwaysReady()),
    };
  }
  // The gateway's store and its `payments` scope, as `tollgate()` builds them.
  const windowMs = DEFAULT_LIMITS.windowMs;
  const store = new AdmissionStore({ windowMs, redis });
  const payments = new ScopeCounter({
    name: 'payments',
    definition: { limit: DEFAULT_LIMITS.payments, per: 'account' },
    windowMs,
    prefix: setup.prefix,
    redis,
    expectedInstances: 1,
    store,
  });
  const uses: readonly LimitUse[] = [{ scope: payments, perAccountIp: false, enforced: true }];
  const accounts: AuthContext[] = Array.from({ length: options.accounts }, (_, i) => ({
    accountId: `acct_b${i}`,
    keyId: `key_b${i}`,
    role: 'administrator',
    credential: 'secret',
  }));
  const findings: LimitFinding[] = [];
  // Each thread starts at its own place in the accounts, as its share of a rotating load.
  let next = Math.floor((setup.index * options.accounts) / options.threads);
  let running = false;
  let admitted = 0;
  let refused = 0;
  let loops: Promise<void>[] = [];

  const loop = async (): Promise<void> => {
    while (running) {
      const auth = accounts[next++ % accounts.length];
      const headers: HeaderPair[] = [];
      const refusal = await admitAll(store, uses, auth, '127.0.0.1', headers, findings);
      if (refusal === undefined) admitted += 1;
      else refused += 1;
      findings.length = 0;
    }
  };

  port.on('message', (message: ToWorker) => {
    if (message.type === 'start') {
      // The last run's loops end first (their last admissions were in flight at its stop).
      void Promise.all(loops).then(() => {
        admitted = 0;
        refused = 0;
        running = true;
        loops = Array.from({ length: options.concurrency }, loop);
      });
    } else if (message.type === 'stop') {
      // Counted at once: the admissions still in flight finish outside the measured span.
      const counts = { admitted, refused };
      running = false;
      port.postMessage({ type: 'stopped', ...counts } satisfies FromWorker);
    } else {
      running = false;
      void Promise.all(loops).then(async () => {
        store.shutdown();
        await connection?.close();
        process.exit(0);
      });
    }
  });
  port.postMessage({ type: 'ready' } satisfies FromWorker);
}

// --- The main thread ------------------------------------------------------------------------

const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

/** The CPU time of this process's main thread so far, in seconds (its `/proc` task entry). */
function mainThreadCpuSeconds(): number {
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}

/** The process's CPU time so far (every thread's), in seconds. */
function processCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

interface RedisReading {
  /** The server's user and system CPU time, in seconds. */
  readonly cpu: number;
  /** Script calls the server has run (`EVALSHA` and `EVAL`). */
  readonly scripts: number;
  /** Reads from client sockets the server has made: one per pipeline it took in. */
  readonly reads: number;
}

async function readRedis(info: Redis): Promise<RedisReading> {
  const cpu = await info.info('cpu');
  const stats = await info.info('commandstats');
  const reads = await info.info('stats');
  const field = (text: string, name: string): number =>
    Number(new RegExp(`^${name}:([0-9.]+)`, 'm').exec(text)?.[1] ?? 0);
  const calls = (name: string): number =>
    Number(new RegExp(`^cmdstat_${name}:calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0);
  return {
    cpu: field(cpu, 'used_cpu_user') + field(cpu, 'used_cpu_sys'),
    scripts: calls('evalsha') + calls('eval'),
    reads: field(reads, 'total_reads_processed'),
  };
}

interface Group {
  readonly mode: Mode;
  readonly workers: Worker[];
}

interface Round {
  readonly ops: number;
  /** Process CPU per admission, in µs. */
  readonly cpuUs: number;
  /** Of it, the main thread's, in µs. */
  readonly mainUs: number;
  /** Redis CPU per admission, in µs. */
  readonly redisUs: number;
  /** Admissions per read of a client socket by Redis: the pipelines' depth. */
  readonly perRead: number;
  /** Script calls Redis ran that were not this bench's. */
  readonly foreign: number;
  /** Admissions decided in memory: Redis did not answer them in time. */
  readonly fallbacks: number;
  readonly refused: number;
}

function nextMessage(worker: Worker, type: FromWorker['type']): Promise<FromWorker> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: FromWorker): void => {
      if (message.type === 'failed') {
        worker.off('message', onMessage);
        reject(new Error(message.message));
      } else if (message.type === type) {
        worker.off('message', onMessage);
        resolve(message);
      }
    };
    worker.on('message', onMessage);
    worker.once('error', reject);
  });
}

async function startGroup(
  mode: Mode,
  options: Settings,
  prefix: string,
  connection: LimiterRedisConnection,
): Promise<Group> {
  const workers: Worker[] = [];
  for (let index = 0; index < options.threads; index++) {
    let redisPort: MessagePort | undefined;
    const transfer: MessagePort[] = [];
    if (mode === 'host') {
      const channel = new MessageChannel();
      serveCommands(channel.port1, connection);
      redisPort = channel.port2;
      transfer.push(channel.port2);
    }
    const setup: WorkerSetup = { mode, index, settings: options, prefix, redisPort };
    const worker = new Worker(__filename, { workerData: setup, transferList: transfer });
    workers.push(worker);
    await nextMessage(worker, 'ready');
  }
  return { mode, workers };
}

async function measure(
  group: Group,
  info: Redis,
  seconds: number,
  concurrency: number,
): Promise<Round> {
  const redisBefore = await readRedis(info);
  const cpuBefore = processCpuSeconds();
  const mainBefore = mainThreadCpuSeconds();
  const startedAt = performance.now();
  for (const worker of group.workers) worker.postMessage({ type: 'start' } satisfies ToWorker);
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const stopped = group.workers.map((worker) => nextMessage(worker, 'stopped'));
  for (const worker of group.workers) worker.postMessage({ type: 'stop' } satisfies ToWorker);
  let ops = 0;
  let refused = 0;
  for (const message of await Promise.all(stopped)) {
    if (message.type !== 'stopped') continue;
    ops += message.admitted + message.refused;
    refused += message.refused;
  }
  const elapsed = (performance.now() - startedAt) / 1000;
  const cpu = processCpuSeconds() - cpuBefore;
  const main = mainThreadCpuSeconds() - mainBefore;
  // The admissions in flight at the stop finish before Redis is read again.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const redisAfter = await readRedis(info);
  const scripts = redisAfter.scripts - redisBefore.scripts;
  const per = (value: number): number => (value * 1e6) / Math.max(1, ops);
  // The admissions in flight at the stop reach Redis but are not counted.
  const inFlight = group.workers.length * concurrency;
  return {
    ops: ops / elapsed,
    cpuUs: per(cpu),
    mainUs: per(main),
    redisUs: per(redisAfter.cpu - redisBefore.cpu),
    perRead: ops / Math.max(1, redisAfter.reads - redisBefore.reads),
    foreign: Math.max(0, scripts - ops - inFlight),
    fallbacks: Math.max(0, ops - scripts),
    refused,
  };
}

const fmt = (value: number, digits = 0): string =>
  value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

function describe(round: Round): string {
  return (
    `${fmt(round.ops)} ops/s, ${fmt(round.cpuUs, 1)} µs CPU/op (main ${fmt(round.mainUs, 1)}), ` +
    `Redis ${fmt(round.redisUs, 1)} µs/op, ${fmt(round.perRead, 1)} ops/read` +
    (round.refused > 0 ? `, ${round.refused} refused` : '') +
    (round.foreign > 0 ? `, ${round.foreign} other script calls` : '') +
    (round.fallbacks > 0 ? `, ${round.fallbacks} decided in memory` : '')
  );
}

/** Deletes the bench's keys (every key under `prefix`). */
async function removeKeys(info: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await info.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await info.unlink(...keys);
  } while (cursor !== '0');
}

async function main(): Promise<void> {
  const options = settings();
  const run = `brc:${process.pid}:`;
  const info = new Redis(options.redisUrl, { lazyConnect: true });
  await info.connect();
  const server = /^redis_version:(\S+)/m.exec(await info.info('server'))?.[1] ?? '?';
  const connection = createLimiterRedis({ url: options.redisUrl });
  const groups: Group[] = [];
  try {
    await untilUsable(connection);
    for (const mode of MODES) {
      groups.push(await startGroup(mode, options, `${run}${mode}:`, connection));
    }
    process.stdout.write(
      `bench:redis-connections on node ${process.version}, ${os.availableParallelism()} cores, ` +
        `Redis ${server}; ${options.threads} threads x ${options.concurrency} admissions in flight, ` +
        `${options.accounts} accounts in turn, ${options.rounds} rounds of ${options.duration} s\n`,
    );
    for (const group of groups) await measure(group, info, options.warmup, options.concurrency);
    const rounds: Record<Mode, Round>[] = [];
    for (let round = 0; round < options.rounds; round++) {
      const order = round % 2 === 0 ? groups : [...groups].reverse();
      const results = new Map<Mode, Round>();
      for (const group of order)
        results.set(group.mode, await measure(group, info, options.duration, options.concurrency));
      const thread = results.get('thread');
      const host = results.get('host');
      if (thread === undefined || host === undefined) continue;
      rounds.push({ thread, host });
      process.stdout.write(
        `round ${round + 1}: per thread ${describe(thread)}; per host ${describe(host)}\n`,
      );
    }
    const ratio = (pick: (round: Round) => number): string =>
      fmt(median(rounds.map((r) => pick(r.host) / pick(r.thread))), 2);
    const mid = (mode: Mode, pick: (round: Round) => number, digits: number): string =>
      fmt(median(rounds.map((r) => pick(r[mode]))), digits);
    process.stdout.write(
      `per host against per thread, median of ${rounds.length} rounds: ` +
        `throughput ${ratio((r) => r.ops)}x, process CPU per op ${ratio((r) => r.cpuUs)}x, ` +
        `Redis CPU per op ${ratio((r) => r.redisUs)}x ` +
        `(per thread ${mid('thread', (r) => r.ops, 0)} ops/s, ${mid('thread', (r) => r.cpuUs, 1)} µs, ` +
        `Redis ${mid('thread', (r) => r.redisUs, 1)} µs, ${mid('thread', (r) => r.perRead, 1)} ops/read; ` +
        `per host ${mid('host', (r) => r.ops, 0)} ops/s, ${mid('host', (r) => r.cpuUs, 1)} µs ` +
        `of which the main thread ${mid('host', (r) => r.mainUs, 1)} µs, ` +
        `Redis ${mid('host', (r) => r.redisUs, 1)} µs, ${mid('host', (r) => r.perRead, 1)} ops/read)\n`,
    );
  } finally {
    for (const group of groups) {
      for (const worker of group.workers) worker.postMessage({ type: 'close' } satisfies ToWorker);
    }
    await Promise.all(
      groups.flatMap((group) =>
        group.workers.map((worker) => new Promise((resolve) => worker.once('exit', resolve))),
      ),
    );
    await connection.close();
    await removeKeys(info, run);
    info.disconnect();
  }
}

if (isMainThread) {
  main().catch((error: unknown) => {
    process.stderr.write(
      `bench:redis-connections failed: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    process.exit(1);
  });
} else if (parentPort !== null) {
  const port = parentPort;
  runWorker(workerData as WorkerSetup, port).catch((error: unknown) => {
    port.postMessage({
      type: 'failed',
      message: error instanceof Error ? error.message : String(error),
    } satisfies FromWorker);
  });
}
