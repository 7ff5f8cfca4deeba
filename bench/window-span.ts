import { AdmissionStore } from '../lib/rate-limit/admission-store';

/**
 * The most requests a limit admits in any span of one window, for a fixed window (the per-IP
 * scopes) and a rolling one (the per-account scopes), under the same arrivals from one client
 * address. The engine counts in memory (`AdmissionStore` without Redis) on a clock set to each
 * arrival, so the figures are exact and the same on every run. A fixed window starts at its key's
 * first admission and admits the limit; the next starts at the first request after it ends.
 *
 *   npm run build && node dist/bench/window-span.js
 */

const LIMIT = 45;
const WINDOW_MS = 60_000;
/** Any fixed instant: the engine only compares times. */
const START = Date.UTC(2026, 0, 1);

interface Scenario {
  readonly name: string;
  /** Arrival times in ms after the start, ascending. */
  readonly arrivals: readonly number[];
}

interface Span {
  readonly admitted: number;
  readonly most: number;
  /** The first admission of the fullest span, in ms after the start. */
  readonly from: number;
}

const repeat = (times: number, at: number): number[] => Array.from({ length: times }, () => at);

/** A fixed sequence of pseudo-random numbers in [0, 1) (a linear congruential generator). */
function sequence(seed: number): () => number {
  let state = seed;
  return () => {
    state = (Math.imul(state, 1_664_525) + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

function bursts(): number[] {
  const next = sequence(7);
  const arrivals: number[] = [];
  for (let i = 0; i < 200; i++) {
    arrivals.push(...repeat(1 + Math.floor(next() * 20), Math.floor(next() * 10 * WINDOW_MS)));
  }
  return arrivals.sort((a, b) => a - b);
}

const SCENARIOS: readonly Scenario[] = [
  {
    name: `edge bursts: 1 request at 0 ms, ${2 * LIMIT} at ${(WINDOW_MS - 1).toLocaleString('en-US')} ms (the first window's last millisecond), ${2 * LIMIT} at ${WINDOW_MS.toLocaleString('en-US')} ms`,
    arrivals: [0, ...repeat(2 * LIMIT, WINDOW_MS - 1), ...repeat(2 * LIMIT, WINDOW_MS)],
  },
  {
    name: 'steady: one request every 100 ms for 3 windows',
    arrivals: Array.from({ length: (3 * WINDOW_MS) / 100 }, (_, i) => i * 100),
  },
  {
    name: '200 bursts of 1 to 20 requests at pseudo-random times over 10 windows (seed 7)',
    arrivals: bursts(),
  },
];

/** The most of `times` (ascending) inside any span [t, t + window). */
function fullestSpan(times: readonly number[]): Span {
  let most = 0;
  let from = 0;
  let first = 0;
  times.forEach((time, last) => {
    while (time - (times[first] ?? time) >= WINDOW_MS) first++;
    if (last - first + 1 > most) {
      most = last - first + 1;
      from = times[first] ?? 0;
    }
  });
  return { admitted: times.length, most, from };
}

async function admittedTimes(arrivals: readonly number[], rolling: boolean): Promise<number[]> {
  let clock = START;
  const store = new AdmissionStore({ windowMs: WINDOW_MS, now: () => clock });
  const counter = store.countersFor('tollgate:rl:checkout-read:', { rolling });
  const admitted: number[] = [];
  for (const at of arrivals) {
    clock = START + at;
    const outcome = await store.admit([
      { counter, key: 'ip:203.0.113.7', limit: LIMIT, enforced: true },
    ]);
    if (outcome.refusedAt < 0) admitted.push(at);
  }
  store.shutdown();
  return admitted;
}

async function main(): Promise<void> {
  const ms = (value: number): string => `${value.toLocaleString('en-US')} ms`;
  console.log(
    `limit ${LIMIT}, window ${ms(WINDOW_MS)}, one client address; the engine in memory, clock set to each arrival`,
  );
  for (const scenario of SCENARIOS) {
    console.log(`\n${scenario.name} (${scenario.arrivals.length} requests)`);
    for (const rolling of [false, true]) {
      const span = fullestSpan(await admittedTimes(scenario.arrivals, rolling));
      console.log(
        `  ${rolling ? 'rolling window' : 'fixed window  '}: ${span.admitted} admitted; most in any ${ms(WINDOW_MS)} span ${span.most} (${(span.most / LIMIT).toFixed(2)}x the limit), the span from ${ms(span.from)}`,
      );
    }
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
