/**
 * Preloaded into the gateway by the keys bench (`node --expose-gc -r probe.js server.js`): when
 * the parent asks over the IPC channel, it collects garbage and answers with the process's memory.
 * The gateway itself is unchanged; without an IPC channel this file does nothing.
 */
if (process.send !== undefined) {
  process.on('message', (message: unknown) => {
    if (message !== 'memory') return;
    const collect = (globalThis as { gc?: () => void }).gc;
    collect?.();
    collect?.();
    const usage = process.memoryUsage();
    process.send?.({
      rss: usage.rss,
      heapUsed: usage.heapUsed,
      external: usage.external,
      arrayBuffers: usage.arrayBuffers,
    });
  });
  // The channel must not keep a gateway alive that is otherwise done.
  process.channel?.unref();
}
