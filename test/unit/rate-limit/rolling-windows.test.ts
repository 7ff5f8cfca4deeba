import type { CounterReading } from '../../../lib/rate-limit/compact-memory-store';
import { RollingWindows } from '../../../lib/rate-limit/rolling-windows';

/**
 * The in-memory rolling windows on a clock the test moves: an admission at `a` counts while the
 * clock is before `a + window` and not from then on, `freeAt()` names the moment a count is down
 * to what a limit leaves, a decrement takes back the newest admission, a clock that steps back
 * never puts an admission before an older one, and keys go when the window is over or past
 * `maxKeys`.
 */

const WINDOW_MS = 1000;
const START = Date.UTC(2026, 10, 27, 12, 0, 0, 0);

/** Windows on a clock that only moves when the test sets it, `START + ms`. */
function windowsAt(maxKeys?: number): {
  windows: RollingWindows;
  setClock: (ms: number) => void;
} {
  let now = START;
  const windows = new RollingWindows({ windowMs: WINDOW_MS, now: () => now, maxKeys });
  return {
    windows,
    setClock: (ms) => {
      now = START + ms;
    },
  };
}

function reading(): CounterReading {
  return { count: -1, resetAt: -1 };
}

function peekAt(windows: RollingWindows, key: string): CounterReading {
  const into = reading();
  windows.peek(key, into);
  return into;
}

/** Admits one request for `key` at `START + ms`, and the reading after it. */
function hitAt(
  windows: RollingWindows,
  setClock: (ms: number) => void,
  key: string,
  ms: number,
): CounterReading {
  setClock(ms);
  const into = reading();
  windows.hit(key, into);
  return into;
}

