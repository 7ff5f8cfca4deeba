import type { MessagePort } from 'node:worker_threads';
import { checkOptions, type OptionChecks, wholeNumber } from '../options';
import {
  createSharedCountersBuffer,
  MAX_SHARED_KEYS,
  MAX_SHARED_TIMES,
} from '../rate-limit/shared-counters';
import { createFailureBudgetBuffer, trackedIpsWithin } from '../rate-limit/shared-failure-log';
import { DEFAULT_WINDOW_MS, MAX_LIMIT, MAX_WINDOW_MS, MIN_WINDOW_MS } from '../rate-limit/window';
import { DEFAULT_AUTH_FAILURE_LIMIT } from '../rate-limit/auth-failures';
import { HostState } from './host-state';

export interface ThreadShareOptions {
  /** The gates' `authFailureLimit`. Defaults to 20. */
  readonly authFailureLimit?: number | undefined;
  /** The gates' `windowMs`. Defaults to 60 000. */
  readonly windowMs?: number | undefined;
  /**
   * Client addresses whose failures are kept at most. Defaults to 100 000, or fewer when the
   * budget is large: the shared memory holds each address's failure times, and is kept within
   * 64 MiB: 100 000 addresses up to a budget of 55 failures, 50 000 up to 119, 6 250 at 1 000.
   */
  readonly maxTrackedIps?: number | undefined;
  /**
   * Keys the in-memory limits keep at most, over every scope: past it the key admitted longest
   * ago is forgotten. Defaults to 1 000 000 (112 bytes each).
   */
  readonly maxCountedKeys?: number | undefined;
  /**
   * Admission times the rolling windows keep at most, over every key: a key keeps one per
   * admission still inside its window. Past it the key admitted longest ago is forgotten. At
   * least 1 000 000, the highest limit; defaults to 16 777 216 (8 bytes each).
   */
  readonly maxCountedTimes?: number | undefined;
}

/**
 * One worker's share: post it to the worker with `link.port` in the transfer list
 * (`new Worker(file, { workerData: { link }, transferList: [link.port] })`), and pass it there to
 * `tollgate({ threads: link })`. Each link serves one worker.
 */
export interface ThreadLink {
  /** The worker's end of its channel to the main thread, which keeps the in-memory counts. */
  readonly port: MessagePort;
  /** The failure budget, in memory every thread of the process reads and writes. */
  readonly failures: SharedArrayBuffer;
  /** The in-memory limits, in memory every thread of the process reads and writes. */
  readonly counters: SharedArrayBuffer;
}

/** The failure budget's shared memory, at most, unless `maxTrackedIps` asks for more. */
const DEFAULT_BUDGET_BYTES = 64 * 2 ** 20;
const DEFAULT_MAX_TRACKED_IPS = 100_000;

const THREAD_SHARE_OPTION_CHECKS: OptionChecks<ThreadShareOptions> = {
  authFailureLimit: wholeNumber(1),
  windowMs: wholeNumber(MIN_WINDOW_MS, MAX_WINDOW_MS),
  maxTrackedIps: wholeNumber(1),
  maxCountedKeys: wholeNumber(1, MAX_SHARED_KEYS),
  // A key at the highest limit always fits.
  maxCountedTimes: wholeNumber(MAX_LIMIT, MAX_SHARED_TIMES),
};

/**
 * What the worker threads of one process share, so that their gates decide as one: made once on
 * the main thread, one `link()` handed to each worker, passed there to `tollgate({ threads })`.
 *
 * - Limits counted in memory (no Redis, or Redis unusable) are memory every thread reads and
 *   writes: each thread decides its own admissions, each in one step under the counters' lock, so
 *   a limit admits exactly its count whatever thread each request reaches. Memory is taken as
 *   keys and admission times use it (`maxCountedKeys`, `maxCountedTimes`).
 * - The failed-authentication budget is memory every thread reads and writes under a lock per
 *   client address: the check, the comparison and the count of a failure happen as one step, so
 *   the process compares at most the budget per address in any window.
 * - `Idempotency-Key` records kept in memory live on the main thread: each worker sends the
 *   claims of one event-loop turn there in one message, and the main thread runs each in one
 *   step, so one claim of a key wins whatever thread its requests reach.
 *
 * With Redis, limits and records are Redis's, shared by every process; only the budget's local
 * step is shared this way. With idempotency in memory, the main thread must stay alive, and
 * responsive, while workers serve.
 */
export class ThreadShare {
  private readonly host = new HostState();
  private readonly failures: SharedArrayBuffer;
  private readonly counters: SharedArrayBuffer;

  constructor(options: ThreadShareOptions = {}) {
    checkOptions('ThreadShare', options, THREAD_SHARE_OPTION_CHECKS);
    const limit = options.authFailureLimit ?? DEFAULT_AUTH_FAILURE_LIMIT;
    this.failures = createFailureBudgetBuffer({
      limit,
      windowMs: options.windowMs ?? DEFAULT_WINDOW_MS,
      maxTrackedIps:
        options.maxTrackedIps ??
        trackedIpsWithin(limit, DEFAULT_BUDGET_BYTES, DEFAULT_MAX_TRACKED_IPS),
    });
    this.counters = createSharedCountersBuffer({
      maxKeys: options.maxCountedKeys,
      maxTimes: options.maxCountedTimes,
    });
  }

  /** A link for one more worker. */
  link(): ThreadLink {
    return { port: this.host.connect(), failures: this.failures, counters: this.counters };
  }

  /** Closes every link and forgets every count and record. */
  close(): void {
    this.host.close();
  }
}
