import autocannon from 'autocannon';
import type { WrkResult } from './wrk';

/**
 * Fixed-rate latency with autocannon (`overallRate`): `rate` requests a second over
 * `connections` keep-alive connections, rotating through `headerSets` as the wrk scripts do.
 * autocannon paces by a per-connection quota each second (a connection sends its share one
 * request after another, then waits for the next second), so with one connection every request
 * is measured alone, without queueing behind another of the bench's. Its own histogram keeps whole
 * milliseconds; the latencies here are taken from each response's own time (hrtime, fractions of
 * a millisecond) and their percentiles computed exactly.
 */

export interface PacedOptions {
  readonly url: string;
  readonly path: string;
  readonly headerSets: readonly Readonly<Record<string, string>>[];
  readonly rate: number;
  readonly connections: number;
  readonly durationSeconds: number;
}

export function percentile(sorted: readonly number[], fraction: number): number {
  if (sorted.length === 0) return Number.NaN;
  const index = Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1);
  return sorted[Math.max(0, index)] ?? Number.NaN;
}

export async function runPaced(options: PacedOptions): Promise<WrkResult> {
  const latencies: number[] = [];
  const statuses: Record<number, number> = {};
  const instance = autocannon(
    {
      url: options.url,
      connections: options.connections,
      overallRate: options.rate,
      duration: options.durationSeconds,
      requests: options.headerSets.map((headers) => ({
        method: 'GET',
        path: options.path,
        headers: { ...headers },
      })),
    },
    () => undefined,
  );
  instance.on('response', (_client, statusCode, _bytes, responseTime) => {
    statuses[statusCode] = (statuses[statusCode] ?? 0) + 1;
    latencies.push(responseTime);
  });
  const result = await new Promise<autocannon.Result>((resolve) => {
    instance.on('done', resolve);
  });
  latencies.sort((a, b) => a - b);
  const requests = latencies.length;
  return {
    requests,
    requestsPerSecond: requests / options.durationSeconds,
    p50Ms: percentile(latencies, 0.5),
    p99Ms: percentile(latencies, 0.99),
    errorStatuses: Object.entries(statuses).reduce(
      (sum, [status, count]) => (Number(status) > 399 ? sum + count : sum),
      0,
    ),
    socketErrors: result.errors,
    statuses,
  };
}
