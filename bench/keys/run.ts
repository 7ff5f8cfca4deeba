import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { askProbe, freePort, httpRequest, type LoopDelay } from '../processes';
import {
  type BenchRow,
  population,
  sampledIndexes,
  sampledSecret,
  writeKeysFile,
} from './generate';
import {
  type BenchPostgres,
  loadRows,
  revokeKey,
  startPostgres,
  touchEveryKey,
  vacuumKeys,
} from './postgres';
import { startStreamProcess, type Waits, waitsBetween } from '../paced-stream';
import { currentPlatform, portSharing } from '../../gateway/workers/plan';

/**
 * `npm run bench:keys`: the key ring at scale. For each population size it generates
 * that many accounts of one key each, in a keys file and in a fresh PostgreSQL cluster, starts the
 * real gateway (`dist/gateway/server.js`, NODE_ENV=production, LOG_LEVEL=warn, in-memory limits,
 * the bundled stub upstream) on each, and prints:
 *
 * - memory: RSS and V8 heap (after a full GC, read in the gateway through an IPC preload, see
 *   probe.ts) over a baseline gateway holding one key, per key;
 * - time to first readiness: from spawning the process to the first 200 of a request with a key of
 *   the population;
 * - the wait of requests sent at a steady BENCH_RATE per second (500; each measured from when it
 *   was due) during a full reload: for the file, a SIGHUP after the file was replaced by one with a
 *   key revoked, until that key is refused; for the database, every key given a new version with
 *   no NOTIFY (the UPDATE made before the traffic starts, committed during it), so the version
 *   backstop fetches and applies them all, until a key revoked before answers again (it is
 *   un-revoked in the same statement); the second instance is stopped first, so that the machine
 *   holds one instance, as a production host does; and the database's own work is kept out of the
 *   measured windows, since in production it runs on the database's machine: the keys table is
 *   vacuumed before each reload (autovacuum is off in the bench's cluster), and the UPDATE's
 *   pages are checkpointed and synced to disk before the steady window;
 * - the same waits over the 10 s of steady traffic just before the change: what the machine gives
 *   without a reload, over a window about as long;
 * - the longest event-loop delay inside the gateway over the same time (perf_hooks, read through
 *   the probe): what the gateway itself held requests up, apart from the machine's own load;
 * - the time for one revocation made in the database (an UPDATE, as the key command makes it) to
 *   be enforced by a second gateway instance, polled every 5 ms.
 *
 * Each full reload is made BENCH_RELOADS times (3), the key revoked and then valid again in turn,
 * and the worst waits of all of them are printed side by side: one lucky or unlucky run on a shared
 * machine decides nothing.
 *
 * - the gateway of each source on each of BENCH_KEYS_WORKERS thread counts (`1,4` where threads
 *   can share a port, else none): its RSS once every thread serves, against one thread's.
 *
 * Settings: BENCH_KEYS, a comma-separated list of sizes (100000); BENCH_KEYS_SOURCES, `file`,
 * `database` or both (both); BENCH_RATE (500); BENCH_RELOADS (3); BENCH_NODE_FLAGS, Node flags
 * for the gateways (none; for experiments such as `--single-threaded-gc`). The failure budget is raised to its maximum
 * (TOLLGATE_AUTH_FAILURE_LIMIT=100000) so the polling of refused keys never spends it.
 */

const WALLETS = '/api/v1/wallets/';
/**
 * The steady window measured before each change, as long as a file reload takes at 1,000,000
 * keys: the machine's own worst waits, to read the reload's against.
 */
const STEADY_MS = 10_000;
const SAMPLE = 1000;
const TOKEN_SECRET = 'bench-keys-token-secret-0123456789-abcdefghijklmnop';
const DIST = path.resolve(__dirname, '..', '..');

interface Settings {
  readonly counts: readonly number[];
  readonly sources: readonly ('file' | 'database')[];
  readonly rate: number;
  readonly reloads: number;
  /** Worker thread counts to measure each source's memory with; none where threads cannot share a port. */
  readonly workers: readonly number[];
}

