import { admitLocal, type CounterRequest, LocalCounters } from '../lib/rate-limit/admission-store';
import type { CounterReading } from '../lib/rate-limit/compact-memory-store';
import { createSharedCountersBuffer, SharedCounters } from '../lib/rate-limit/shared-counters';
import { MAX_LIMIT } from '../lib/rate-limit/window';
import { median } from './report';

/**
 * How long one admission holds the lock of the counters the worker threads of a host share: the
 * gateway's admission of `GET /api/v1/wallets/` (the per-account `payments` and `authenticated`
 * scopes, rolling windows, with limits no admission reaches) over 1,000 accounts in turn,
 * decided with `admitLocal()` in one thread, once over this thread's own windows and once over
 * shared ones inside `enter()`/`leave()`, the whole step as a worker runs it. The rounds
 * alternate, and each prints nanoseconds per admission; the summary is the medians. A lock held
 * this long per admission bounds what one host decides: a million admissions a second at 1 µs.
 *
 *   npm run build && node dist/bench/shared-counters.js   # BENCH_ROUNDS (5), BENCH_ADMISSIONS
 */

const ACCOUNTS = 1000;
const WINDOW_MS = 60_000;

/** One scope's counters, in this thread's memory or in `shared`. */
function counters(prefix: string, shared: SharedCounters | undefined): LocalCounters {
  return new LocalCounters(prefix, WINDOW_MS, true, 1, Date.now, 'ip:', shared);
}

/** What each account's admission meets, for every account. */
function admissionsOf(shared: SharedCounters | undefined): CounterRequest[][] {
  const payments = counters('rl:payments:', shared);
  const authenticated = counters('rl:authenticated:', shared);
  return Array.from({ length: ACCOUNTS }, (_, index) => {
    const key = `account:{acct_bench_${index}}`;
    return [
      { counter: payments, key, limit: MAX_LIMIT, enforced: true },
      { counter: authenticated, key, limit: MAX_LIMIT, enforced: true },
    ];
  });
}

/** Nanoseconds per admission over `count` admissions. */
function time(
  admissions: readonly CounterRequest[][],
  shared: SharedCounters | undefined,
  count: number,
): number {
  const readings: CounterReading[] = [
    { count: 0, resetAt: 0 },
    { count: 0, resetAt: 0 },
  ];
  const started = process.hrtime.bigint();
  for (let i = 0; i < count; i++) {
    const requests = admissions[i % ACCOUNTS] ?? [];
    if (shared === undefined) {
      admitLocal(requests, readings, 1);
      continue;
    }
    shared.enter();
    try {
      admitLocal(requests, readings, 1);
    } finally {
      shared.leave();
    }
  }
  return Number(process.hrtime.bigint() - started) / count;
}

function main(): void {
  const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
  const count = Number(process.env.BENCH_ADMISSIONS ?? 300_000);
  // Each admission adds a time to both scopes: room for every one of the run.
  const shared = new SharedCounters(
    createSharedCountersBuffer({ maxTimes: 2 * count * (rounds + 1) + 16 * ACCOUNTS }),
  );
  const own = admissionsOf(undefined);
  const inShared = admissionsOf(shared);
  // Warm-up, not measured.
  time(own, undefined, count);
  time(inShared, shared, count);
  const ownTimes: number[] = [];
  const sharedTimes: number[] = [];
  console.log(
    `shared counters on node ${process.version}; ${ACCOUNTS} accounts in turn, two rolling scopes, ` +
      `${count.toLocaleString('en-US')} admissions a round`,
  );
  for (let round = 1; round <= rounds; round++) {
    const first = round % 2 === 1;
    const a = first ? time(own, undefined, count) : time(inShared, shared, count);
    const b = first ? time(inShared, shared, count) : time(own, undefined, count);
    const [ownNs, sharedNs] = first ? [a, b] : [b, a];
    ownTimes.push(ownNs);
    sharedTimes.push(sharedNs);
    console.log(
      `round ${round}: this thread's windows ${ownNs.toFixed(0)} ns, shared under the lock ` +
        `${sharedNs.toFixed(0)} ns per admission`,
    );
  }
  const ownMedian = median(ownTimes);
  const sharedMedian = median(sharedTimes);
  console.log(
    `median of ${rounds} rounds: this thread's windows ${ownMedian.toFixed(0)} ns, shared under the ` +
      `lock ${sharedMedian.toFixed(0)} ns per admission (${(sharedMedian / ownMedian).toFixed(2)}x); ` +
      `one lock decides at most ${(1e9 / sharedMedian / 1e6).toFixed(1)} million admissions a second`,
  );
}

main();
