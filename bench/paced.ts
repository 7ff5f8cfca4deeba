import type { TimedRequest } from './gc-attribution';
import { percentile, startStreamProcess } from './paced-stream';
import type { WrkResult } from './wrk';

/**
 * Latency at a fixed rate, wrk2's way: `rate` requests a second, each due at its own moment
 * (`1000 / rate` ms apart) whether or not the one before has been answered, on as many keep-alive
 * connections as the stream needs, sent from a process of its own (paced-stream.ts). Each
 * latency is counted from when the request was due, not from when it went out, so a stall is
 * charged in full to every request held up behind it (no coordinated omission).
 *
 * Not autocannon: its `overallRate` is a quota per connection and second (httpClient.js resets a
 * counter each second and sends until the quota is spent), so one connection sends its thousand
 * requests back to back and then idles, and more connections send theirs in bursts that queue
 * behind each other. wrk2 itself is not packaged in Debian.
 */

export interface PacedOptions {
  readonly url: string;
  readonly path: string;
  readonly headerSets: readonly Readonly<Record<string, string>>[];
  readonly rate: number;
  /** Sent first and not measured. */
  readonly warmupSeconds: number;
  readonly durationSeconds: number;
}

export interface PacedResult extends WrkResult {
  /** Every measured request, times in ms since the epoch. */
  readonly samples: readonly TimedRequest[];
}

export async function runPaced(options: PacedOptions): Promise<PacedResult> {
  const stream = await startStreamProcess(
    new URL(options.path, options.url).href,
    options.headerSets,
    options.rate,
  );
  await sleep(options.warmupSeconds * 1000);
  const from = performance.now();
  await sleep(options.durationSeconds * 1000);
  const to = performance.now();
  const measured = (await stream.stop()).filter((sent) => sent.dueAt >= from && sent.dueAt < to);
  const latencies = measured.map((sent) => sent.doneAt - sent.dueAt).sort((a, b) => a - b);
  const statuses: Record<number, number> = {};
  for (const { status } of measured) statuses[status] = (statuses[status] ?? 0) + 1;
  return {
    requests: measured.length,
    requestsPerSecond: measured.length / options.durationSeconds,
    p50Ms: percentile(latencies, 0.5),
    p99Ms: percentile(latencies, 0.99),
    errorStatuses: measured.filter((sent) => sent.status > 399).length,
    socketErrors: statuses[0] ?? 0,
    statuses,
    samples: measured.map((sent) => ({
      dueAt: performance.timeOrigin + sent.dueAt,
      doneAt: performance.timeOrigin + sent.doneAt,
    })),
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
