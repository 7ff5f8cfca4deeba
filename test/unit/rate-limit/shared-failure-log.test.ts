import { AuthenticationError, ConfigurationError, RateLimitedError } from '../../../lib/errors';
import { createAuthFailureLimiter } from '../../../lib/rate-limit/auth-failures';
import {
  createFailureBudgetBuffer,
  STALE_LOCK_MS,
  SharedFailureLog,
  WAYS,
} from '../../../lib/rate-limit/shared-failure-log';

/**
 * The failure log in a SharedArrayBuffer, in one thread: which way a full bucket gives up, keys
 * longer than their field, buffers made for another budget, and locks released whatever the
 * comparison does. Its answers against the log in memory are in
 * test/property/shared-failure-log.test.ts; threads racing on one buffer in
 * shared-failure-threads.test.ts.
 */

const WINDOW_MS = 60_000;
const T0 = 1_764_300_000_000;

/** A log of one bucket: every key lands in the same `WAYS` ways. */
function oneBucket(limit: number): SharedFailureLog {
  const shape = { limit, windowMs: WINDOW_MS };
  return new SharedFailureLog(createFailureBudgetBuffer({ ...shape, maxTrackedIps: WAYS }), shape);
}

function ips(count: number, prefix = '192.0.2.'): string[] {
  return Array.from({ length: count }, (_, index) => `${prefix}${index + 1}`);
}

describe('a full bucket of the shared log', () => {
  it('gives up a key whose newest failure has left the window before any live one', () => {
    const log = oneBucket(2);
    const early = ips(4, '192.0.2.');
    const live = ips(4, '198.51.100.');
    for (const key of early) log.count(key, T0);
    for (const key of live) log.count(key, T0 + WINDOW_MS / 2);
    // The early ones have left the window; four newcomers take their ways.
    for (const key of ips(4, '203.0.113.')) log.count(key, T0 + WINDOW_MS);

    // Each live key still holds its first failure: a second one spends its budget.
    for (const key of live) {
      log.count(key, T0 + WINDOW_MS);
      expect(log.spentUntil(key, T0 + WINDOW_MS)).toBe(T0 + WINDOW_MS / 2 + WINDOW_MS);
    }
  });

  it('gives up the live key whose newest failure is the oldest', () => {
    const log = oneBucket(2);
    const keys = ips(WAYS);
    keys.forEach((key, index) => {
      log.count(key, T0 + index);
    });
    log.count('203.0.113.1', T0 + WAYS);

    // The newest kept its failure; the oldest lost it.
    log.count(keys[WAYS - 1]!, T0 + WAYS);
    expect(log.spentUntil(keys[WAYS - 1]!, T0 + WAYS)).toBe(T0 + WAYS - 1 + WINDOW_MS);
    log.count(keys[0]!, T0 + WAYS);
    expect(log.spentUntil(keys[0]!, T0 + WAYS)).toBeUndefined();
  });

  it('keeps a spent budget while single failures from many other keys arrive', () => {
    const log = oneBucket(3);
    const guesser = '198.51.100.1';
    for (let i = 0; i < 3; i++) log.count(guesser, T0);

    ips(50).forEach((key, index) => {
      log.count(key, T0 + 1 + index);
    });

    expect(log.spentUntil(guesser, T0 + 100)).toBe(T0 + WINDOW_MS);
  });

  it('gives up the spent budget whose newest failure is the oldest when all are spent', () => {
    const log = oneBucket(1);
    const keys = ips(WAYS + 1);
    keys.forEach((key, index) => {
      log.count(key, T0 + index);
    });
    const at = T0 + WAYS + 1;

    expect(log.spentUntil(keys[0]!, at)).toBeUndefined();
    keys.slice(1).forEach((key, index) => {
      expect(log.spentUntil(key, at)).toBe(T0 + index + 1 + WINDOW_MS);
    });
  });
});

describe('a bucket with room', () => {
  it('keeps a key whose window is over, so a clock that steps back still finds it spent', () => {
    const log = oneBucket(1);
    const [first, second] = ips(2);
    log.count(first ?? '', T0);
    // The first key's failure leaves the window as the second one is counted.
    log.count(second ?? '', T0 + WINDOW_MS);
    expect(log.spentUntil(first ?? '', T0 + WINDOW_MS - 1)).toBe(T0 + WINDOW_MS);
    expect(log.spentUntil(second ?? '', T0 + WINDOW_MS - 1)).toBe(T0 + 2 * WINDOW_MS);
  });
});

