import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * Preloaded into the gateway by the benches (`node --expose-gc -r probe.js server.js`; `npm run
 * bench` for its fixed-rate case): when the parent asks over the IPC channel it answers with the
 * process's memory (after a full collection), or with the longest event-loop delay since the last
 * such question. The gateway itself is unchanged; without an IPC channel this file does nothing.
 */

/**
 * The histogram samples the loop every this many ms and records each whole interval, so an idle
 * loop reads about 10 ms; the answers subtract it, leaving how late the loop turned.
 */
const RESOLUTION_MS = 10;

if (process.send !== undefined) {
  const delay = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  const late = (nanoseconds: number): number => Math.max(0, nanoseconds / 1e6 - RESOLUTION_MS);
  delay.enable();
  process.on('message', (message: unknown) => {
    if (message === 'memory') {
      const collect = (globalThis as { gc?: () => void }).gc;
      collect?.();
      collect?.();
      const usage = process.memoryUsage();
      process.send?.({
        kind: 'memory',
        rss: usage.rss,
        heapUsed: usage.heapUsed,
        external: usage.external,
        arrayBuffers: usage.arrayBuffers,
      });
    } else if (message === 'loop') {
      process.send?.({ kind: 'loop', maxMs: late(delay.max), p99Ms: late(delay.percentile(99)) });
      delay.reset();
    }
  });
  // The channel must not keep a gateway alive that is otherwise done.
  process.channel?.unref();
}
