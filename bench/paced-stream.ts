import { fork } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';

/**
 * A steady stream of requests at `rate` per second, each measured from the moment it was due to
 * be sent, not from when it went out: when the gateway stalls, the requests that pile up behind
 * the stall are charged their whole wait (no coordinated omission). Keep-alive connections, as
 * many as the stream needs.
 */

/** The value at `fraction` (0 to 1) of an ascending list, nearest rank. */
export function percentile(sorted: readonly number[], fraction: number): number {
  if (sorted.length === 0) return Number.NaN;
  const index = Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1);
  return sorted[Math.max(0, index)] ?? Number.NaN;
}

export interface Sent {
  readonly dueAt: number;
  readonly doneAt: number;
  readonly status: number;
}

export interface Stream {
  /** Stops sending; resolves with every request once all are answered (or failed: status 0). */
  stop(): Promise<Sent[]>;
}

export function startStream(
  url: string,
  headerSets: readonly Readonly<Record<string, string>>[],
  rate: number,
): Stream {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  const started = performance.now();
  const results: Sent[] = [];
  const pending = new Set<Promise<void>>();
  let sent = 0;
  let stopped = false;
  const send = (dueAt: number): void => {
    const headers = headerSets[sent % headerSets.length] ?? {};
    const request = new Promise<void>((resolve) => {
      const req = http.get(url, { agent, headers }, (res) => {
        res.resume();
        res.on('end', () => {
          results.push({ dueAt, doneAt: performance.now(), status: res.statusCode ?? 0 });
          resolve();
        });
      });
      req.on('error', () => {
        results.push({ dueAt, doneAt: performance.now(), status: 0 });
        resolve();
      });
    });
    pending.add(request);
    void request.then(() => pending.delete(request));
  };
  const tick = (): void => {
    if (stopped) return;
    const due = Math.floor(((performance.now() - started) * rate) / 1000);
    while (sent < due) {
      send(started + (sent * 1000) / rate);
      sent++;
    }
    setTimeout(tick, 1);
  };
  tick();
  return {
    async stop() {
      stopped = true;
      await Promise.all(pending);
      agent.destroy();
      return results;
    },
  };
}

/**
 * `startStream` in a child process (paced-stream-child.ts), so that nothing the bench's own process
 * does (its garbage collections over a million generated keys) delays a request. Resolves once
 * the stream is sending; `stop()` gives the requests in this process's `performance.now()` clock.
 */
export async function startStreamProcess(
  url: string,
  headerSets: readonly Readonly<Record<string, string>>[],
  rate: number,
): Promise<Stream> {
  const child = fork(path.join(__dirname, 'paced-stream-child.js'), [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const next = (): Promise<unknown> =>
    new Promise((resolve, reject) => {
      child.once('message', resolve);
      child.once('exit', (code) => {
        reject(new Error(`the traffic process exited with ${code}`));
      });
    });
  const started = next();
  child.send({ url, headerSets, rate });
  await started;
  return {
    async stop() {
      const answer = next();
      child.send('stop');
      const sent = (await answer) as [number, number, number][];
      const origin = performance.timeOrigin;
      return sent.map(([dueAt, doneAt, status]) => ({
        dueAt: dueAt - origin,
        doneAt: doneAt - origin,
        status,
      }));
    },
  };
}

export interface Waits {
  readonly requests: number;
  readonly worstMs: number;
  readonly p99Ms: number;
  readonly p50Ms: number;
  /** Answers other than 200. */
  readonly others: number;
}

/** The waits of the requests due between `from` and `to` (performance.now() times). */
export function waitsBetween(sent: readonly Sent[], from: number, to: number): Waits {
  const window = sent.filter((s) => s.dueAt >= from && s.dueAt <= to);
  const waits = window.map((s) => s.doneAt - s.dueAt).sort((a, b) => a - b);
  return {
    requests: window.length,
    worstMs: waits[waits.length - 1] ?? Number.NaN,
    p99Ms: percentile(waits, 0.99),
    p50Ms: percentile(waits, 0.5),
    others: window.filter((s) => s.status !== 200).length,
  };
}