describe('keys of the shared log', () => {
  it('tells apart long keys that differ only past their field, and keys that are not ASCII', () => {
    const log = oneBucket(1);
    const long = 'x'.repeat(200);
    const keys = [`${long}a`, `${long}b`, 'адрес', 'адрес2', '', 'unknown'];
    for (const key of keys) {
      expect(log.spentUntil(key, T0)).toBeUndefined();
      log.count(key, T0);
      expect(log.spentUntil(key, T0)).toBe(T0 + WINDOW_MS);
    }
    // Each count spent its own key only: a fresh log sees the others untouched.
    const other = oneBucket(1);
    other.count(`${long}a`, T0);
    expect(other.spentUntil(`${long}b`, T0)).toBeUndefined();
    expect(other.spentUntil(long, T0)).toBeUndefined();
  });

  it('stores the longest IPv6 network key as it is', () => {
    const log = oneBucket(1);
    const network = 'ffff:ffff:ffff:ff00::/56';
    log.count(network, T0);
    expect(log.spentUntil(network, T0)).toBe(T0 + WINDOW_MS);
    expect(log.spentUntil('ffff:ffff:ffff:fe00::/56', T0)).toBeUndefined();
  });
});

describe('opening a shared buffer', () => {
  const buffer = createFailureBudgetBuffer({ limit: 5, windowMs: WINDOW_MS, maxTrackedIps: 64 });

  it('refuses a buffer made for another limit or window, naming both', () => {
    expect(() => new SharedFailureLog(buffer, { limit: 6, windowMs: WINDOW_MS })).toThrow(
      ConfigurationError,
    );
    expect(() =>
      createAuthFailureLimiter({ limit: 5, windowMs: 30_000, sharedFailures: buffer }),
    ).toThrow(
      'sharedFailures: the buffer was made for limit 5 and windowMs 60000, and this budget ' +
        'counts limit 5 in windowMs 30000',
    );
    // The limiter's defaults (20 per 60 s) are not this buffer's.
    expect(() => createAuthFailureLimiter({ sharedFailures: buffer })).toThrow(/limit 20/);
  });

  it('refuses another maxTrackedIps when one is given, and takes the buffer’s otherwise', () => {
    expect(() =>
      createAuthFailureLimiter({
        limit: 5,
        windowMs: WINDOW_MS,
        maxTrackedIps: 100,
        sharedFailures: buffer,
      }),
    ).toThrow(/maxTrackedIps 64, not 100/);
    createAuthFailureLimiter({
      limit: 5,
      windowMs: WINDOW_MS,
      maxTrackedIps: 64,
      sharedFailures: buffer,
    }).shutdown();
  });

  it('refuses a buffer a ThreadShare did not make, or a layout it does not make', () => {
    const shape = { limit: 5, windowMs: WINDOW_MS };
    expect(() => new SharedFailureLog(new SharedArrayBuffer(4096), shape)).toThrow(
      /not made by a ThreadShare of this version/,
    );
    expect(() => new SharedFailureLog(new SharedArrayBuffer(8), shape)).toThrow(ConfigurationError);
    const resized = createFailureBudgetBuffer({ ...shape, maxTrackedIps: 64 });
    new Uint32Array(resized)[5] = 1024; // the bucket count
    expect(() => new SharedFailureLog(resized, shape)).toThrow(/not laid out/);
    expect(() =>
      createAuthFailureLimiter({ ...shape, sharedFailures: new ArrayBuffer(64) as never }),
    ).toThrow('sharedFailures must be a SharedArrayBuffer of a ThreadShare link (its failures)');
  });

  it('refuses to make a buffer past its largest size, or without a limit and window', () => {
    expect(() =>
      createFailureBudgetBuffer({ limit: 100_000, windowMs: WINDOW_MS, maxTrackedIps: 100_000 }),
    ).toThrow(/lower limit or maxTrackedIps/);
    expect(() => createFailureBudgetBuffer({ limit: 5 } as never)).toThrow(/windowMs is required/);
  });

  it('sizes the table from maxTrackedIps, in buckets of eight ways, a power of two', () => {
    const header = (tracked: number): Uint32Array =>
      new Uint32Array(
        createFailureBudgetBuffer({ limit: 20, windowMs: WINDOW_MS, maxTrackedIps: tracked }),
        0,
        16,
      );
    expect([header(1)[5], header(8)[5], header(9)[5], header(100_000)[5]]).toEqual([
      1, 1, 2, 16_384,
    ]);
    expect(header(100_000)[6]).toBe(WAYS);
  });
});