function settings(): Settings {
  const counts = (process.env.BENCH_KEYS ?? '100000').split(',').map((value) => {
    const count = Number(value.trim());
    if (!Number.isInteger(count) || count < 1000) {
      throw new Error(`BENCH_KEYS: ${JSON.stringify(value)} is not a count of at least 1000`);
    }
    return count;
  });
  const sources = (process.env.BENCH_KEYS_SOURCES ?? 'file,database').split(',').map((value) => {
    const source = value.trim();
    if (source !== 'file' && source !== 'database') {
      throw new Error(`BENCH_KEYS_SOURCES: ${JSON.stringify(value)} is neither file nor database`);
    }
    return source;
  });
  const rate = Number(process.env.BENCH_RATE ?? '500');
  if (!Number.isFinite(rate) || rate <= 0) throw new Error('BENCH_RATE must be a positive number');
  const reloads = Number(process.env.BENCH_RELOADS ?? '3');
  if (!Number.isInteger(reloads) || reloads < 1) {
    throw new Error('BENCH_RELOADS must be a whole number of at least 1');
  }
  const sharing = portSharing(currentPlatform());
  const workers = (process.env.BENCH_KEYS_WORKERS ?? (sharing.ok ? '1,4' : ''))
    .split(',')
    .filter((value) => value.trim() !== '')
    .map((value) => {
      const count = Number(value.trim());
      if (!Number.isInteger(count) || count < 1 || count > 256) {
        throw new Error(`BENCH_KEYS_WORKERS: ${JSON.stringify(value)} is not a thread count`);
      }
      if (count > 1 && !sharing.ok) throw new Error(`BENCH_KEYS_WORKERS: ${sharing.why}`);
      return count;
    });
  return { counts, sources, rate, reloads, workers };
}

