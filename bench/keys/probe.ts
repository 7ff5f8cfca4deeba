import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * Preloaded into the gateway by the keys bench (`node --expose-gc -r probe.js server.js`): when
 * the parent asks over the IPC channel it answers with the process's memory (after a full
 * collection), or with the longest event-loop delay since the last such question. The gateway
 * itself is unchanged; without an IPC channel this file does nothing.
 */
if (process.send !== undefined) {
  const delay = monitorEventLoopDelay({ resolution: 10 });
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
      process.send?.({ kind: 'loop', maxMs: delay.max / 1e6, p99Ms: delay.percentile(99) / 1e6 });
      delay.reset();
    }
  });
  // The channel must not keep a gateway alive that is otherwise done.
  process.channel?.unref();
}
