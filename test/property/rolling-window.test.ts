import fc from 'fast-check';
import {
  AdmissionStore,
  type CounterRequest,
  type LocalCounters,
} from '../../lib/rate-limit/admission-store';
import type { CounterReading } from '../../lib/rate-limit/compact-memory-store';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { retryAfterSeconds } from '../../lib/rate-limit/window';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
} from '../helpers/redis';

/**
 * Rolling windows against a reference that keeps every admission time: an admission at `a`
 * counts at every `t` with `a <= t < a + window`, and a request is admitted when fewer than its
 * limit count at its time. So no span of one window ever holds more than the limit, and a request
 * is never refused while the window has room for it.
 *
 * - In memory, with a clock the test moves: every decision and reading is the reference's, over
 *   two counters met together (a refusal by one counts in neither), shadow counters (counted when
 *   they have room, never refusing) and the time a full key next has room.
 * - In Redis shared by three stores, requests arriving at random and decided concurrently: checked
 *   afterwards in Redis's clock order, by the time each script decided.
 * - A refusal's reset, in Redis: a request made then, or after `Retry-After`, is admitted.
 */

/** The reference: every admission time of one key of one counter. */
class Reference {
  private readonly times: number[] = [];

  constructor(readonly windowMs: number) {}

  /** The admissions that count at `t`, oldest first. */
  inside(t: number): number[] {
    return this.times.filter((at) => at <= t && t < at + this.windowMs);
  }

  count(t: number): number {
    return this.inside(t).length;
  }

  admit(t: number): void {
    this.times.push(t);
  }

  /** The first time from `t` on, with no admission in between, when fewer than `limit` count. */
  roomAt(t: number, limit: number): number {
    const candidates = [t, ...this.inside(t).map((at) => at + this.windowMs)];
    return Math.min(...candidates.filter((candidate) => this.count(candidate) < limit));
  }
}

/** Admissions in `(t - windowMs, t]`, from admission times in any order. */
function admittedWithin(times: readonly number[], t: number, windowMs: number): number {
  return times.filter((at) => at <= t && t < at + windowMs).length;
}

