import { AdmissionStore, type LocalCounters } from '../lib/rate-limit/admission-store';
import { createLimiterRedis, type LimiterRedisConnection } from '../lib/rate-limit/redis-client';
import { type Child, freePort, startChild, versionOf } from './processes';

/**
 * What one counter key costs in Redis (`MEMORY USAGE`), driven through the real engine
 * (`AdmissionStore.admit()`, the script the gateway sends): a rolling window (per-account scopes,
 * the failed-authentication budget) at the gateway's limits and at light rates, next to the
 * fixed-window integer counter of the same scope, with its string length and the ring's slots.
 * One more key reaches the payments limit in a 10-second window and is admitted again before it
 * expires, then once more when the whole burst has left the window: what a key keeps once its
 * account is quieter again.
 *
 *   npm run build && node dist/bench/rolling-key-memory.js
 *
 * It starts its own redis-server on a free loopback port (without persistence), or uses
 * `BENCH_REDIS_URL` (it deletes the keys it measures first: give it a server of its own).
 */

const PREFIX = 'tollgate:rl:';
const WINDOW_MS = 60_000;
const SHORT_WINDOW_MS = 10_000;
/** Attempts past the limit, each refused and counted nowhere. */
const REFUSED_ATTEMPTS = 10;
/** The rolling string's header: `r1`, then 32-bit start, n, cap and last. */
const HEADER_BYTES = 18;

interface Case {
  readonly what: string;
  readonly scope: string;
  readonly key: string;
  readonly limit: number;
  readonly admissions: number;
  readonly rolling: boolean;
  readonly windowMs: number;
  /** After the burst, admitted twice more, the second time once the whole burst has left. */
  readonly quietAfter?: boolean;
}

interface Measured extends Case {
  readonly redisKey: string;
  readonly admitted: number;
  readonly bytes: number;
  readonly encoding: string;
  readonly slots: number | undefined;
  readonly usage: number;
}

const account = (n: number): string => `account:{acct_bench_${n}}`;

const CASES: readonly Case[] = [
  ...[1500, 100, 10, 1].map((admissions, n) => ({
    what: admissions === 1500 ? 'payments, at its limit' : `payments, ${admissions} a minute`,
    scope: 'payments',
    key: account(n),
    limit: 1500,
    admissions,
    rolling: true,
    windowMs: WINDOW_MS,
  })),
  {
    what: 'authenticated, at its limit',
    scope: 'authenticated',
    key: account(10),
    limit: 100,
    admissions: 100,
    rolling: true,
    windowMs: WINDOW_MS,
  },
  {
    what: 'failed-authentication budget of one address, at its limit',
    scope: 'auth-failures',
    key: '203.0.113.7',
    limit: 20,
    admissions: 20,
    rolling: true,
    windowMs: WINDOW_MS,
  },
  {
    what: 'payments, at its limit in a 10 s window, then 2 more once the burst has left it',
    scope: 'payments',
    key: account(20),
    limit: 1500,
    admissions: 1500,
    rolling: true,
    windowMs: SHORT_WINDOW_MS,
    quietAfter: true,
  },
  ...[1500, 100, 10, 1].map((admissions, n) => ({
    what: `payments, fixed window, ${admissions} in the window`,
    scope: 'payments',
    key: account(30 + n),
    limit: 1500,
    admissions,
    rolling: false,
    windowMs: WINDOW_MS,
  })),
];

async function redisFor(): Promise<{ url: string; origin: string; server?: Child }> {
  const fromEnv = process.env.BENCH_REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') return { url: fromEnv, origin: 'BENCH_REDIS_URL' };
  const version = versionOf('redis-server');
  if (version === undefined) throw new Error('no redis-server on PATH and no BENCH_REDIS_URL');
  const port = await freePort();
  const server = startChild(
    'redis-server',
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { PATH: process.env.PATH ?? '' },
  );
  return {
    url: `redis://127.0.0.1:${port}`,
    origin: 'redis-server started for this run',
    server,
  };
}

