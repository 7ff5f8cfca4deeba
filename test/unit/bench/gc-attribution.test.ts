import {
  attributeToPauses,
  describeAttribution,
  type GcRecord,
  heapTraffic,
} from '../../../bench/gc-attribution';

describe('attributeToPauses', () => {
  const requests = [
    { dueAt: 1000, doneAt: 1002 },
    { dueAt: 1001, doneAt: 1003 },
    { dueAt: 1002, doneAt: 1020 },
    { dueAt: 1003, doneAt: 1021 },
    { dueAt: 1030, doneAt: 1032 },
    { dueAt: 1040, doneAt: 1050 },
  ];

  it('counts the slowest requests in flight during a pause, and all requests', () => {
    const attribution = attributeToPauses(
      requests,
      [
        [900, 5, 'minor'], // before the round: left out
        [1005, 12, 'major'], // the two 18 ms requests
        [1032, 1, 'minor'], // touches the end of a request only: not during it
        [1045, 2, 'minor'], // the 10 ms request
        [2000, 3, 'minor'], // after the round: left out
      ],
      10,
    );
    expect(attribution).toEqual({
      requests: 6,
      pauses: 3,
      pausedMs: 15,
      longestMs: 12,
      major: 1,
      slowest: 3,
      slowestDuringPause: 3,
      duringPause: 3,
    });
    expect(describeAttribution(attribution)).toBe(
      "the gateway's collector paused it 3 times (15.0 ms in all, the longest 12.0 ms, 1 full collection(s)); " +
        "3 of the 3 requests at or above the round's p99 were in flight during a pause (100%), against 50% of all requests",
    );
  });

  it('finds nothing to attribute when there was no pause', () => {
    const attribution = attributeToPauses(requests, [], 10);
    expect(attribution.slowest).toBe(3);
    expect(attribution.slowestDuringPause).toBe(0);
    expect(attribution.duringPause).toBe(0);
    expect(describeAttribution(attribution)).toContain('(0%), against 0% of all requests');
    expect(describeAttribution(attribution, 'the floor')).toMatch(
      /^the floor's collector paused it 0 times/,
    );
  });
});

describe('heapTraffic', () => {
  /** A heap reading of `used` bytes, `young` of them in the young generation. */
  const reading = (used: number, young: number): GcRecord['beforeGC'] => ({
    heapStatistics: { usedHeapSize: used },
    heapSpaceStatistics: [
      { spaceName: 'new_space', spaceUsedSize: young },
      { spaceName: 'old_space', spaceUsedSize: used - young },
    ],
  });

  it('sums what was allocated between collections and what reached the old generation', () => {
    const records: GcRecord[] = [
      // 1,000 bytes in use at the start; 9,000 allocated before this scavenge, 500 promoted.
      { gcType: 'Scavenge', beforeGC: reading(10_000, 9_000), afterGC: reading(2_000, 500) },
      // 6,000 more allocated, 2,000 of them in the old generation directly (1,500 old after the
      // scavenge, 3,500 before this); a full collection promotes nothing by this count.
      { gcType: 'MarkSweepCompact', beforeGC: reading(8_000, 4_500), afterGC: reading(1_200, 0) },
      // 2,800 more, all young; the scavenge moves 300 bytes into the old generation.
      { gcType: 'Scavenge', beforeGC: reading(4_000, 2_800), afterGC: reading(1_500, 0) },
    ];
    // 700 bytes more after the last collection.
    expect(heapTraffic(1_000, records, 2_200)).toEqual({
      allocated: 9_000 + 6_000 + 2_800 + 700,
      promoted: 500 + 300,
      toOld: 500 + 2_000 + 300,
    });
  });

  it('counts nothing when the heap shrank between readings without a collection seen', () => {
    expect(heapTraffic(5_000, [], 4_000)).toEqual({ allocated: 0, promoted: 0, toOld: 0 });
  });
});