describe('rolling windows in memory, against the reference', () => {
  const COUNTERS = ['a', 'b'] as const;
  type Name = (typeof COUNTERS)[number];
  const KEYS = ['account:{acct_1}', 'account:{acct_2}'] as const;

  interface Met {
    readonly name: Name;
    readonly limit: number;
    readonly enforced: boolean;
  }

  interface Step {
    /** Milliseconds the clock moves before the request. */
    readonly wait: number;
    readonly key: (typeof KEYS)[number];
    /** The counters the request meets, in order. */
    readonly met: readonly Met[];
    /** A count probed with `freeAt()` after the request. */
    readonly keep: number;
  }

  const met = (name: Name): fc.Arbitrary<Met> =>
    fc.record({
      name: fc.constant(name),
      limit: fc.integer({ min: 1, max: 6 }),
      enforced: fc.oneof(
        { weight: 3, arbitrary: fc.constant(true) },
        { weight: 1, arbitrary: fc.constant(false) },
      ),
    });

  /** Waits on a coarse grid, so admissions often leave the window at the very ms of a request. */
  const step: fc.Arbitrary<Step> = fc.record({
    wait: fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom(0, 1, 249, 250, 251, 500) },
      { weight: 1, arbitrary: fc.integer({ min: 0, max: 2100 }) },
    ),
    key: fc.constantFrom(...KEYS),
    met: fc.oneof(
      fc.tuple(met('a')),
      fc.tuple(met('b')),
      fc.tuple(met('a'), met('b')),
      fc.tuple(met('b'), met('a')),
    ),
    keep: fc.integer({ min: -1, max: 6 }),
  });

  const windowMs = fc.constantFrom(1000, 1250, 1500, 2000);

  /** The reading the reference expects of one counter, with the request counted or not. */
  function expectedReading(
    reference: Reference,
    now: number,
    limit: number,
    counted: boolean,
  ): CounterReading {
    const inside = reference.inside(now);
    const count = inside.length;
    if (count >= limit) return { count: count + 1, resetAt: reference.roomAt(now, limit) };
    return {
      count: counted ? count + 1 : count,
      resetAt: (inside[0] ?? now) + reference.windowMs,
    };
  }

  it('decides, counts and reads as the reference, all or nothing over two counters', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          windows: fc.record({ a: windowMs, b: windowMs }),
          steps: fc.array(step, { minLength: 1, maxLength: 80 }),
        }),
        async ({ windows, steps }) => {
          let clock = Date.UTC(2026, 0, 1);
          const store = new AdmissionStore({ windowMs: 1000, now: () => clock });
          const counters: Record<Name, LocalCounters> = {
            a: store.countersFor('rl:a:', { rolling: true, windowMs: windows.a }),
            b: store.countersFor('rl:b:', { rolling: true, windowMs: windows.b }),
          };
          const references = new Map<string, Reference>();
          const reference = (name: Name, key: string): Reference => {
            const id = `${name}:${key}`;
            let found = references.get(id);
            if (found === undefined) {
              found = new Reference(windows[name]);
              references.set(id, found);
            }
            return found;
          };
          try {
            for (const [index, { wait, key, met: meets, keep }] of steps.entries()) {
              clock += wait;
              const now = clock;
              const refs = meets.map(({ name }) => reference(name, key));
              const room = meets.map(({ limit }, i) => (refs[i]?.count(now) ?? 0) < limit);
              const refusedAt = meets.findIndex(({ enforced }, i) => enforced && room[i] !== true);
              const readings = meets.map(({ limit }, i) =>
                expectedReading(refs[i]!, now, limit, refusedAt < 0 && room[i] === true),
              );
              // The request is next admitted once every enforced counter has room.
              const admittedAt = Math.max(
                now,
                ...meets.map(({ limit, enforced }, i) =>
                  enforced ? (refs[i]?.roomAt(now, limit) ?? now) : now,
                ),
              );
              const requests: CounterRequest[] = meets.map(({ name, limit, enforced }) => ({
                counter: counters[name],
                key,
                limit,
                enforced,
              }));
              const outcome = await store.admit(requests);
              expect({ index, ...outcome }).toEqual({ index, refusedAt, readings });
              if (refusedAt >= 0) {
                const resets = outcome.readings
                  .filter((reading, i) => meets[i]?.enforced === true && room[i] !== true)
                  .map((reading) => reading.resetAt);
                expect({ index, admittedAt: Math.max(...resets) }).toEqual({ index, admittedAt });
              } else {
                meets.forEach((_, i) => {
                  if (room[i] === true) refs[i]?.admit(now);
                });
              }
              for (const name of COUNTERS) {
                const ref = reference(name, key);
                const inside = ref.inside(now);
                const [read] = await store.read([
                  { counter: counters[name], key, limit: 1, enforced: true },
                ]);
                expect({ index, name, read }).toEqual({
                  index,
                  name,
                  read: { count: inside.length, resetAt: (inside[0] ?? now) + ref.windowMs },
                });
                const freeAt = keep < 0 ? now + ref.windowMs : ref.roomAt(now, keep + 1);
                expect({
                  index,
                  name,
                  keep,
                  freeAt: counters[name].memory.freeAt(key, keep),
                }).toEqual({ index, name, keep, freeAt });
              }
            }
          } finally {
            store.shutdown();
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describeWithRedis('rolling windows in Redis, against the reference', () => {
  const INSTANCES = 3;
  let redis: TestRedis;
  let connections: LimiterRedisConnection[] = [];

  beforeAll(async () => {
    const acquired = await acquireTestRedis();
    if (acquired === undefined) throw new Error('no Redis');
    redis = acquired;
    // A generous command deadline: a decision taken from the local counts because a loaded test
    // machine was slow would have no Redis time to check it by.
    connections = Array.from({ length: INSTANCES }, () =>
      createLimiterRedis({ url: redis.url, commandTimeoutMs: 2000 }),
    );
    const deadline = Date.now() + 5000;
    while (!connections.every((c) => c.health.usable) && Date.now() < deadline) {
      await sleep(20);
    }
    expect(connections.map((c) => c.health.state)).toEqual(connections.map(() => 'shared'));
  });

  afterAll(async () => {
    await Promise.all(connections.map((connection) => connection.close()));
    await redis.close();
  });

  /** One store per gateway instance, each on its own connection, sharing one rolling counter. */
  function instances(
    prefix: string,
    windowMs: number,
  ): { store: AdmissionStore; counter: LocalCounters }[] {
    return connections.map((connection) => {
      const store = new AdmissionStore({ windowMs, redis: connection });
      return { store, counter: store.countersFor(prefix, { rolling: true, windowMs }) };
    });
  }

  interface Arrival {
    /** Milliseconds after the arrival before it. */
    readonly delay: number;
    readonly instance: number;
    /** Added to the counter's limit for this request: an account's own, lower or higher. */
    readonly override: number;
  }

  interface Decided {
    readonly index: number;
    readonly instance: number;
    readonly limit: number;
    readonly admitted: boolean;
    /** Redis's clock when the script decided; none when the store refused a key it knew full. */
    readonly decidedAt: number | undefined;
    /** This machine's clock when the request was made (the Redis server shares it). */
    readonly calledAt: number;
  }

  const arrival: fc.Arbitrary<Arrival> = fc.record({
    delay: fc.integer({ min: 0, max: 20 }),
    instance: fc.integer({ min: 0, max: INSTANCES - 1 }),
    override: fc.oneof(
      { weight: 3, arbitrary: fc.constant(0) },
      { weight: 1, arbitrary: fc.integer({ min: -3, max: 3 }) },
    ),
  });

  let runs = 0;

  it('never admits more than the limit in one window, nor refuses a request with room', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          windowMs: fc.integer({ min: 1000, max: 1500 }),
          limit: fc.integer({ min: 5, max: 10 }),
          arrivals: fc.array(arrival, { minLength: 150, maxLength: 250 }),
        }),
        async ({ windowMs, limit, arrivals }) => {
          const prefix = `${uniquePrefix('rolling')}${++runs}:`;
          const stores = instances(prefix, windowMs);
          const key = 'account:{acct_1}';
          try {
            let offset = 0;
            const decided = await Promise.all(
              arrivals.map(async ({ delay, instance, override }, index): Promise<Decided> => {
                offset += delay;
                await sleep(offset);
                const { store, counter } = stores[instance] ?? stores[0]!;
                const own = Math.max(1, limit + override);
                const calledAt = Date.now();
                const outcome = await store.admit([{ counter, key, limit: own, enforced: true }]);
                return {
                  index,
                  instance,
                  limit: own,
                  admitted: outcome.refusedAt < 0,
                  decidedAt: outcome.decidedAt,
                  calledAt,
                };
              }),
            );
            expect(connections.map((c) => c.health.state)).toEqual(connections.map(() => 'shared'));
            const admitted = decided.filter((d) => d.admitted);
            // Every admission was Redis's, at Redis's time.
            expect(admitted.filter((d) => d.decidedAt === undefined)).toEqual([]);
            const times = admitted.map((d) => d.decidedAt ?? 0);
            for (const request of admitted) {
              const t = request.decidedAt ?? 0;
              const before = times.filter((at) => at < t && t < at + windowMs).length;
              // Admissions of the same ms came in some order; the one where smaller limits go first
              // is the most favourable, so each must fit in it.
              const sameMs = admitted
                .filter((other) => other.decidedAt === t)
                .sort((x, y) => x.limit - y.limit || x.index - y.index);
              const place = sameMs.indexOf(request) + 1;
              expect({ ...request, inWindow: before + place }).toEqual({
                ...request,
                inWindow: Math.min(before + place, request.limit),
              });
            }
            for (const request of decided.filter((d) => !d.admitted)) {
              const t = request.decidedAt ?? request.calledAt;
              const inWindow = admittedWithin(times, t, windowMs);
              expect({ ...request, inWindow }).toEqual({
                ...request,
                inWindow: Math.max(inWindow, request.limit),
              });
            }
            // The run met its limit: refusals happened, so both checks above had work.
            expect(decided.length - admitted.length).toBeGreaterThan(0);
          } finally {
            for (const { store } of stores) store.shutdown();
          }
        },
      ),
      // A run takes seconds: the first counterexample is reported as found, unshrunk.
      { numRuns: 3, endOnFailure: true },
    );
  }, 60_000);

  it("admits a refused request at its reading's reset, and after its Retry-After", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          windowMs: fc.integer({ min: 1000, max: 1500 }),
          gaps: fc.array(fc.integer({ min: 0, max: 200 }), { minLength: 1, maxLength: 4 }),
        }),
        async ({ windowMs, gaps }) => {
          const prefix = `${uniquePrefix('rolling-reset')}${++runs}:`;
          const stores = instances(prefix, windowMs);
          const limit = gaps.length;
          const requestOf = (instance: number, key: string): CounterRequest => {
            const { counter } = stores[instance] ?? stores[0]!;
            return { counter, key, limit, enforced: true };
          };
          const admit = (instance: number, key: string) =>
            (stores[instance] ?? stores[0]!).store.admit([requestOf(instance, key)]);
          /**
           * Fills `key` through one store, then is refused by it (which saw the key fill) and by
           * another (which asks Redis), and waits until the earlier of the two times `waitUntil`
           * gives: a request then is admitted, so neither refusal's reset was early.
           */
          const refuseThenAdmit = async (
            filler: number,
            other: number,
            key: string,
            waitUntil: (resetAt: number, refusedAt: number) => number,
          ): Promise<void> => {
            for (const gap of gaps) {
              await sleep(gap);
              expect((await admit(filler, key)).refusedAt).toBe(-1);
            }
            const untils: number[] = [];
            for (const instance of [filler, other]) {
              const refusal = await admit(instance, key);
              const refusedAt = Date.now();
              expect({ key, instance, refusedAt: refusal.refusedAt }).toEqual({
                key,
                instance,
                refusedAt: 0,
              });
              untils.push(waitUntil(refusal.readings[0]?.resetAt ?? 0, refusedAt));
            }
            const until = Math.min(...untils);
            while (Date.now() < until) await sleep(until - Date.now());
            const again = await admit(other, key);
            expect({ key, untils, refusedAt: again.refusedAt }).toEqual({
              key,
              untils,
              refusedAt: -1,
            });
          };
          try {
            await Promise.all([
              refuseThenAdmit(0, 1, 'account:{exact}', (resetAt) => resetAt),
              refuseThenAdmit(
                2,
                0,
                'account:{retry-after}',
                (resetAt, refusedAt) =>
                  refusedAt + 1000 * retryAfterSeconds(resetAt, windowMs, refusedAt),
              ),
            ]);
          } finally {
            for (const { store } of stores) store.shutdown();
          }
        },
      ),
      { numRuns: 3, endOnFailure: true },
    );
  }, 60_000);
});

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}