async function ready(connection: LimiterRedisConnection): Promise<void> {
  const deadline = Date.now() + 5000;
  while (connection.client.status !== 'ready') {
    if (Date.now() > deadline) throw new Error('Redis did not become ready within 5 s');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Admits requests of one key until `admissions` are admitted, then tries a few more. */
const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** Admits requests of one key until `admissions` are admitted, then tries a few more. */
async function drive(store: AdmissionStore, counter: LocalCounters, c: Case): Promise<number> {
  const request = { counter, key: c.key, limit: c.limit, enforced: true };
  const attempts = c.admissions >= c.limit ? c.limit + REFUSED_ATTEMPTS : c.admissions;
  const burstStart = Date.now();
  let admitted = 0;
  for (let i = 0; i < attempts; i++) {
    const outcome = await store.admit([request]);
    if (outcome.refusedAt < 0) admitted++;
  }
  const burstEnd = Date.now();
  if (admitted !== Math.min(c.admissions, c.limit)) {
    throw new Error(`${c.key}: admitted ${admitted} of ${c.admissions}`);
  }
  if (c.quietAfter !== true) return admitted;
  // One admission as soon as the burst's oldest has left the window (the key still lives: it
  // expires a window after its newest admission), and one when the whole burst has left.
  await sleep(burstStart + c.windowMs - Date.now());
  while ((await store.admit([request])).refusedAt >= 0) await sleep(10);
  await sleep(burstEnd + c.windowMs + 100 - Date.now());
  if ((await store.admit([request])).refusedAt >= 0) throw new Error(`${c.key} refused`);
  const [reading] = await store.read([request]);
  return reading?.count ?? 0;
}

async function measure(connection: LimiterRedisConnection, c: Case): Promise<Measured> {
  const store = new AdmissionStore({ windowMs: c.windowMs, redis: connection });
  const counter = store.countersFor(`${PREFIX}${c.scope}:`, {
    windowMs: c.windowMs,
    rolling: c.rolling,
    ipv4KeyPrefix: c.scope === 'auth-failures' ? '' : undefined,
  });
  const redisKey = counter.prefix + c.key;
  const call = (command: string, ...args: string[]): Promise<unknown> =>
    connection.client.call(command, ...args);
  await call('DEL', redisKey);
  const admitted = await drive(store, counter, c);
  const usage = Number(await call('MEMORY', 'USAGE', redisKey, 'SAMPLES', '0'));
  const bytes = Number(await call('STRLEN', redisKey));
  const encoding = String(await call('OBJECT', 'ENCODING', redisKey));
  let slots: number | undefined;
  if (c.rolling) {
    // The header's first two bytes are `r1`; after it, 4 bytes a slot.
    const tag = String(await call('GETRANGE', redisKey, '0', '1'));
    slots = (bytes - HEADER_BYTES) / 4;
    if (tag !== 'r1' || !Number.isInteger(slots)) {
      throw new Error(`${redisKey} is not a ring of 32-bit slots`);
    }
  }
  store.shutdown();
  return { ...c, redisKey, admitted, bytes, encoding, slots, usage };
}

function table(rows: readonly Measured[]): string {
  const lines = [
    '| key | limit | admissions in the window | Redis key | ring slots | string bytes | `MEMORY USAGE` (bytes) | per 1,000,000 such keys (MiB) |',
    '|---|--:|--:|---|--:|--:|--:|--:|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.what} | ${r.limit} | ${r.admitted} | \`${r.redisKey}\` | ${r.slots ?? `- (${r.encoding})`} | ${r.bytes} | ${r.usage} | ${((r.usage * 1e6) / 1024 / 1024).toFixed(0)} |`,
    );
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  const redis = await redisFor();
  const connection = createLimiterRedis({ url: redis.url, commandTimeoutMs: 1000 });
  try {
    await ready(connection);
    const info = String(await connection.client.call('INFO'));
    const rows: Measured[] = [];
    for (const c of CASES) rows.push(await measure(connection, c));
    console.log(
      `${redis.origin}, Redis ${/redis_version:(\S+)/.exec(info)?.[1] ?? '?'}, ${/mem_allocator:(\S+)/.exec(info)?.[1] ?? '?'}; node ${process.version}`,
    );
    console.log(table(rows));
  } finally {
    await connection.close();
    await redis.server?.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
