import { execFileSync } from 'node:child_process';
import { MemoryStore, type Options } from 'express-rate-limit';
import { AdmissionStore, type LocalCounters } from '../lib/rate-limit/admission-store';
import { CompactMemoryStore, type CounterReading } from '../lib/rate-limit/compact-memory-store';
import { RollingWindows } from '../lib/rate-limit/rolling-windows';

/**
 * What the in-memory counters retain, each case measured in its own process (`--expose-gc`):
 * heap, array buffers and RSS after a full GC, before and after the counting.
 *
 * Per client address (the default): distinct IPs all counted in one window, which the gateway
 * bench (case (j)) cannot send on a small machine (a million IPs in 60 s is about 17,000 requests
 * a second). `COUNTER_MEMORY_IPS` (default 1,000,000) keys shaped as the per-IP scopes name them
 * (`ip:10.x.y.z`, a new string per request), each counted `COUNTER_MEMORY_HITS` times (default 1;
 * a comma-separated list runs each), in express-rate-limit's `MemoryStore`, the fixed windows of
 * `CompactMemoryStore` and the exact rolling windows of `RollingWindows`. The kit's stores run on
 * a clock held still, so every admission stays inside the window; MemoryStore reads the real
 * clock, and its case fails if it takes longer than a window.
 *
 * Per account (`accounts`): the engine in memory mode (`AdmissionStore` without Redis), as a
 * gateway counts its two per-account scopes, `payments` (1,500 a minute) and `authenticated`
 * (100): each of `COUNTER_MEMORY_ACCOUNTS` accounts (default 10,000 and 100,000) admitted 5 times
 * in each, and one in `COUNTER_MEMORY_BUSY_EVERY` (default 100) at both limits (with 10 more
 * attempts in each, refused), once with the scopes rolling as the gateway counts them and once
 * with fixed windows.
 *
 *   npm run build && node dist/bench/counter-memory.js
 *   npm run build && node dist/bench/counter-memory.js accounts
 */

const IP_STORES = ['MemoryStore', 'CompactMemoryStore', 'RollingWindows'] as const;
type IpStoreName = (typeof IP_STORES)[number];
const WINDOWS = ['rolling', 'fixed'] as const;
type WindowKind = (typeof WINDOWS)[number];
const MIB = 1024 * 1024;
const WINDOW_MS = 60_000;
const PAYMENTS_LIMIT = 1500;
const AUTHENTICATED_LIMIT = 100;
const LIGHT_ADMISSIONS = 5;
const REFUSED_ATTEMPTS = 10;

interface Growth {
  readonly heapMiB: number;
  /** Typed arrays' memory, outside V8's heap (CompactMemoryStore's IPv4 tables, large rings). */
  readonly arrayBuffersMiB: number;
  readonly rssMiB: number;
  readonly seconds: number;
}

interface IpReading extends Growth {
  readonly store: IpStoreName;
  readonly keys: number;
  readonly hits: number;
}

interface AccountReading extends Growth {
  readonly windows: WindowKind;
  readonly accounts: number;
  readonly busy: number;
  readonly admitted: number;
}

/** Counts one hit of a key, as the store is asked for it by a limiter. */
type Count = (key: string) => unknown;

function counterOf(name: IpStoreName): Count {
  if (name === 'MemoryStore') {
    const store = new MemoryStore();
    store.init({ windowMs: WINDOW_MS } as Options);
    return (key) => store.increment(key);
  }
  const startedAt = Date.now();
  if (name === 'CompactMemoryStore') {
    const store = new CompactMemoryStore({ now: () => startedAt });
    store.init({ windowMs: WINDOW_MS });
    return (key) => store.increment(key);
  }
  const windows = new RollingWindows({ windowMs: WINDOW_MS, now: () => startedAt });
  const reading: CounterReading = { count: 0, resetAt: 0 };
  return (key) => {
    windows.hit(key, reading);
  };
}

function settle(): NodeJS.MemoryUsage {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with --expose-gc');
  gc();
  gc();
  return process.memoryUsage();
}

/** The memory kept by what `work` returns, read after a full GC before and after it. */
async function growthOf(work: () => Promise<unknown>): Promise<Growth> {
  const before = settle();
  const started = process.hrtime.bigint();
  const kept = await work();
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const after = settle();
  if (kept === undefined) throw new Error('nothing kept');
  return {
    heapMiB: (after.heapUsed - before.heapUsed) / MIB,
    arrayBuffersMiB: (after.arrayBuffers - before.arrayBuffers) / MIB,
    rssMiB: (after.rss - before.rss) / MIB,
    seconds,
  };
}