describe('the locks of the shared buffer', () => {
  /** Every bucket lock of a buffer of `maxTrackedIps` 64 (8 buckets), after the 64-byte header. */
  const locksOf = (buffer: SharedArrayBuffer): number[] => [...new Int32Array(buffer, 64, 8)];

  it('are all free after attempts that compare, throw, refuse and return', () => {
    const buffer = createFailureBudgetBuffer({ limit: 2, windowMs: WINDOW_MS, maxTrackedIps: 64 });
    const limiter = createAuthFailureLimiter({
      limit: 2,
      windowMs: WINDOW_MS,
      sharedFailures: buffer,
    });
    const req = { clientIp: '203.0.113.50' };
    const outcomes: unknown[] = [];
    for (const compare of [
      () => 'ok',
      () => {
        throw new AuthenticationError('invalid_api_key');
      },
      () => {
        throw new Error('the key store failed');
      },
      () => {
        throw new AuthenticationError('invalid_api_key');
      },
      () => 'never compared',
    ]) {
      try {
        outcomes.push(limiter.attempt(req, compare));
      } catch (error) {
        outcomes.push(error);
      }
      expect(locksOf(buffer)).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    }
    expect(outcomes[0]).toBe('ok');
    expect(outcomes[4]).toBeInstanceOf(RateLimitedError);
    expect(limiter.refusalFor(req)).toBeInstanceOf(RateLimitedError);
    expect(locksOf(buffer)).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    limiter.shutdown();
  });

  it('are taken over when held past the stale bound, as by a thread that ended holding one', () => {
    const buffer = createFailureBudgetBuffer({ limit: 2, windowMs: WINDOW_MS, maxTrackedIps: 8 });
    const locks = new Int32Array(buffer, 64, 1);
    // Held, and never to be released: its holder is gone.
    Atomics.store(locks, 0, 1);
    const limiter = createAuthFailureLimiter({
      limit: 2,
      windowMs: WINDOW_MS,
      sharedFailures: buffer,
    });
    const started = performance.now();
    expect(() =>
      limiter.attempt({ clientIp: '203.0.113.60' }, () => {
        throw new AuthenticationError('invalid_api_key');
      }),
    ).toThrow(AuthenticationError);
    expect(performance.now() - started).toBeGreaterThanOrEqual(STALE_LOCK_MS);
    // Counted, and the lock is free again for everyone.
    expect([...locks]).toEqual([0]);
    expect(() =>
      limiter.attempt({ clientIp: '203.0.113.60' }, () => {
        throw new AuthenticationError('invalid_api_key');
      }),
    ).toThrow(AuthenticationError);
    expect(limiter.refusalFor({ clientIp: '203.0.113.60' })).toBeInstanceOf(RateLimitedError);
    limiter.shutdown();
  });

  it('let two limiters of one thread on one buffer count together', () => {
    const buffer = createFailureBudgetBuffer({ limit: 2, windowMs: WINDOW_MS, maxTrackedIps: 64 });
    const options = { limit: 2, windowMs: WINDOW_MS, sharedFailures: buffer };
    const [first, second] = [createAuthFailureLimiter(options), createAuthFailureLimiter(options)];
    const req = { clientIp: '2001:db8:0:100::1' };
    const wrong = (): never => {
      throw new AuthenticationError('invalid_api_key');
    };
    expect(() => first.attempt(req, wrong)).toThrow(AuthenticationError);
    expect(() => second.attempt(req, wrong)).toThrow(AuthenticationError);
    // The same /56 network, through the other limiter: spent.
    expect(first.refusalFor({ clientIp: '2001:db8:0:100::2' })).toBeInstanceOf(RateLimitedError);
    first.shutdown();
    second.shutdown();
  });
});
