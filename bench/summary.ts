import os from 'node:os';
import { formatRss, FLAT_MIB, RSS_GROWTH_TARGET_MIB } from './cases/rss';
import { unexpectedAnswers } from './expect';
import { describeAttribution } from './gc-attribution';
import type { Bench } from './harness';
import { PAYOUTS_PATH } from './idempotency';
import {
  CHECKOUT_PATH,
  PACED_RATE,
  ROUND_LABELS,
  type RoundCase,
  TARGETS,
  WALLETS_PATH,
  WRONG_KEY,
} from './labels';
import {
  type Comparison,
  formatComparisons,
  formatRows,
  isClean,
  median,
  notes,
  redisCommandLines,
  type Row,
} from './report';
import type { Added } from './results';
import {
  type Build,
  commitOf,
  DIST,
  flagsNote,
  GROUPS,
  type Group,
  log,
  type Settings,
} from './settings';
import { formatTargets, ratioTarget, type Target } from './targets';
import type { WrkResult } from './wrk';

/** The report `npm run bench` prints: the tables of what the run measured, and the targets. */

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

/** Requests a second of each round's `current` over its `baseline`, for rounds run at once. */
function atOnceRatios(comparisons: readonly Comparison[]): number[] {
  return comparisons.flatMap((comparison) =>
    comparison.rounds.map(
      (round) => round.current.result.requestsPerSecond / round.baseline.result.requestsPerSecond,
    ),
  );
}

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
  // A request with an Idempotency-Key claims and settles it in Redis too, which is its purpose.
  const commands = bench.rows.filter(
    (row) =>
      row.redisCommands !== undefined &&
      row.target !== TARGETS.naive &&
      row.extraCommandsByDesign !== true,
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
      'gateway, Redis, token / gateway, Redis, secret key (both at once)',
      atOnceRatios(bench.credentialComparisons),
      0.95,
    ),
    ratioTarget(
      'forward-auth endpoint, Redis / Express alone',
      ratios('forward-auth', 'floor'),
      0.7,
    ),
    {
      label:
        'Redis commands per allowed request (gateway cases without an Idempotency-Key, the most of them)',
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

/** What the report says about the run besides the measurements. */
export interface RunContext {
  readonly settings: Settings;
  readonly groups: ReadonlySet<Group>;
  readonly current: Build;
  readonly baseline: Build | undefined;
  /** wrk's version line. */
  readonly wrk: string;
  readonly redisOrigin: string;
  readonly loadBefore: readonly number[];
  /** When the run started (ms since the epoch). */
  readonly started: number;
}

/** Prints the report on stdout; sets the exit code to 1 when a case had unexpected answers. */
export function printReport(bench: Bench, run: RunContext): void {
  const { settings, groups, current, baseline, wrk, redisOrigin, loadBefore, started } = run;
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
  if (bench.credentialComparisons.length > 0) {
    out.push(
      '### A token / a secret key, Redis limits, side by side (this build)',
      '',
      `- the same accounts' tokens and secret keys; ${settings.rounds} round(s), in each two gateways of this build under load at the same time, one sent tokens and one secret keys: ${settings.warmupSeconds}s warm-up, then ${settings.roundSeconds}s measured`,
      '',
      ...formatComparisons(bench.credentialComparisons, {
        current: 'token',
        baseline: 'secret key',
      }),
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
    ...[...bench.comparisons, ...bench.credentialComparisons].flatMap((comparison) =>
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
