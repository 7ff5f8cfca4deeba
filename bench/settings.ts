import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

/** The `dist` directory this bench was built into. */
export const DIST = path.resolve(__dirname, '..');

export function log(message: string): void {
  process.stderr.write(`bench: ${message}\n`);
}

export interface Settings {
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

function setting(name: string, fallback: number, min: number, max: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`${name} must be a whole number from ${min} to ${max}`);
  }
  return value;
}

/** The settings from the environment (BENCH_DURATION and the others, see run.ts). */
export function readSettings(): Settings {
  const durationSeconds = setting('BENCH_DURATION', 15, 1, 600);
  return {
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
}

export const GROUPS = [
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
export type Group = (typeof GROUPS)[number];

/** BENCH_ONLY's groups, or all. */
export function selectedGroups(): ReadonlySet<Group> {
  const raw = process.env.BENCH_ONLY;
  if (raw === undefined || raw.trim() === '') return new Set(GROUPS);
  const names = raw.split(',').map((name) => name.trim());
  const unknown = names.filter((name) => !(GROUPS as readonly string[]).includes(name));
  if (unknown.length > 0 || names.length === 0) {
    throw new Error(`BENCH_ONLY takes a comma-separated list of: ${GROUPS.join(', ')}`);
  }
  return new Set(names as Group[]);
}

/** The groups that need Redis. */
export const REDIS_GROUPS: readonly Group[] = [
  'redis',
  'naive',
  'forward-auth',
  'latency',
  'rss',
  'idempotency',
];

export interface Build {
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
export function flagsNote(build: Build): string {
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
export function commitOf(dist: string): string {
  const result = spawnSync('git', ['-C', path.dirname(dist), 'describe', '--always', '--dirty'], {
    encoding: 'utf8',
  });
  return result.status === 0 ? result.stdout.trim() : 'commit unknown';
}

/** This build, with BENCH_NODE_FLAGS and BENCH_GATEWAY_ENV. */
export function currentBuild(): Build {
  return {
    label: 'this',
    dist: DIST,
    nodeFlags: flagsFrom(process.env.BENCH_NODE_FLAGS),
    env: gatewayEnvFrom(process.env.BENCH_GATEWAY_ENV),
  };
}

/** BENCH_BASELINE_DIST's build, when set. */
export function baselineBuild(): Build | undefined {
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
