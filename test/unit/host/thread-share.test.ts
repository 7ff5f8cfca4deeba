import { ConfigurationError } from '../../../lib/errors';
import { ThreadShare } from '../../../lib/host/thread-share';
import { tollgate } from '../../../lib/express/tollgate';
import { createFixtures } from '../../helpers/fixtures';

/**
 * `ThreadShare`: what the worker threads of one process share, sized within its memory bound, and
 * refused by a gate whose failure budget is not the one it was made for.
 */

/** The failure budget's header: its limit, window and the addresses it keeps (see the layout). */
function headerOf(share: ThreadShare): { limit: number; windowMs: number; tracked: number } {
  const link = share.link();
  link.port.close();
  const header = new Uint32Array(link.failures, 0, 16);
  return { limit: header[2] ?? 0, windowMs: header[3] ?? 0, tracked: header[4] ?? 0 };
}

describe('ThreadShare', () => {
  it('keeps 100,000 addresses for the default budget, in well under 64 MiB', () => {
    const share = new ThreadShare();
    const link = share.link();
    expect(link.failures.byteLength).toBeLessThan(32 * 2 ** 20);
    expect(headerOf(share)).toEqual({ limit: 20, windowMs: 60_000, tracked: 100_000 });
    link.port.close();
    share.close();
  });

  it('keeps fewer addresses for a large budget, so its memory stays within 64 MiB', () => {
    for (const authFailureLimit of [100, 1000, 100_000]) {
      const share = new ThreadShare({ authFailureLimit });
      const link = share.link();
      expect(link.failures.byteLength).toBeLessThanOrEqual(64 * 2 ** 20);
      const { tracked } = headerOf(share);
      expect(tracked).toBeLessThan(100_000);
      expect(tracked).toBeGreaterThanOrEqual(8);
      link.port.close();
      share.close();
    }
  });

  it('links every worker to one buffer of counters, bounded as asked', () => {
    const share = new ThreadShare({ maxCountedKeys: 1000, maxCountedTimes: 1_000_000 });
    const one = share.link();
    const two = share.link();
    expect(two.counters).toBe(one.counters);
    // The keys, their buckets and the times, with a header and the scopes.
    expect(one.counters.byteLength).toBeGreaterThan(1000 * 112 + 1_000_000 * 8);
    expect(one.counters.byteLength).toBeLessThan(1000 * 112 + 1_000_000 * 8 + 2 ** 20);
    share.close();
  });

  it('refuses bounds under which a key at the highest limit would not fit', () => {
    expect(() => new ThreadShare({ maxCountedTimes: 999_999 })).toThrow(/maxCountedTimes.*1000000/);
    expect(() => new ThreadShare({ maxCountedKeys: 0 })).toThrow(ConfigurationError);
  });

  it('is refused by a gate counting another budget, naming both', () => {
    const share = new ThreadShare({ authFailureLimit: 5 });
    const link = share.link();
    const options = {
      keyStore: createFixtures().ring,
      scopes: { orders: { limit: 10 } },
      threads: link,
    };
    expect(() => tollgate(options)).toThrow(ConfigurationError);
    expect(() => tollgate(options)).toThrow(
      /made for limit 5 and windowMs 60000, and this budget counts limit 20 in windowMs 60000: make the ThreadShare with the same authFailureLimit and windowMs/,
    );
    const gate = tollgate({ ...options, authFailureLimit: 5 });
    gate.close();
    share.close();
  });
});
