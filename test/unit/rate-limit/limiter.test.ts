import { DEFAULT_WINDOW_MS, retryAfterSeconds } from '../../../lib/rate-limit/window';

const NOW = 1_750_000_000_000;
const WINDOW_MS = DEFAULT_WINDOW_MS;

describe('retryAfterSeconds', () => {
  it.each([
    ['the reset one whole minute away', NOW + 60_000, 60],
    ['the reset 1 ms away', NOW + 1, 1],
    ['the reset 1001 ms away (rounds up, never early)', NOW + 1001, 2],
    ['the reset 59 001 ms away', NOW + 59_001, 60],
    ['the reset exactly now', NOW, 1],
    ['the reset already past', NOW - 5_000, 1],
    ['the reset given as a Date', new Date(NOW + 2500), 3],
    ['no reset time: a whole window', undefined, WINDOW_MS / 1000],
  ] as [string, Date | number | undefined, number][])('%s: %i', (_what, resetTime, expected) => {
    expect(retryAfterSeconds(resetTime, WINDOW_MS, NOW)).toBe(expected);
  });

  it('uses the window it is given when the reset time is unknown', () => {
    expect(retryAfterSeconds(undefined, 90_500, NOW)).toBe(91);
  });

  it('is a whole number of seconds of at least 1 for any reset time', () => {
    for (let offset = -3000; offset <= 3000; offset += 7) {
      const seconds = retryAfterSeconds(NOW + offset, WINDOW_MS, NOW);
      expect(Number.isInteger(seconds)).toBe(true);
      expect(seconds).toBeGreaterThanOrEqual(1);
      expect(NOW + seconds * 1000).toBeGreaterThanOrEqual(NOW + offset);
    }
  });
});
