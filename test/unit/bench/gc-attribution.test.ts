import { attributeToPauses, describeAttribution } from '../../../bench/gc-attribution';

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
  });
});
