import { execFileSync } from 'node:child_process';
import { MemoryStore, type Options, type Store } from 'express-rate-limit';
import { CompactMemoryStore } from '../lib/rate-limit/compact-memory-store';

/**
 * What the in-memory counters retain for distinct client IPs all counted in one window, which the
 * gateway bench (case (j)) cannot send on a small machine (a million IPs in 60 s is about 17,000
 * requests a second). Each store is measured in its own process (`--expose-gc`): heap and RSS after
 * a full GC, before and after one increment each of `COUNTER_MEMORY_IPS` (default 1,000,000)
 * keys shaped as the per-IP scopes name them (`ip:10.x.y.z`, a new string per request).
 *
 *   npm run build && node dist/bench/counter-memory.js
 */

const STORES = ['MemoryStore', 'CompactMemoryStore'] as const;
type StoreName = (typeof STORES)[number];
const MIB = 1024 * 1024;

interface Reading {
  readonly store: StoreName;
  readonly keys: number;
  readonly heapMiB: number;
  /** Typed arrays' memory, outside V8's heap (CompactMemoryStore's IPv4 tables). */
  readonly arrayBuffersMiB: number;
  readonly rssMiB: number;
  readonly seconds: number;
}

function storeNamed(name: StoreName): Store {
  return name === 'MemoryStore' ? new MemoryStore() : new CompactMemoryStore();
}

function settle(): NodeJS.MemoryUsage {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with --expose-gc');
  gc();
  gc();
  return process.memoryUsage();
}

async function measure(name: StoreName, keys: number): Promise<Reading> {
  const store = storeNamed(name);
  await store.init?.({ windowMs: 60_000 } as Options);
  const before = settle();
  const started = process.hrtime.bigint();
  for (let n = 0; n < keys; n++) {
    // A fresh address string, then the key as ScopeCounter builds it.
    const ip = `10.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
    await store.increment(`ip:${ip}`);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const after = settle();
  await store.shutdown?.();
  return {
    store: name,
    keys,
    heapMiB: (after.heapUsed - before.heapUsed) / MIB,
    arrayBuffersMiB: (after.arrayBuffers - before.arrayBuffers) / MIB,
    rssMiB: (after.rss - before.rss) / MIB,
    seconds,
  };
}

async function main(): Promise<void> {
  const keys = Number(process.env.COUNTER_MEMORY_IPS ?? 1_000_000);
  if (!Number.isInteger(keys) || keys < 1 || keys > 2 ** 24) {
    throw new Error('COUNTER_MEMORY_IPS must be a whole number from 1 to 16,777,216');
  }
  const only = process.argv[2];
  if (only !== undefined) {
    if (!STORES.includes(only as StoreName)) throw new Error(`no store ${only}`);
    process.stdout.write(JSON.stringify(await measure(only as StoreName, keys)));
    return;
  }
  const lines = [
    `| store | distinct keys in one window | heap growth (MiB) | array buffers growth (MiB) | RSS growth (MiB) | bytes per key (heap and array buffers) | seconds |`,
    '|---|--:|--:|--:|--:|--:|--:|',
  ];
  for (const name of STORES) {
    const output = execFileSync(process.execPath, ['--expose-gc', __filename, name], {
      env: { ...process.env, COUNTER_MEMORY_IPS: String(keys) },
      encoding: 'utf8',
    });
    const r = JSON.parse(output) as Reading;
    lines.push(
      `| ${r.store} | ${r.keys.toLocaleString('en-US')} | ${r.heapMiB.toFixed(1)} | ${r.arrayBuffersMiB.toFixed(1)} | ${r.rssMiB.toFixed(1)} | ${Math.round(((r.heapMiB + r.arrayBuffersMiB) * MIB) / r.keys)} | ${r.seconds.toFixed(1)} |`,
    );
  }
  console.log(lines.join('\n'));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