async function measureIps(store: IpStoreName, keys: number, hits: number): Promise<IpReading> {
  const growth = await growthOf(async () => {
    const count = counterOf(store);
    for (let n = 0; n < keys; n++) {
      const ip = `10.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
      // A fresh key string per request, as ScopeCounter builds it.
      for (let h = 0; h < hits; h++) await count(`ip:${ip}`);
    }
    return count;
  });
  // MemoryStore reads the real clock: past one window it would drop the keys counted first.
  if (store === 'MemoryStore' && growth.seconds >= WINDOW_MS / 1000) {
    throw new Error(`MemoryStore took ${growth.seconds.toFixed(0)} s, longer than one window`);
  }
  return { store, keys, hits, ...growth };
}

/** Admits `attempts` requests of one account in one scope: how many were admitted. */
async function spend(
  store: AdmissionStore,
  counter: LocalCounters,
  account: number,
  limit: number,
  attempts: number,
): Promise<number> {
  let admitted = 0;
  for (let i = 0; i < attempts; i++) {
    const key = `account:{acct_${account}}`;
    const outcome = await store.admit([{ counter, key, limit, enforced: true }]);
    if (outcome.refusedAt < 0) admitted++;
  }
  return admitted;
}

async function measureAccounts(
  windows: WindowKind,
  accounts: number,
  busyEvery: number,
): Promise<AccountReading> {
  let admitted = 0;
  let busy = 0;
  const growth = await growthOf(async () => {
    const startedAt = Date.now();
    const store = new AdmissionStore({ windowMs: WINDOW_MS, now: () => startedAt });
    const rolling = windows === 'rolling';
    const payments = store.countersFor('tollgate:rl:payments:', { rolling });
    const authenticated = store.countersFor('tollgate:rl:authenticated:', { rolling });
    for (let n = 0; n < accounts; n++) {
      const atLimit = n % busyEvery === 0;
      if (atLimit) busy++;
      const paymentsTries = atLimit ? PAYMENTS_LIMIT + REFUSED_ATTEMPTS : LIGHT_ADMISSIONS;
      const authenticatedTries = atLimit
        ? AUTHENTICATED_LIMIT + REFUSED_ATTEMPTS
        : LIGHT_ADMISSIONS;
      admitted += await spend(store, payments, n, PAYMENTS_LIMIT, paymentsTries);
      admitted += await spend(store, authenticated, n, AUTHENTICATED_LIMIT, authenticatedTries);
    }
    return store;
  });
  const expected =
    busy * (PAYMENTS_LIMIT + AUTHENTICATED_LIMIT) + (accounts - busy) * 2 * LIGHT_ADMISSIONS;
  if (admitted !== expected) throw new Error(`admitted ${admitted}, expected ${expected}`);
  return { windows, accounts, busy, admitted, ...growth };
}

function wholeNumbers(name: string, fallback: string, max: number): number[] {
  const values = (process.env[name] ?? fallback).split(',').map(Number);
  if (values.some((value) => !Number.isInteger(value) || value < 1 || value > max)) {
    throw new Error(`${name} must be whole numbers from 1 to ${max.toLocaleString('en-US')}`);
  }
  return values;
}

/** One case's reading, measured in a process of its own. */
function inChild(args: readonly string[]): unknown {
  const output = execFileSync(process.execPath, ['--expose-gc', __filename, ...args], {
    encoding: 'utf8',
    maxBuffer: MIB,
  });
  return JSON.parse(output);
}

const mib = (value: number): string => value.toFixed(1);
const thousands = (value: number): string => value.toLocaleString('en-US');
const bytesPer = (g: Growth, count: number): number =>
  Math.round(((g.heapMiB + g.arrayBuffersMiB) * MIB) / count);

function ipTable(keys: number, hitsList: readonly number[]): string {
  const lines = [
    '| store | distinct keys in one window | hits per key | heap growth (MiB) | array buffers growth (MiB) | RSS growth (MiB) | bytes per key (heap and array buffers) | seconds |',
    '|---|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const hits of hitsList) {
    for (const store of IP_STORES) {
      const r = inChild(['ip', store, String(keys), String(hits)]) as IpReading;
      lines.push(
        `| ${r.store} | ${thousands(r.keys)} | ${r.hits} | ${mib(r.heapMiB)} | ${mib(r.arrayBuffersMiB)} | ${mib(r.rssMiB)} | ${bytesPer(r, r.keys)} | ${r.seconds.toFixed(1)} |`,
      );
    }
  }
  return lines.join('\n');
}

function accountTable(populations: readonly number[], busyEvery: number): string {
  const lines = [
    `| windows | accounts | at both limits | admissions | heap growth (MiB) | array buffers growth (MiB) | RSS growth (MiB) | bytes per account (heap and array buffers) | RSS bytes per account | seconds |`,
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const accounts of populations) {
    for (const windows of WINDOWS) {
      const r = inChild([
        'accounts',
        windows,
        String(accounts),
        String(busyEvery),
      ]) as AccountReading;
      lines.push(
        `| ${r.windows} | ${thousands(r.accounts)} | ${thousands(r.busy)} | ${thousands(r.admitted)} | ${mib(r.heapMiB)} | ${mib(r.arrayBuffersMiB)} | ${mib(r.rssMiB)} | ${bytesPer(r, r.accounts)} | ${Math.round((r.rssMiB * MIB) / r.accounts)} | ${r.seconds.toFixed(1)} |`,
      );
    }
  }
  return lines.join('\n');
}

async function child(args: readonly string[]): Promise<unknown> {
  const [kind, name, count, each] = args;
  if (kind === 'ip' && IP_STORES.includes(name as IpStoreName)) {
    return measureIps(name as IpStoreName, Number(count), Number(each));
  }
  if (kind === 'accounts' && WINDOWS.includes(name as WindowKind)) {
    return measureAccounts(name as WindowKind, Number(count), Number(each));
  }
  throw new Error(`no case ${args.join(' ')}`);
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.length > 1) {
    process.stdout.write(JSON.stringify(await child(args)));
    return;
  }
  if (args[0] === 'accounts') {
    const populations = wholeNumbers('COUNTER_MEMORY_ACCOUNTS', '10000,100000', 10_000_000);
    const [busyEvery = 100] = wholeNumbers('COUNTER_MEMORY_BUSY_EVERY', '100', 10_000_000);
    console.log(accountTable(populations, busyEvery));
    return;
  }
  if (args[0] !== undefined) throw new Error(`no case ${args[0]}: give none or accounts`);
  const [keys = 1_000_000] = wholeNumbers('COUNTER_MEMORY_IPS', '1000000', 2 ** 24);
  console.log(ipTable(keys, wholeNumbers('COUNTER_MEMORY_HITS', '1', 10_000)));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
