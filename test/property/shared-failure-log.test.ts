import fc from 'fast-check';
import { AuthenticationError, IpNotWhitelistedError, TollgateError } from '../../lib/errors';
import {
  type AuthFailureLimiter,
  createAuthFailureLimiter,
} from '../../lib/rate-limit/auth-failures';
import { LocalFailureLog } from '../../lib/rate-limit/failure-log';
import {
  createFailureBudgetBuffer,
  SharedFailureLog,
} from '../../lib/rate-limit/shared-failure-log';

/**
 * The failure log in a SharedArrayBuffer against the one in memory, on random sequences of
 * counts, checks and clock steps (forward, across a window's edge, and back) for a few keys: an
 * IPv4 address, an IPv6 network, 'unknown', the empty key, two long keys that differ in their last
 * character only and a key that is not ASCII. Within its capacity, the shared log answers every
 * check as the one in memory does; and a limiter given the shared buffer answers every attempt,
 * recorded refusal and early refusal as one counting in memory.
 *
 * One bucket (`maxTrackedIps` 8) puts every key in the same eight ways, so each lookup tells keys
 * apart by their bytes; a larger table spreads them.
 *
 * fast-check draws a new seed each run and prints it with the shrunk path on a failure; set
 * `FC_SEED` (and `FC_PATH`) to replay one.
 */

const WINDOW_MS = 10_000;
const START = 1_764_300_000_000;
const RUNS = 300;

const KEYS = [
  '203.0.113.9',
  '2001:db8:0:100::/56',
  'unknown',
  '',
  `${'x'.repeat(70)}a`,
  `${'x'.repeat(70)}b`,
  'адрес',
] as const;

type Step =
  | { readonly kind: 'wait'; readonly ms: number }
  | { readonly kind: 'count'; readonly key: number }
  | { readonly kind: 'check'; readonly key: number };

/** Often none; often part of a window; sometimes to or across its edge; sometimes back. */
const wait: fc.Arbitrary<number> = fc.oneof(
  { weight: 3, arbitrary: fc.constant(0) },
  { weight: 3, arbitrary: fc.integer({ min: 1, max: WINDOW_MS / 2 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(WINDOW_MS / 2, WINDOW_MS - 1, WINDOW_MS, WINDOW_MS + 1),
  },
  { weight: 1, arbitrary: fc.integer({ min: -WINDOW_MS / 2, max: -1 }) },
);

const key = fc.nat({ max: KEYS.length - 1 });

const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: wait }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('count' as const), key }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('check' as const), key }) },
);

const scenario = fc.record({
  limit: fc.integer({ min: 1, max: 5 }),
  maxTrackedIps: fc.constantFrom(8, 1000),
  steps: fc.array(step, { minLength: 1, maxLength: 80 }),
});

/** A replay of a failure fast-check printed, when `FC_SEED` (and `FC_PATH`) are set. */
const replay: Pick<fc.Parameters<unknown>, 'seed' | 'path'> = process.env.FC_SEED === undefined
  ? {}
  : { seed: Number(process.env.FC_SEED), path: process.env.FC_PATH };

function keyAt(index: number): string {
  const found = KEYS[index];
  if (found === undefined) throw new Error(`no key ${index}`);
  return found;
}

describe('the failure log in a SharedArrayBuffer, against the one in memory (property)', () => {
  it('answers every check alike', () => {
    fc.assert(
      fc.property(scenario, ({ limit, maxTrackedIps, steps }) => {
        const shape = { limit, windowMs: WINDOW_MS };
        const local = new LocalFailureLog({ ...shape, maxTrackedIps: 1000 });
        const shared = new SharedFailureLog(
          createFailureBudgetBuffer({ ...shape, maxTrackedIps }),
          shape,
        );
        let time = START;
        for (const next of steps) {
          if (next.kind === 'wait') {
            time += next.ms;
          } else if (next.kind === 'count') {
            local.count(keyAt(next.key), time);
            shared.count(keyAt(next.key), time);
          } else {
            expect(shared.spentUntil(keyAt(next.key), time)).toBe(
              local.spentUntil(keyAt(next.key), time),
            );
          }
        }
        // Every key at the end, in a single bucket's order too.
        for (const each of KEYS) {
          expect(shared.spentUntil(each, time)).toBe(local.spentUntil(each, time));
        }
      }),
      { numRuns: RUNS, ...replay },
    );
  });
});

describe('a limiter given the shared buffer, against one counting in memory (property)', () => {
  type Call =
    | { readonly kind: 'wait'; readonly ms: number }
    | { readonly kind: 'wrong' | 'right' | 'whitelist' | 'guard'; readonly ip: number };

  const IPS = ['198.51.100.7', '2001:db8:0:1ff::1', '2001:db8:0:100::2'] as const;
  const ip = fc.nat({ max: IPS.length - 1 });
  const call: fc.Arbitrary<Call> = fc.oneof(
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: wait }) },
    {
      weight: 4,
      arbitrary: fc.record({
        kind: fc.constantFrom('wrong' as const, 'right' as const, 'whitelist' as const),
        ip,
      }),
    },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('guard' as const), ip }) },
  );

  /** What a call answered: a result, or an error's class, code and `Retry-After`. */
  function answer(limiter: AuthFailureLimiter, next: Call & { ip: number }): unknown {
    const req = { clientIp: IPS[next.ip] };
    try {
      if (next.kind === 'guard') return describeError(limiter.refusalFor(req));
      if (next.kind === 'whitelist') return limiter.record(req, new IpNotWhitelistedError());
      return limiter.attempt(req, () => {
        if (next.kind === 'wrong') throw new AuthenticationError('invalid_api_key');
        return 'authenticated';
      });
    } catch (error) {
      return describeError(error);
    }
  }

  function describeError(error: unknown): unknown {
    if (error === undefined) return undefined;
    if (!(error instanceof TollgateError)) {
      throw new Error('the limiter threw what is not a TollgateError', { cause: error });
    }
    return {
      name: error.constructor.name,
      code: error.code,
      retryAfter: (error as { retryAfterSeconds?: number }).retryAfterSeconds,
    };
  }

  it('answers every call alike', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.array(call, { minLength: 1, maxLength: 80 }),
        (limit, calls) => {
          let time = START;
          const now = (): number => time;
          const options = { limit, windowMs: WINDOW_MS, now };
          const inMemory = createAuthFailureLimiter(options);
          const shared = createAuthFailureLimiter({
            ...options,
            sharedFailures: createFailureBudgetBuffer({
              limit,
              windowMs: WINDOW_MS,
              maxTrackedIps: 64,
            }),
          });
          try {
            for (const next of calls) {
              if (next.kind === 'wait') time += next.ms;
              else expect(answer(shared, next)).toEqual(answer(inMemory, next));
            }
          } finally {
            inMemory.shutdown();
            shared.shutdown();
          }
        },
      ),
      { numRuns: RUNS, ...replay },
    );
  });
});