function log(line: string): void {
  process.stderr.write(`[bench:keys] ${line}\n`);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

interface Memory {
  readonly rss: number;
  readonly heapUsed: number;
  readonly external: number;
}

/** The gateway process, with the memory probe preloaded and an IPC channel to ask it. */
class Gateway {
  private output = '';
  readonly url: string;
  readonly spawnedAt = performance.now();
  readonly child: ChildProcess;

  constructor(
    readonly name: string,
    port: number,
    env: Record<string, string>,
  ) {
    this.url = `http://127.0.0.1:${port}`;
    this.child = spawn(
      process.execPath,
      [
        ...(process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter((flag) => flag !== ''),
        '--expose-gc',
        '-r',
        path.join(DIST, 'bench', 'keys', 'probe.js'),
        path.join(DIST, 'gateway', 'server.js'),
      ],
      {
        env: {
          PATH: process.env.PATH ?? '',
          NODE_ENV: 'production',
          LOG_LEVEL: 'warn',
          HOST: '127.0.0.1',
          PORT: String(port),
          TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
          TOLLGATE_AUTH_FAILURE_LIMIT: '100000',
          ...env,
        },
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      },
    );
    const keep = (chunk: Buffer): void => {
      this.output = (this.output + chunk.toString('utf8')).slice(-8192);
    };
    this.child.stdout?.on('data', keep);
    this.child.stderr?.on('data', keep);
  }

  static async start(name: string, env: Record<string, string>): Promise<Gateway> {
    return new Gateway(name, await freePort(), env);
  }

  /** Polls until `secretKey` is answered 200; the milliseconds since the spawn. */
  async readyWith(secretKey: string, timeoutMs = 600_000): Promise<number> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      if (this.child.exitCode !== null) {
        throw new Error(`${this.name} exited with ${this.child.exitCode}:\n${this.output}`);
      }
      if ((await this.status(secretKey)) === 200) return performance.now() - this.spawnedAt;
      if (performance.now() > deadline) throw new Error(`${this.name} never became ready`);
      await sleep(20);
    }
  }

  /** Polls until `/readyz` answers 200: with worker threads, every one of them is serving. */
  async readyEverywhere(timeoutMs = 600_000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      if (this.child.exitCode !== null) {
        throw new Error(`${this.name} exited with ${this.child.exitCode}:\n${this.output}`);
      }
      const reply = await httpRequest(`${this.url}/readyz`).catch(() => undefined);
      if (reply?.status === 200) return;
      if (performance.now() > deadline) throw new Error(`${this.name} never became ready`);
      await sleep(20);
    }
  }

  async status(secretKey: string): Promise<number> {
    const reply = await httpRequest(`${this.url}${WALLETS}`, {
      headers: { authorization: `Bearer ${secretKey}` },
    }).catch(() => undefined);
    return reply?.status ?? 0;
  }

  /** Polls every 5 ms until `secretKey` gets `wanted` (401 or 200); when it did. */
  async until(secretKey: string, wanted: (status: number) => boolean): Promise<number> {
    const deadline = performance.now() + 600_000;
    for (;;) {
      if (wanted(await this.status(secretKey))) return performance.now();
      if (performance.now() > deadline) throw new Error(`${this.name}: change never seen`);
      await sleep(5);
    }
  }

  memory(): Promise<Memory> {
    return this.ask<Memory>('memory');
  }

  /** The longest event-loop delay in the gateway since the last call (and its p99), in ms. */
  loopDelay(): Promise<LoopDelay> {
    return this.ask<LoopDelay>('loop');
  }

  private ask<T>(kind: 'memory' | 'loop'): Promise<T> {
    return askProbe<T>(this.child, this.name, kind);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

const MB = 1024 * 1024;
const fmt = (value: number, digits = 0): string =>
  Number.isFinite(value)
    ? value.toLocaleString('en-US', {
        maximumFractionDigits: digits,
        minimumFractionDigits: digits,
      })
    : 'n/a';

function perKey(memory: Memory, baseline: Memory, count: number): string {
  return (
    `RSS ${fmt(memory.rss / MB)} MiB (${fmt((memory.rss - baseline.rss) / count)} B/key over baseline), ` +
    `heap ${fmt(memory.heapUsed / MB)} MiB (${fmt((memory.heapUsed - baseline.heapUsed) / count)} B/key), ` +
    `external ${fmt(memory.external / MB)} MiB`
  );
}

function waitsLine(label: string, waits: Waits): string {
  return (
    `${label}: ${fmt(waits.requests)} requests, worst wait ${fmt(waits.worstMs, 1)} ms, ` +
    `p99 ${fmt(waits.p99Ms, 1)} ms, p50 ${fmt(waits.p50Ms, 1)} ms` +
    (waits.others === 0 ? '' : `, ${fmt(waits.others)} answers other than 200`)
  );
}

/** Steady traffic, `change()` made, then until `done()` resolves and one second after. */
async function duringChange(
  gateway: Gateway,
  headerSets: readonly Record<string, string>[],
  rate: number,
  change: () => Promise<void>,
  done: () => Promise<number>,
): Promise<{
  waits: Waits;
  before: Waits;
  changeMs: number;
  loop: LoopDelay;
  steadyLoop: LoopDelay;
}> {
  const stream = await startStreamProcess(`${gateway.url}${WALLETS}`, headerSets, rate);
  await sleep(500 + STEADY_MS);
  // The steady window's own loop delay (from the stream's start), then counted afresh.
  const steadyLoop = await gateway.loopDelay();
  const startedAt = performance.now();
  await change();
  const doneAt = await done();
  await sleep(1000);
  const loop = await gateway.loopDelay();
  const sent = await stream.stop();
  return {
    before: waitsBetween(sent, startedAt - STEADY_MS, startedAt),
    waits: waitsBetween(sent, startedAt, doneAt + 1000),
    changeMs: doneAt - startedAt,
    loop,
    steadyLoop,
  };
}

/** The reloads' worst waits and longest loop delays side by side, and the largest of each. */
function spreadLine(label: string, worst: readonly number[], loops: readonly number[]): string {
  const list = (values: readonly number[]): string =>
    values.map((value) => fmt(value, 1)).join(', ');
  return (
    `${label}, worst wait of each: ${list(worst)} ms (largest ${fmt(Math.max(...worst), 1)} ms); ` +
    `longest event-loop delay of each: ${list(loops)} ms (largest ${fmt(Math.max(...loops), 1)} ms)`
  );
}

function loopLine(label: string, loop: LoopDelay): string {
  return `${label}: longest event-loop delay in the gateway ${fmt(loop.maxMs, 1)} ms (p99 ${fmt(loop.p99Ms, 1)} ms)`;
}

/**
 * The gateway of the keys file or of the database (`keys`, its settings) on each thread count in
 * turn, alone on the machine: its process's RSS once every thread serves and 2 s of traffic went
 * through them, and each count's against the first's. The threads share one ring, so more threads
 * cost each one's own heap, not the keys.
 */
async function threadsMemory(
  source: 'file' | 'database',
  keys: Readonly<Record<string, string>>,
  workers: readonly number[],
  traffic: readonly Record<string, string>[],
  rate: number,
  print: (line: string) => void,
): Promise<void> {
  const measured: { threads: number; rss: number }[] = [];
  for (const threads of workers) {
    const gateway = await Gateway.start(`${source} gateway, ${threads} threads`, {
      ...keys,
      TOLLGATE_WORKERS: String(threads),
    });
    try {
      await gateway.readyEverywhere();
      const stream = await startStreamProcess(`${gateway.url}${WALLETS}`, traffic, rate);
      await sleep(2000);
      await stream.stop();
      const { rss } = await gateway.memory();
      measured.push({ threads, rss });
    } finally {
      await gateway.stop();
    }
  }
  const first = measured[0];
  if (first === undefined) return;
  print(
    `${source} memory by TOLLGATE_WORKERS: ` +
      measured
        .map(
          ({ threads, rss }) =>
            `${threads} ${threads === 1 ? 'thread' : 'threads'} RSS ${fmt(rss / MB)} MiB (${fmt(rss / first.rss, 2)}x)`,
        )
        .join(', '),
  );
}

async function main(): Promise<void> {
  const { counts, sources, rate, reloads, workers } = settings();
  const directory = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-keys-'));
  const lines: string[] = [];
  const print = (line: string): void => {
    lines.push(line);
    process.stdout.write(`${line}\n`);
  };
  print(
    `bench:keys on node ${process.version}, ${os.cpus().length} CPUs, ${fmt(os.totalmem() / 2 ** 30)} GiB; ` +
      `one key per account; a quarter of the accounts without a whitelist, half sharing 100 lists, ` +
      `a quarter with a list of their own; traffic at ${rate} req/s over ${SAMPLE} keys`,
  );
  try {
    // The baseline: the same gateway holding one key.
    const baseRows = [...population(1000, SAMPLE)].slice(0, 1);
    const baseFile = path.join(directory, 'baseline.json');
    writeKeysFile(baseFile, baseRows);
    const base = await Gateway.start('baseline', { TOLLGATE_KEYS_FILE: baseFile });
    await base.readyWith(sampledSecret(0));
    const warm = await startStreamProcess(
      `${base.url}${WALLETS}`,
      [{ authorization: `Bearer ${sampledSecret(0)}` }],
      rate,
    );
    await sleep(2000);
    await warm.stop();
    const baseline = await base.memory();
    await base.stop();
    print(
      `baseline (1 key, after 2 s of traffic): RSS ${fmt(baseline.rss / MB)} MiB, heap ${fmt(baseline.heapUsed / MB)} MiB`,
    );

    for (const count of counts) {
      log(`generating ${count} keys`);
      const rows: BenchRow[] = [...population(count, SAMPLE)];
      const sampled = sampledIndexes(count, SAMPLE);
      const revoked = sampled[1] ?? 1;
      const traffic = sampled
        .filter((index) => index !== revoked)
        .map((index) => ({ authorization: `Bearer ${sampledSecret(index)}` }));
      const probe = sampledSecret(revoked);
      const first = sampledSecret(sampled[0] ?? 0);
      print(`--- ${fmt(count)} keys ---`);

      if (sources.includes('file')) {
        const file = path.join(directory, 'keys.json');
        const revokedFile = path.join(directory, 'keys-revoked.json');
        const live = path.join(directory, 'keys-live.json');
        const next = path.join(directory, 'keys-next.json');
        const bytes = writeKeysFile(file, rows);
        writeKeysFile(revokedFile, rows, revoked);
        copyFileSync(file, live);
        log(`file: ${fmt(bytes / MB)} MiB written; starting the gateway`);
        const gateway = await Gateway.start('file gateway', { TOLLGATE_KEYS_FILE: live });
        const readyMs = await gateway.readyWith(first);
        const stream = await startStreamProcess(`${gateway.url}${WALLETS}`, traffic, rate);
        await sleep(2000);
        await stream.stop();
        const loaded = await gateway.memory();
        print(`file (${fmt(bytes / MB, 1)} MiB): first readiness ${fmt(readyMs)} ms`);
        print(`file memory after start: ${perKey(loaded, baseline, count)}`);
        const worst: number[] = [];
        const loops: number[] = [];
        for (let round = 1; round <= reloads; round++) {
          const revokes = round % 2 === 1;
          copyFileSync(revokes ? revokedFile : file, next);
          const reload = await duringChange(
            gateway,
            traffic,
            rate,
            () => {
              renameSync(next, live);
              gateway.child.kill('SIGHUP');
              return Promise.resolve();
            },
            () => gateway.until(probe, (status) => status === (revokes ? 401 : 200)),
          );
          const what = `file SIGHUP reload ${round} of ${reloads} (one key ${revokes ? 'revoked' : 'valid again'})`;
          print(
            waitsLine(
              `${what}: steady, the ${STEADY_MS / 1000} s before the SIGHUP`,
              reload.before,
            ),
          );
          print(
            waitsLine(
              `${what}: ${fmt(reload.changeMs)} ms until in force, requests due from the SIGHUP to 1 s after`,
              reload.waits,
            ),
          );
          print(loopLine(`${what}: steady, the 10.5 s before the SIGHUP`, reload.steadyLoop));
          print(loopLine(`${what}: from the SIGHUP to 1 s after`, reload.loop));
          worst.push(reload.waits.worstMs);
          loops.push(reload.loop.maxMs);
        }
        print(spreadLine('file SIGHUP reloads', worst, loops));
        print(`file memory after the reload: ${perKey(await gateway.memory(), baseline, count)}`);
        await gateway.stop();
        await threadsMemory('file', { TOLLGATE_KEYS_FILE: live }, workers, traffic, rate, print);
        for (const written of [file, revokedFile, live]) rmSync(written, { force: true });
      }

      if (sources.includes('database')) {
        log('database: starting PostgreSQL and loading the keys');
        let postgres: BenchPostgres | undefined;
        const gateways: Gateway[] = [];
        try {
          postgres = await startPostgres();
          const url = postgres.url;
          await loadRows(url, rows);
          const a = await Gateway.start('database gateway A', { TOLLGATE_DATABASE_URL: url });
          gateways.push(a);
          const readyMs = await a.readyWith(first);
          const stream = await startStreamProcess(`${a.url}${WALLETS}`, traffic, rate);
          await sleep(2000);
          await stream.stop();
          const loaded = await a.memory();
          print(`database: first readiness ${fmt(readyMs)} ms`);
          print(`database memory after start: ${perKey(loaded, baseline, count)}`);
          const b = await Gateway.start('database gateway B', { TOLLGATE_DATABASE_URL: url });
          gateways.push(b);
          await b.readyWith(first);
          await sleep(1000);
          const revokedAt = performance.now();
          await revokeKey(url, `key_${revoked}`);
          const [onA, onB] = await Promise.all([
            a.until(probe, (status) => status === 401),
            b.until(probe, (status) => status === 401),
          ]);
          print(
            `database revocation of one key: in force on instance B after ${fmt(onB - revokedAt, 1)} ms ` +
              `(on A, where traffic ran before: ${fmt(onA - revokedAt, 1)} ms)`,
          );
          // One instance per machine from here, as in production: B's own full reload would
          // compete with A's for this machine's cores and be measured as A's stall.
          await b.stop();
          const worst: number[] = [];
          const loops: number[] = [];
          for (let round = 1; round <= reloads; round++) {
            const revokes = round % 2 === 0;
            await vacuumKeys(url);
            const touch = await touchEveryKey(url, `key_${revoked}`, revokes);
            const reload = await duringChange(
              a,
              traffic,
              rate,
              () => touch.commit(),
              () => a.until(probe, (status) => status === (revokes ? 401 : 200)),
            );
            const what = `database full reload ${round} of ${reloads} by the version backstop (every key changed, one key ${revokes ? 'revoked' : 'valid again'})`;
            print(
              waitsLine(
                `${what}: steady, the ${STEADY_MS / 1000} s before the commit`,
                reload.before,
              ),
            );
            print(
              waitsLine(
                `${what}: ${fmt(reload.changeMs)} ms from the commit until in force, requests due from the commit to 1 s after`,
                reload.waits,
              ),
            );
            print(loopLine(`${what}: steady, the 10.5 s before the commit`, reload.steadyLoop));
            print(loopLine(`${what}: from the commit to 1 s after`, reload.loop));
            worst.push(reload.waits.worstMs);
            loops.push(reload.loop.maxMs);
          }
          print(spreadLine('database full reloads', worst, loops));
          print(
            `database memory after the full reload: ${perKey(await a.memory(), baseline, count)}`,
          );
          await a.stop();
          const database = { TOLLGATE_DATABASE_URL: url };
          await threadsMemory('database', database, workers, traffic, rate, print);
        } finally {
          await Promise.all(gateways.map((gateway) => gateway.stop()));
          postgres?.destroy();
        }
      }
    }
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(
    `bench:keys failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
