import { existsSync } from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { RateLimitedError } from '../../../lib/errors';
import { createAuthFailureLimiter } from '../../../lib/rate-limit/auth-failures';
import { createFailureBudgetBuffer } from '../../../lib/rate-limit/shared-failure-log';

/**
 * Worker threads sharing one failure-budget buffer count as one instance: four threads, released
 * together by a barrier, each try many wrong keys from the same IP at once, then from the next
 * IP, each comparison taking a few microseconds; for every IP exactly `limit` comparisons are
 * made in all, and every other attempt is refused with `RateLimitedError` without comparing. The
 * threads run the compiled kit (dist/, which `npm test` builds first).
 */

const DIST = path.join(__dirname, '..', '..', '..', 'dist', 'lib');
const LIMITER = path.join(DIST, 'rate-limit', 'auth-failures.js');
const ERRORS = path.join(DIST, 'errors.js');

const THREADS = 4;
/** Attempts of each thread from each IP. */
const ATTEMPTS = 25;
const LIMIT = 10;
const WINDOW_MS = 60_000;
const IPS = Array.from({ length: 16 }, (_, index) => `203.0.113.${200 + index}`);

/** Barrier words: threads ready, and the start flag. */
const READY = 0;
const GO = 1;
/** From this word on, the comparisons made by every thread, one word per IP. */
const COMPARED = 2;

/** What one thread saw: comparisons it made, refusals, and any other answer. */
interface ThreadTally {
  readonly compared: number;
  readonly refused: number;
  readonly other: readonly string[];
}

/**
 * The thread: waits at the barrier, then attempts `ATTEMPTS` wrong keys one after another; each
 * comparison counts itself in the shared tally and spins a few microseconds before it throws,
 * so that another thread comes between a check and its count unless the lock keeps it out.
 */
const THREAD_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { createAuthFailureLimiter } = require(workerData.limiter);
const { AuthenticationError, RateLimitedError } = require(workerData.errors);
const words = new Int32Array(workerData.barrier);
const limiter = createAuthFailureLimiter({
  limit: workerData.limit,
  windowMs: workerData.windowMs,
  sharedFailures: workerData.failures,
});
let compared = 0;
let refused = 0;
const other = [];
let ip = 0;
const compare = () => {
  compared++;
  Atomics.add(words, ${COMPARED} + ip, 1);
  const until = process.hrtime.bigint() + 20000n;
  while (process.hrtime.bigint() < until);
  throw new AuthenticationError('invalid_api_key');
};
Atomics.add(words, ${READY}, 1);
Atomics.notify(words, ${READY});
while (Atomics.load(words, ${GO}) === 0) Atomics.wait(words, ${GO}, 0, 50);
for (ip = 0; ip < workerData.ips.length; ip++) {
  const req = { clientIp: workerData.ips[ip] };
  for (let i = 0; i < workerData.attempts; i++) {
    try {
      limiter.attempt(req, compare);
      other.push('returned');
    } catch (error) {
      if (error instanceof RateLimitedError) refused++;
      else if (!(error instanceof AuthenticationError)) other.push(String(error));
    }
  }
}
limiter.shutdown();
parentPort.postMessage({ compared, refused, other });
`;

function runThread(workerData: Record<string, unknown>): {
  readonly done: Promise<ThreadTally>;
} {
  const worker = new Worker(THREAD_SOURCE, { eval: true, workerData });
  const done = new Promise<ThreadTally>((resolve, reject) => {
    worker.once('message', (tally: ThreadTally) => {
      resolve(tally);
    });
    worker.once('error', reject);
    worker.once('exit', (code) => {
      reject(new Error(`a budget thread stopped before answering (exit code ${code})`));
    });
  });
  return { done };
}

/** Waits until `count` threads stand at the barrier (5 s at most). */
function untilReady(words: Int32Array, count: number): void {
  const deadline = Date.now() + 5000;
  for (let ready = Atomics.load(words, READY); ready < count; ready = Atomics.load(words, READY)) {
    if (Date.now() > deadline) throw new Error(`only ${ready} of ${count} threads got ready`);
    Atomics.wait(words, READY, ready, 50);
  }
}

describe('the failure budget shared by worker threads', () => {
  beforeAll(() => {
    if (!existsSync(LIMITER)) {
      throw new Error(`${LIMITER} is missing: run npm run build (npm test does it first)`);
    }
  });

  it('compares exactly the limit per IP across four threads racing on it, and refuses the rest', async () => {
    const failures = createFailureBudgetBuffer({ limit: LIMIT, windowMs: WINDOW_MS });
    const barrier = new SharedArrayBuffer(4 * (COMPARED + IPS.length));
    const words = new Int32Array(barrier);
    const threads = Array.from({ length: THREADS }, () =>
      runThread({
        limiter: LIMITER,
        errors: ERRORS,
        barrier,
        failures,
        limit: LIMIT,
        windowMs: WINDOW_MS,
        ips: IPS,
        attempts: ATTEMPTS,
      }),
    );
    untilReady(words, THREADS);
    Atomics.store(words, GO, 1);
    Atomics.notify(words, GO);
    const tallies = await Promise.all(threads.map((thread) => thread.done));

    expect(tallies.flatMap((tally) => tally.other)).toEqual([]);
    expect([...words.slice(COMPARED)]).toEqual(IPS.map(() => LIMIT));
    expect(tallies.reduce((sum, tally) => sum + tally.compared, 0)).toBe(IPS.length * LIMIT);
    expect(tallies.reduce((sum, tally) => sum + tally.refused, 0)).toBe(
      IPS.length * (THREADS * ATTEMPTS - LIMIT),
    );
    // This thread, opening the same buffer, finds every IP's budget spent too.
    const here = createAuthFailureLimiter({
      limit: LIMIT,
      windowMs: WINDOW_MS,
      sharedFailures: failures,
    });
    for (const ip of IPS)
      expect(here.refusalFor({ clientIp: ip })).toBeInstanceOf(RateLimitedError);
    here.shutdown();
  });
});
