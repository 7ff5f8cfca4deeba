import { rmSync } from 'node:fs';
import path from 'node:path';
import { answersWith, type Expectation, SUCCESS, WRONG_CREDENTIAL } from './expect';
import { type Child, cpuSecondsOf, memoryOf, startChild } from './processes';
import { commandCounts, commandsBetween } from './redis-stats';
import type { Comparison, Row } from './report';
import type { RoundCase } from './labels';
import type { Added, Memory, RssCase } from './results';
import { DIST, log, type Settings } from './settings';
import { runWrk, type WrkResult } from './wrk';

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
export interface MeasureOptions {
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
  /**
   * Requests that send more Redis commands by design (an `Idempotency-Key` claims and settles):
   * their commands are reported, but not held to one per allowed request.
   */
  readonly extraCommandsByDesign?: boolean;
}

export class Bench {
  readonly rows: Row[] = [];
  readonly comparisons: Comparison[] = [];
  /** With an Idempotency-Key (current) against without (baseline), the same build. */
  readonly keyComparisons: Comparison[] = [];
  /** A token (current) against a secret key (baseline), the same build, Redis limits. */
  readonly credentialComparisons: Comparison[] = [];
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
      ...(options.extraCommandsByDesign === true ? { extraCommandsByDesign: true } : {}),
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
