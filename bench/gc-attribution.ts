/**
 * How much of a fixed-rate round's tail the gateway's garbage collector accounts for: the requests
 * at or above the round's p99 that were in flight while the collector paused the gateway's thread,
 * against the share of all requests that were. When the slowest requests overlap pauses far more
 * often than requests at large, the pauses are what makes the tail.
 */

/** A request of the round, times in ms since the epoch. */
export interface TimedRequest {
  readonly dueAt: number;
  readonly doneAt: number;
}

/** A pause of the collector: `[start, duration, kind]`, start in ms since the epoch. */
export type Pause = readonly [start: number, durationMs: number, kind: string];

export interface GcAttribution {
  readonly requests: number;
  /** Pauses that began within the round's requests (from the first due to the last done). */
  readonly pauses: number;
  readonly pausedMs: number;
  readonly longestMs: number;
  /** Full (mark-compact) collections among them. */
  readonly major: number;
  /** Requests whose wait was at least `tailMs`. */
  readonly slowest: number;
  /** Of those, how many were in flight during a pause. */
  readonly slowestDuringPause: number;
  /** Requests at large in flight during a pause. */
  readonly duringPause: number;
}

export function attributeToPauses(
  requests: readonly TimedRequest[],
  pauses: readonly Pause[],
  tailMs: number,
): GcAttribution {
  const first = Math.min(...requests.map((r) => r.dueAt));
  const last = Math.max(...requests.map((r) => r.doneAt));
  const within = pauses
    .filter(([start]) => start >= first && start <= last)
    .map(([start, ms, kind]) => ({ start, end: start + ms, ms, kind }));
  const duringPause = (request: TimedRequest): boolean =>
    within.some((pause) => pause.start < request.doneAt && pause.end > request.dueAt);
  const slowest = requests.filter((r) => r.doneAt - r.dueAt >= tailMs);
  return {
    requests: requests.length,
    pauses: within.length,
    pausedMs: within.reduce((sum, pause) => sum + pause.ms, 0),
    longestMs: within.reduce((most, pause) => Math.max(most, pause.ms), 0),
    major: within.filter((pause) => pause.kind === 'major').length,
    slowest: slowest.length,
    slowestDuringPause: slowest.filter(duringPause).length,
    duringPause: requests.filter(duringPause).length,
  };
}

/** One line of the report; `subject` names the process whose collector it was. */
export function describeAttribution(a: GcAttribution, subject = 'the gateway'): string {
  const share = (part: number, whole: number): string =>
    whole === 0 ? '-' : `${((100 * part) / whole).toFixed(0)}%`;
  return (
    `${subject}'s collector paused it ${a.pauses} times (${a.pausedMs.toFixed(1)} ms in all, the longest ` +
    `${a.longestMs.toFixed(1)} ms, ${a.major} full collection(s)); ${a.slowestDuringPause} of the ` +
    `${a.slowest} requests at or above the round's p99 were in flight during a pause ` +
    `(${share(a.slowestDuringPause, a.slowest)}), against ${share(a.duringPause, a.requests)} of all requests`
  );
}

/** The heap as `GCProfiler` reports it around a collection (only the fields read here). */
interface HeapReading {
  readonly heapStatistics: { readonly usedHeapSize: number };
  readonly heapSpaceStatistics: readonly {
    readonly spaceName: string;
    readonly spaceUsedSize: number;
  }[];
}

/** One collection as `GCProfiler` reports it. */
export interface GcRecord {
  readonly gcType: string;
  readonly beforeGC: HeapReading;
  readonly afterGC: HeapReading;
}

const YOUNG_SPACES: ReadonlySet<string> = new Set(['new_space', 'new_large_object_space']);

/** Bytes in use outside the young generation. */
function oldUsed(reading: HeapReading): number {
  let used = reading.heapStatistics.usedHeapSize;
  for (const space of reading.heapSpaceStatistics) {
    if (YOUNG_SPACES.has(space.spaceName)) used -= space.spaceUsedSize;
  }
  return used;
}

/**
 * Bytes allocated on V8's heap between two readings of its used size (`startUsed`, `endUsed`), from
 * the used size before each collection less the size after the one before; and bytes that reached
 * the old generation, which is what brings on full collections: what each young-generation
 * collection moved there (promoted), plus what grew there between collections (objects V8
 * allocates there directly: pretenured allocation sites, large objects). The second is a lower
 * bound: the concurrent sweeper may free old-generation bytes between two readings.
 */
export function heapTraffic(
  startUsed: number,
  records: readonly GcRecord[],
  endUsed: number,
): { allocated: number; promoted: number; toOld: number } {
  let allocated = 0;
  let promoted = 0;
  let direct = 0;
  let previous: HeapReading | undefined;
  let previousUsed = startUsed;
  for (const record of records) {
    allocated += Math.max(0, record.beforeGC.heapStatistics.usedHeapSize - previousUsed);
    if (previous !== undefined) {
      direct += Math.max(0, oldUsed(record.beforeGC) - oldUsed(previous));
    }
    if (record.gcType === 'Scavenge' || record.gcType === 'MinorMarkSweep') {
      promoted += Math.max(0, oldUsed(record.afterGC) - oldUsed(record.beforeGC));
    }
    previous = record.afterGC;
    previousUsed = record.afterGC.heapStatistics.usedHeapSize;
  }
  allocated += Math.max(0, endUsed - previousUsed);
  return { allocated, promoted, toOld: promoted + direct };
}
