import { PerformanceObserver, constants, monitorEventLoopDelay } from 'node:perf_hooks';
import { GCProfiler, getHeapStatistics } from 'node:v8';
import { heapTraffic, type Pause } from '../gc-attribution';

/**
 * Preloaded into the gateway by the benches (`node --expose-gc -r probe.js server.js`; `npm run
 * bench` for its fixed-rate case): when the parent asks over the IPC channel it answers with the
 * process's memory (after a full collection), or with the longest event-loop delay since the last
 * such question, the collector's pauses and the bytes allocated on V8's heap and promoted to its
 * old generation over the same time. The gateway itself is unchanged;
 * without an IPC channel this file does nothing.
 */

/**
 * The histogram samples the loop every this many ms and records each whole interval, so an idle
 * loop reads about 10 ms; the answers subtract it, leaving how late the loop turned.
 */
const RESOLUTION_MS = 10;
/** Pauses kept between two questions; past this the oldest are dropped (and counted). */
const MAX_PAUSES = 20_000;

/** What V8 reports of a collection, as `kind` in the answer. */
function kindOf(code: number | undefined): string {
  switch (code) {
    case constants.NODE_PERFORMANCE_GC_MINOR:
      return 'minor';
    case constants.NODE_PERFORMANCE_GC_MAJOR:
      return 'major';
    case constants.NODE_PERFORMANCE_GC_INCREMENTAL:
      return 'incremental';
    case constants.NODE_PERFORMANCE_GC_WEAKCB:
      return 'weak';
    default:
      return 'other';
  }
}

if (process.send !== undefined) {
  const delay = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  const late = (nanoseconds: number): number => Math.max(0, nanoseconds / 1e6 - RESOLUTION_MS);
  delay.enable();
  // Started by the first 'loop' question, so that a process only asked about its memory keeps
  // no record of its collections.
  let profiler: GCProfiler | undefined;
  let startUsed = 0;
  // Each pause (`Pause`) has its start in ms since the epoch: the parent compares it
  // with its own requests' times.
  let pauses: Pause[] = [];
  let dropped = 0;
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      // `detail` (Node 16+) is not in every @types/node's PerformanceEntry.
      const { detail } = entry as { detail?: { kind?: number } };
      pauses.push([performance.timeOrigin + entry.startTime, entry.duration, kindOf(detail?.kind)]);
    }
    if (pauses.length > MAX_PAUSES) dropped += pauses.splice(0, pauses.length - MAX_PAUSES).length;
  }).observe({ entryTypes: ['gc'] });
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
      const endUsed = getHeapStatistics().used_heap_size;
      const traffic =
        profiler === undefined
          ? { allocated: 0, promoted: 0, toOld: 0 }
          : heapTraffic(startUsed, profiler.stop().statistics, endUsed);
      profiler = new GCProfiler();
      profiler.start();
      startUsed = getHeapStatistics().used_heap_size;
      process.send?.({
        kind: 'loop',
        maxMs: late(delay.max),
        p99Ms: late(delay.percentile(99)),
        pauses,
        droppedPauses: dropped,
        allocatedBytes: traffic.allocated,
        promotedBytes: traffic.promoted,
        toOldBytes: traffic.toOld,
      });
      delay.reset();
      pauses = [];
      dropped = 0;
    }
  });
  // The channel must not keep a gateway alive that is otherwise done.
  process.channel?.unref();
}
