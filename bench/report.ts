import { describeAnswers, type Expectation, unexpectedAnswers } from './expect';
import type { WrkResult } from './wrk';

/** One measured wrk run. */
export interface Row {
  readonly target: string;
  readonly credential: string;
  readonly expected: Expectation;
  readonly result: WrkResult;
  /** Seconds actually measured (a failure budget can shorten a case, see `note`). */
  readonly measuredSeconds: number;
  readonly note?: string;
  /**
   * The gateway process's CPU time (user and system, all threads) per answer over the measured
   * run, in microseconds: what a change costs or saves, much less moved by the machine's other
   * load than requests a second are.
   */
  readonly cpuPerRequestUs?: number;
  /** Redis commands per allowed answer during the measured run (`INFO commandstats`). */
  readonly redisCommands?: {
    /** Commands clients sent (a script call counts once). */
    readonly perRequest: number;
    /** Commands Redis executed, those the scripts called included. */
    readonly executedPerRequest: number;
    readonly byName: string;
  };
  /** Sends more Redis commands by design (see `MeasureOptions`): left out of the one-command target. */
  readonly extraCommandsByDesign?: boolean;
}

/** One case run against this build and the baseline, in turn, in rounds. */
export interface Comparison {
  readonly name: string;
  readonly rounds: readonly Round[];
}

export interface Round {
  /** 1-based. */
  readonly round: number;
  /** Which build ran first, or both at once (BENCH_BASELINE_CONCURRENT). */
  readonly order: 'this first' | 'baseline first' | 'at once';
  readonly current: Row;
  readonly baseline: Row;
}

export function isClean(row: Row): boolean {
  return unexpectedAnswers(row.result, row.expected) === 0 && row.result.socketErrors === 0;
}

const integer = (value: number): string => Math.round(value).toLocaleString('en-US');

function measuredCells(row: Row): string {
  const { result, expected } = row;
  return (
    `${integer(result.requestsPerSecond)} | ${result.p50Ms.toFixed(2)} | ${result.p99Ms.toFixed(2)} | ` +
    `${describeAnswers(result, expected)} | ${unexpectedAnswers(result, expected)} | ${result.socketErrors}`
  );
}

export function formatRows(rows: readonly Row[]): string {
  const lines = [
    '| target | credential | expected | requests/s | p50 (ms) | p99 (ms) | answers | unexpected | socket errors |',
    '|---|---|---|---:|---:|---:|---|---:|---:|',
  ];
  for (const row of rows) {
    lines.push(
      `| ${row.target} | ${row.credential} | ${row.expected.label} | ${measuredCells(row)} |`,
    );
  }
  return lines.join('\n');
}

export function notes(rows: readonly Row[]): string[] {
  return rows.flatMap((row) => (row.note === undefined ? [] : [`- ${row.target}: ${row.note}`]));
}

export function redisCommandLines(rows: readonly Row[]): string[] {
  return rows.flatMap((row) =>
    row.redisCommands === undefined
      ? []
      : [
          `- ${row.target}, ${row.credential}: ${row.redisCommands.perRequest.toFixed(2)} Redis ` +
            `commands sent per allowed request, ${row.redisCommands.executedPerRequest.toFixed(2)} ` +
            `executed with those the scripts ran (INFO commandstats: ${row.redisCommands.byName || 'none'})`,
        ],
  );
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  if (sorted.length === 0) return Number.NaN;
  return sorted.length % 2 === 1
    ? (sorted[middle] ?? Number.NaN)
    : ((sorted[middle - 1] ?? Number.NaN) + (sorted[middle] ?? Number.NaN)) / 2;
}

interface Ratios {
  readonly throughput: number;
  readonly p50: number;
  readonly p99: number;
  /** Gateway CPU time per answer; NaN when either row has none. */
  readonly cpu: number;
}

function ratiosOf(round: Round): Ratios {
  const a = round.current.result;
  const b = round.baseline.result;
  return {
    throughput: a.requestsPerSecond / b.requestsPerSecond,
    p50: a.p50Ms / b.p50Ms,
    p99: a.p99Ms / b.p99Ms,
    cpu:
      (round.current.cpuPerRequestUs ?? Number.NaN) /
      (round.baseline.cpuPerRequestUs ?? Number.NaN),
  };
}

const times = (value: number): string => `${value.toFixed(2)}x`;

/** `0.97x (301 / 310 µs)`: the ratio with both builds' CPU time per answer. */
function cpuCell(round: Round): string {
  const mine = round.current.cpuPerRequestUs;
  const theirs = round.baseline.cpuPerRequestUs;
  if (mine === undefined || theirs === undefined) return '-';
  return `${times(mine / theirs)} (${mine.toFixed(0)} / ${theirs.toFixed(0)} µs)`;
}

/**
 * Per-round figures of both builds, the per-round ratios this build / baseline, and their medians
 * (the median of the per-round ratios: each ratio compares two runs made next to each other).
 */
export function formatComparisons(
  comparisons: readonly Comparison[],
  labels: { readonly current: string; readonly baseline: string } = {
    current: 'this',
    baseline: 'baseline',
  },
): string[] {
  const per = `${labels.current} / ${labels.baseline}`;
  const figures = [
    '| case | round | build | requests/s | p50 (ms) | p99 (ms) | answers | unexpected | socket errors |',
    '|---|---:|---|---:|---:|---:|---|---:|---:|',
  ];
  const ratios = [
    `| case | round (order) | requests/s ${per} | p50 ${per} | p99 ${per} | gateway CPU per answer ${per} |`,
    '|---|---|---:|---:|---:|---:|',
  ];
  const medians: string[] = [];
  const roundNotes: string[] = [];
  for (const { name, rounds } of comparisons) {
    for (const round of rounds) {
      const order =
        round.order !== 'baseline first'
          ? [[labels.current, round.current] as const, [labels.baseline, round.baseline] as const]
          : [[labels.baseline, round.baseline] as const, [labels.current, round.current] as const];
      for (const [build, row] of order) {
        figures.push(`| ${name} | ${round.round} | ${build} | ${measuredCells(row)} |`);
        if (row.note !== undefined) {
          roundNotes.push(`- ${name}, round ${round.round}, ${build}: ${row.note}`);
        }
      }
      const r = ratiosOf(round);
      ratios.push(
        `| ${name} | ${round.round} (${round.order}) | ` +
          `${times(r.throughput)} | ${times(r.p50)} | ${times(r.p99)} | ${cpuCell(round)} |`,
      );
    }
    const all = rounds.map(ratiosOf);
    medians.push(
      `- ${name}: median ${per} over ${rounds.length} round(s): ` +
        `throughput ${times(median(all.map((r) => r.throughput)))}, ` +
        `p50 ${times(median(all.map((r) => r.p50)))}, p99 ${times(median(all.map((r) => r.p99)))}, ` +
        `gateway CPU per answer ${times(median(all.map((r) => r.cpu)))}`,
    );
  }
  return [
    figures.join('\n'),
    '',
    ...(roundNotes.length > 0 ? [...roundNotes, ''] : []),
    ratios.join('\n'),
    '',
    ...medians,
  ];
}