describe('RollingWindows', () => {
  it('counts an admission at a until a + window, and not from then on', () => {
    const { windows, setClock } = windowsAt();
    expect(hitAt(windows, setClock, 'k', 0)).toEqual({ count: 1, resetAt: START + WINDOW_MS });
    expect(hitAt(windows, setClock, 'k', 10)).toEqual({ count: 2, resetAt: START + WINDOW_MS });
    expect(hitAt(windows, setClock, 'k', 20)).toEqual({ count: 3, resetAt: START + WINDOW_MS });

    setClock(WINDOW_MS - 1);
    expect(peekAt(windows, 'k')).toEqual({ count: 3, resetAt: START + WINDOW_MS });
    setClock(WINDOW_MS);
    expect(peekAt(windows, 'k')).toEqual({ count: 2, resetAt: START + 10 + WINDOW_MS });
    setClock(WINDOW_MS + 9);
    expect(peekAt(windows, 'k')).toEqual({ count: 2, resetAt: START + 10 + WINDOW_MS });
    setClock(WINDOW_MS + 10);
    expect(peekAt(windows, 'k')).toEqual({ count: 1, resetAt: START + 20 + WINDOW_MS });
    setClock(WINDOW_MS + 20);
    // Empty: a new admission would start a whole window from now.
    expect(peekAt(windows, 'k')).toEqual({ count: 0, resetAt: START + 2 * WINDOW_MS + 20 });
  });

  it('keeps the admissions the window still holds when a new one comes: it rolls, never restarts', () => {
    const { windows, setClock } = windowsAt();
    hitAt(windows, setClock, 'k', 0);
    hitAt(windows, setClock, 'k', 500);
    // The first has left, the second is still inside: the count is 2 with this one, not 1.
    expect(hitAt(windows, setClock, 'k', WINDOW_MS)).toEqual({
      count: 2,
      resetAt: START + 500 + WINDOW_MS,
    });
  });

  it('freeAt(key, keep): when the count is down to keep, the (n - keep)th oldest admission leaving', () => {
    const { windows, setClock } = windowsAt();
    for (const ms of [0, 100, 200, 300]) hitAt(windows, setClock, 'k', ms);
    setClock(350);
    expect(windows.freeAt('k', 4)).toBe(START + 350);
    expect(windows.freeAt('k', 3)).toBe(START + WINDOW_MS);
    expect(windows.freeAt('k', 1)).toBe(START + 200 + WINDOW_MS);
    expect(windows.freeAt('k', 0)).toBe(START + 300 + WINDOW_MS);
    // No count is ever below zero: a whole window from now.
    expect(windows.freeAt('k', -1)).toBe(START + 350 + WINDOW_MS);
    expect(windows.freeAt('unknown', 0)).toBe(START + 350);

    // At the moment the oldest leaves, three are left: down to three now.
    setClock(WINDOW_MS);
    expect(windows.freeAt('k', 3)).toBe(START + WINDOW_MS);
    expect(windows.freeAt('k', 2)).toBe(START + 100 + WINDOW_MS);
  });

  it('decrement() takes back the newest admission, never below zero', () => {
    const { windows, setClock } = windowsAt();
    hitAt(windows, setClock, 'k', 0);
    hitAt(windows, setClock, 'k', 500);
    setClock(600);
    windows.decrement('k');
    expect(peekAt(windows, 'k')).toEqual({ count: 1, resetAt: START + WINDOW_MS });
    // Had the oldest been taken back, the one at 500 would still count here.
    setClock(WINDOW_MS);
    expect(peekAt(windows, 'k').count).toBe(0);

    windows.decrement('k');
    windows.decrement('never-admitted');
    expect(peekAt(windows, 'k').count).toBe(0);
    expect(peekAt(windows, 'never-admitted').count).toBe(0);
    expect(hitAt(windows, setClock, 'k', WINDOW_MS + 1).count).toBe(1);
  });

  it('a decrement down to zero leaves a count that a later admission starts from zero', () => {
    const { windows, setClock } = windowsAt();
    hitAt(windows, setClock, 'k', 0);
    windows.decrement('k');
    windows.decrement('k');
    expect(hitAt(windows, setClock, 'k', 10)).toEqual({
      count: 1,
      resetAt: START + 10 + WINDOW_MS,
    });
  });

  it('a clock that steps back stamps the newest time again: no admission goes before an older one', () => {
    const { windows, setClock } = windowsAt();
    hitAt(windows, setClock, 'k', 5000);
    expect(hitAt(windows, setClock, 'k', 3000)).toEqual({
      count: 2,
      resetAt: START + 5000 + WINDOW_MS,
    });
    hitAt(windows, setClock, 'k', 4000);
    // Stamped at 3000 and 4000, two of them would have left by now; stamped at 5000, none has.
    setClock(5000 + WINDOW_MS - 1);
    expect(peekAt(windows, 'k')).toEqual({ count: 3, resetAt: START + 5000 + WINDOW_MS });
    expect(windows.freeAt('k', 2)).toBe(START + 5000 + WINDOW_MS);
    setClock(5000 + WINDOW_MS);
    expect(peekAt(windows, 'k').count).toBe(0);
  });

  it('keeps the times in order through the growth of the ring and its wrap-around', () => {
    const { windows, setClock } = windowsAt();
    // 4, then 8, then 16 slots; the front leaves while the back is written, so the ring wraps.
    for (let ms = 0; ms < 3 * WINDOW_MS; ms += 100) {
      const after = hitAt(windows, setClock, 'k', ms);
      const inside = Math.min(ms / 100 + 1, WINDOW_MS / 100);
      const oldest = ms - (inside - 1) * 100;
      expect(after).toEqual({ count: inside, resetAt: START + oldest + WINDOW_MS });
    }
  });

  it('past maxKeys drops the key admitted longest ago', () => {
    const { windows, setClock } = windowsAt(3);
    hitAt(windows, setClock, 'a', 0);
    hitAt(windows, setClock, 'b', 0);
    hitAt(windows, setClock, 'c', 0);
    hitAt(windows, setClock, 'd', 1);
    expect(windows.size).toBe(3);
    expect(peekAt(windows, 'a').count).toBe(0);
    expect(peekAt(windows, 'b').count).toBe(1);

    // b's newest admission is now the latest, so c goes next.
    hitAt(windows, setClock, 'b', 2);
    hitAt(windows, setClock, 'e', 3);
    expect(windows.size).toBe(3);
    expect(peekAt(windows, 'c').count).toBe(0);
    expect(peekAt(windows, 'b').count).toBe(2);
    expect(peekAt(windows, 'd').count).toBe(1);
    expect(peekAt(windows, 'e').count).toBe(1);
  });

  it('sweeps keys whose window is over as admissions come, and keeps the ones still inside', () => {
    const { windows, setClock } = windowsAt();
    for (let n = 0; n < 10; n++) hitAt(windows, setClock, `old-${n}`, 0);
    hitAt(windows, setClock, 'live', 500);
    expect(windows.size).toBe(11);

    hitAt(windows, setClock, 'fresh', WINDOW_MS);
    const afterOne = windows.size;
    expect(afterOne).toBeLessThan(11);
    // A few keys go on each admission: enough admissions, and every expired key is gone.
    for (let n = 0; n < 10 && windows.size > 2; n++) hitAt(windows, setClock, 'fresh', WINDOW_MS);
    expect(windows.size).toBe(2);
    expect(peekAt(windows, 'live')).toEqual({ count: 1, resetAt: START + 500 + WINDOW_MS });

    // A peek drops an expired key too.
    setClock(500 + WINDOW_MS);
    expect(peekAt(windows, 'live').count).toBe(0);
    expect(windows.size).toBe(1);
  });

  it('resetKey() and shutdown() forget counts', () => {
    const { windows, setClock } = windowsAt();
    hitAt(windows, setClock, 'a', 0);
    hitAt(windows, setClock, 'b', 0);
    windows.resetKey('a');
    expect(peekAt(windows, 'a').count).toBe(0);
    expect(windows.size).toBe(1);
    windows.shutdown();
    expect(windows.size).toBe(0);
  });
});
