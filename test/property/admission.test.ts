import fc from 'fast-check';
import { Redis } from 'ioredis';
import type { RequestFacts } from '../../lib/core/facts';
import { type CompiledPolicy, createGate, type Decision, type Gate } from '../../lib/core/gate';
import { RateLimitedError } from '../../lib/errors';
import { generateKey } from '../../lib/model/key-format';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import { AdmissionStore } from '../../lib/rate-limit/admission-store';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
} from '../helpers/redis';

/**
 * All or nothing, under random sequences of requests over two accounts (one with
 * limit overrides), three client IPs and both credential kinds, on a route meeting one limit
 * (`authenticated`) and one meeting two for publishable keys (`payments` and its per-IP cap):
 *
 * - every decision is the model's: admitted only if every limit met has room, refused by the first
 *   without room, and a refused request spends none of the others. The per-account scopes count
 *   rolling windows (room when fewer than the limit were admitted in the last window), the
 *   publishable cap per client IP a fixed window from the address's first admission;
 * - in memory, with the clock moved forward between requests across window edges, a refusal's
 *   `Retry-After` is the model's next room, rounded up to whole seconds;
 * - no counter ever exceeds the requests it admitted: in memory (read back through `usage()`) and
 *   in Redis (every counter read back), also with requests decided concurrently, whose script calls
 *   leave in one pipeline.
 */

const PUBLIC_KEY_HEADER = 'x-service-public-api-key';
type ScopeName = 'payments' | 'payments-publishable' | 'authenticated';
interface ScopeSpec {
  readonly limit: number;
  readonly per: 'account' | 'ip';
  readonly window: number;
}
type ScopeSet = Readonly<Record<ScopeName, ScopeSpec>>;
/** Short windows, crossed by the memory runs' clock: each scope's own, so their edges differ. */
const SHORT_SCOPES: ScopeSet = {
  payments: { limit: 5, per: 'account', window: 2000 },
  'payments-publishable': { limit: 2, per: 'ip', window: 1000 },
  authenticated: { limit: 3, per: 'account', window: 1500 },
};
/** Windows no Redis run outlasts: Redis keeps its own clock, which a test cannot move. */
const LONG_SCOPES: ScopeSet = {
  payments: { limit: 5, per: 'account', window: 60_000 },
  'payments-publishable': { limit: 2, per: 'ip', window: 60_000 },
  authenticated: { limit: 3, per: 'account', window: 60_000 },
};
const ACCOUNTS = ['acct_a', 'acct_b'] as const;
type Account = (typeof ACCOUNTS)[number];
/** `acct_b` has its own limits: one above the default, one below. */
const OVERRIDES: Readonly<Record<Account, Partial<Record<ScopeName, number>>>> = {
  acct_a: {},
  acct_b: { payments: 7, authenticated: 1 },
};
const IPS = ['203.0.113.1', '203.0.113.2', '198.51.100.7'] as const;

interface Attempt {
  readonly account: Account;
  readonly ip: (typeof IPS)[number];
  readonly credential: 'secret' | 'publishable';
  readonly route: 'status' | 'transactions';
}

/** An attempt made `wait` ms after the one before it. */
interface TimedAttempt extends Attempt {
  readonly wait: number;
}

const attempt: fc.Arbitrary<Attempt> = fc.record({
  account: fc.constantFrom(...ACCOUNTS),
  ip: fc.constantFrom(...IPS),
  credential: fc.constantFrom('secret' as const, 'publishable' as const),
  route: fc.constantFrom('status' as const, 'transactions' as const),
});

/** Mostly no wait, so counters fill; sometimes one landing on or beside a window's edge. */
const wait: fc.Arbitrary<number> = fc.oneof(
  { weight: 4, arbitrary: fc.constant(0) },
  { weight: 2, arbitrary: fc.constantFrom(1, 499, 500, 999, 1000, 1001, 1500, 2000) },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: 2100 }) },
);

const timedAttempt: fc.Arbitrary<TimedAttempt> = fc
  .tuple(attempt, wait)
  .map(([request, after]) => ({ ...request, wait: after }));

const KEYS = Object.fromEntries(
  ACCOUNTS.map((account) => [
    account,
    { publishable: generateKey('publishable'), secret: generateKey('secret') },
  ]),
) as Record<Account, { publishable: string; secret: string }>;

/** Two accounts with one key each; `acct_b`'s key carries the account's overrides. */
function keyRing(): KeyRing {
  const base = KeyRing.fromDocument({
    accounts: ACCOUNTS.map((account) => ({
      id: account,
      keys: [
        {
          id: `key_${account}`,
          publishableKey: KEYS[account].publishable,
          secretKeySha256: sha256(KEYS[account].secret).toString('hex'),
          role: 'administrator',
        },
      ],
    })),
  });
  return new KeyRing(
    base.records.map((record) => {
      const limits = OVERRIDES[record.accountId as Account];
      return Object.keys(limits).length === 0 ? record : { ...record, limits };
    }),
  );
}

function limitOf(scopes: ScopeSet, scope: ScopeName, account: Account): number {
  return OVERRIDES[account][scope] ?? scopes[scope].limit;
}

/** A counter the model tracks. */
interface Counter {
  readonly scope: ScopeName;
  /** The counted key after the scope's prefix: `account:{acct_a}`. */
  readonly key: string;
  /** The model's name of the counter: the scope, then the key. */
  readonly id: string;
  readonly limit: number;
  /** Per-account scopes roll; the per-IP cap counts fixed windows. */
  readonly rolling: boolean;
  readonly windowMs: number;
}

/** The counter of `scope` for `account`, at `key` (the account's own, or its IP's). */
function counterOf(scopes: ScopeSet, scope: ScopeName, account: Account, key: string): Counter {
  return {
    scope,
    key,
    id: `${scope}:${key}`,
    limit: limitOf(scopes, scope, account),
    rolling: scopes[scope].per === 'account',
    windowMs: scopes[scope].window,
  };
}

/** The counters an attempt meets, in the gate's order (the publishable cap first). */
function countersMet(scopes: ScopeSet, request: Attempt): Counter[] | undefined {
  const account = `account:{${request.account}}`;
  const counter = (scope: ScopeName, key: string): Counter =>
    counterOf(scopes, scope, request.account, key);
  if (request.route === 'transactions') {
    // A publishable key on a route that does not take one is refused before any limit.
    return request.credential === 'secret' ? [counter('authenticated', account)] : undefined;
  }
  return request.credential === 'publishable'
    ? [counter('payments-publishable', `${account}:ip:${request.ip}`), counter('payments', account)]
    : [counter('payments', account)];
}

/** A fixed window: its start and the admissions counted in it. */
interface FixedWindow {
  start: number;
  count: number;
}

/** The model's answer to one attempt. */
interface Expected {
  readonly outcome: string;
  /** For a refusal by a limit: whole seconds until the model next admits it, at least 1. */
  readonly retryAfter?: number;
}

/**
 * The reference: a rolling counter keeps its admission times and counts those younger than its
 * window (an admission at `a` counts at `t` when `a <= t < a + window`); a fixed one counts from
 * its first admission until one window later, then starts again at the next admission.
 */
class Model {
  private readonly rolling = new Map<string, number[]>();
  private readonly fixed = new Map<string, FixedWindow>();

  constructor(private readonly scopes: ScopeSet) {}

  decide(request: Attempt, now: number): Expected {
    const met = countersMet(this.scopes, request);
    if (met === undefined) return { outcome: '401 credential_not_allowed' };
    const full = met.find((counter) => this.count(counter, now) >= counter.limit);
    if (full !== undefined) {
      return {
        outcome: `429 rate_limited ${full.scope}`,
        retryAfter: Math.max(1, Math.ceil((this.roomAt(full, now) - now) / 1000)),
      };
    }
    for (const counter of met) this.admit(counter, now);
    return { outcome: 'allowed' };
  }

  count(counter: Counter, now: number): number {
    if (counter.rolling) return this.inside(counter, now).length;
    const window = this.fixed.get(counter.id);
    return window !== undefined && now < window.start + counter.windowMs ? window.count : 0;
  }

  /** Every counter that ever admitted a request, by id, with its count at `now`. */
  countsAt(counters: readonly Counter[], now: number): Map<string, number> {
    const counts = new Map<string, number>();
    for (const counter of counters) {
      if (this.rolling.has(counter.id) || this.fixed.has(counter.id)) {
        counts.set(counter.id, this.count(counter, now));
      }
    }
    return counts;
  }

  /** The admission times of a rolling counter still inside its window at `now`, oldest first. */
  private inside(counter: Counter, now: number): number[] {
    return (this.rolling.get(counter.id) ?? []).filter((at) => now < at + counter.windowMs);
  }

  /** When a full counter next has room: its count drops below the limit. */
  private roomAt(counter: Counter, now: number): number {
    if (!counter.rolling) {
      return (this.fixed.get(counter.id)?.start ?? now) + counter.windowMs;
    }
    const times = this.inside(counter, now);
    return (times[times.length - counter.limit] ?? now) + counter.windowMs;
  }

  private admit(counter: Counter, now: number): void {
    if (counter.rolling) {
      this.rolling.set(counter.id, [...(this.rolling.get(counter.id) ?? []), now]);
      return;
    }
    const window = this.fixed.get(counter.id);
    if (window === undefined || now >= window.start + counter.windowMs) {
      this.fixed.set(counter.id, { start: now, count: 1 });
    } else {
      window.count += 1;
    }
  }
}

function facts(request: Attempt): RequestFacts {
  const path = request.route === 'status' ? '/api/v1/payment/status/' : '/api/v1/transactions/';
  const keys = KEYS[request.account];
  return {
    method: request.route === 'status' ? 'POST' : 'GET',
    path,
    originalUrl: path,
    headersDistinct:
      request.credential === 'secret'
        ? { authorization: [`Bearer ${keys.secret}`] }
        : { [PUBLIC_KEY_HEADER]: [keys.publishable] },
    clientIp: request.ip,
  };
}

function outcome(decision: Decision): string {
  if (decision.allowed) return 'allowed';
  const { error } = decision;
  const scope = error instanceof RateLimitedError ? ` ${error.scope ?? ''}` : '';
  return `${error.status} ${error.code}${scope}`;
}

function retryAfter(decision: Decision): number | undefined {
  return !decision.allowed && decision.error instanceof RateLimitedError
    ? decision.error.retryAfterSeconds
    : undefined;
}

/** The quotas the decision's `RateLimit-Policy` headers show, by scope. */
function quotas(decision: Decision): Record<string, number> {
  const shown: Record<string, number> = {};
  for (const [name, value] of decision.headers) {
    const match = /^"([^"]+)"; q=(\d+);/.exec(value);
    if (name === 'RateLimit-Policy' && match?.[1] !== undefined) shown[match[1]] = Number(match[2]);
  }
  return shown;
}

interface Subject {
  readonly scopes: ScopeSet;
  readonly gate: Gate;
  readonly status: CompiledPolicy;
  readonly transactions: CompiledPolicy;
}

function subject(scopes: ScopeSet, redis?: LimiterRedisConnection, redisPrefix?: string): Subject {
  const gate = createGate({ keyStore: keyRing(), scopes, redis, redisPrefix });
  return {
    scopes,
    gate,
    status: gate.policy({
      accept: ['publishable', 'secret'],
      limit: 'payments',
      publishableLimit: 'payments-publishable',
    }),
    transactions: gate.policy({ accept: ['secret'], limit: 'authenticated' }),
  };
}

async function decide(target: Subject, request: Attempt): Promise<Decision> {
  return target.gate.decide(
    facts(request),
    request.route === 'status' ? target.status : target.transactions,
  );
}

/**
 * Runs `requests` one by one, each after its wait on `clock` (none when the clock is Redis's
 * real one): each decision, its quotas and, when the model knows it, its `Retry-After` are the
 * model's.
 */
async function expectModelDecisions(
  target: Subject,
  requests: readonly Attempt[],
  clock: Clock,
): Promise<Model> {
  const model = new Model(target.scopes);
  for (const request of requests) {
    clock.pass('wait' in request && typeof request.wait === 'number' ? request.wait : 0);
    const expected = model.decide(request, clock.now());
    const decision = await decide(target, request);
    const got = { request, outcome: outcome(decision), retryAfter: retryAfter(decision) };
    expect(clock.exact ? got : { ...got, retryAfter: expected.retryAfter }).toEqual({
      request,
      ...expected,
    });
    const met = countersMet(target.scopes, request) ?? [];
    const shown =
      expected.outcome === 'allowed' ? met : met.filter((c) => expected.outcome.endsWith(c.scope));
    expect(quotas(decision)).toEqual(
      Object.fromEntries(shown.map((counter) => [counter.scope, counter.limit])),
    );
  }
  return model;
}

/** Every counter an account's `usage()` shows. */
function accountCounters(scopes: ScopeSet, account: Account): Counter[] {
  return (['payments', 'authenticated'] as const).map((scope) =>
    counterOf(scopes, scope, account, `account:{${account}}`),
  );
}

/** `usage()` of each account shows the model's counts now, at the account's own limits. */
async function expectUsage(target: Subject, model: Model, now: number): Promise<void> {
  for (const account of ACCOUNTS) {
    const usage = await target.gate.usage(account, OVERRIDES[account]);
    expect(usage.map(({ scope, limit, remaining }) => ({ scope, limit, remaining }))).toEqual(
      accountCounters(target.scopes, account).map((counter) => ({
        scope: counter.scope,
        limit: counter.limit,
        remaining: counter.limit - model.count(counter, now),
      })),
    );
  }
}

/** The time the model and the gate share. */
interface Clock {
  /** True when the gate reads this very clock, so reset times can be compared exactly. */
  readonly exact: boolean;
  now(): number;
  pass(ms: number): void;
}

/** Jest's fake `Date` (only `Date`: timers and promises stay real), moved by the test alone. */
const FAKE_CLOCK: Clock = {
  exact: true,
  now: () => Date.now(),
  pass: (ms) => {
    jest.setSystemTime(Date.now() + ms);
  },
};

/** The machine's clock, which the Redis server on loopback shares; waits are not taken. */
const REAL_CLOCK: Clock = {
  exact: false,
  now: () => Date.now(),
  pass: () => undefined,
};

describe('all-or-nothing admission in memory', () => {
  beforeAll(() => {
    jest.useFakeTimers({
      doNotFake: [
        'hrtime',
        'nextTick',
        'performance',
        'queueMicrotask',
        'setImmediate',
        'clearImmediate',
        'setInterval',
        'clearInterval',
        'setTimeout',
        'clearTimeout',
      ],
      now: Date.UTC(2026, 0, 1),
    });
  });

  afterAll(() => {
    jest.useRealTimers();
  });

  it('decides as the model across window edges, and no counter exceeds the requests it admitted', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(timedAttempt, { minLength: 1, maxLength: 60, size: 'max' }),
        async (requests) => {
          const target = subject(SHORT_SCOPES);
          try {
            const model = await expectModelDecisions(target, requests, FAKE_CLOCK);
            await expectUsage(target, model, FAKE_CLOCK.now());
          } finally {
            target.gate.close();
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});

describeWithRedis('all-or-nothing admission in Redis', () => {
  let redis: TestRedis;
  let connection: LimiterRedisConnection;
  let admin: Redis;
  let runs = 0;

  beforeAll(async () => {
    const acquired = await acquireTestRedis();
    if (acquired === undefined) throw new Error('no Redis');
    redis = acquired;
    connection = createLimiterRedis({ url: redis.url });
    admin = new Redis(redis.url);
    const deadline = Date.now() + 5000;
    while (!connection.health.usable && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(connection.health.state).toBe('shared');
  });

  afterAll(async () => {
    await connection.close();
    admin.disconnect();
    await redis.close();
  });

  /** A counter's Redis key: a rolling scope's keys carry `rolling:` after the scope. */
  function redisKey(prefix: string, counter: Counter): string {
    return `${prefix}${counter.scope}:${counter.rolling ? 'rolling:' : ''}${counter.key}`;
  }

  /**
   * Every counter of the model, read back from Redis under `prefix`: the keys written are the
   * model's, each count (read through a store of its own) is the model's, and a rolling key's ring
   * header (`r1`, then big-endian start, n, cap, last) holds that many admissions in its slots.
   */
  async function expectRedisCounts(
    prefix: string,
    counters: readonly Counter[],
    counts: ReadonlyMap<string, number>,
  ) {
    const byId = new Map(counters.map((counter) => [counter.id, counter]));
    const counted = [...counts.keys()].map((id) => byId.get(id)!);
    const written = (await admin.keys(`${prefix}*`)).sort();
    expect(written).toEqual(counted.map((counter) => redisKey(prefix, counter)).sort());
    const reader = new AdmissionStore({ windowMs: 60_000, redis: connection });
    try {
      const readings = await reader.read(
        counted.map((counter) => ({
          counter: reader.countersFor(`${prefix}${counter.scope}:`, {
            rolling: counter.rolling,
            windowMs: counter.windowMs,
          }),
          key: counter.key,
          limit: counter.limit,
          enforced: true,
        })),
      );
      expect(counted.map((counter, index) => [counter.id, readings[index]?.count])).toEqual(
        counted.map((counter) => [counter.id, counts.get(counter.id)]),
      );
    } finally {
      reader.shutdown();
    }
    for (const counter of counted.filter(({ rolling }) => rolling)) {
      const stored = await admin.getBuffer(redisKey(prefix, counter));
      const cap = stored?.readUInt32BE(10) ?? 0;
      expect({
        id: counter.id,
        tag: stored?.subarray(0, 2).toString('latin1'),
        n: stored?.readUInt32BE(6),
        length: stored?.length,
      }).toEqual({ id: counter.id, tag: 'r1', n: counts.get(counter.id), length: 18 + 4 * cap });
    }
  }

  /** Every counter any of `requests` meets. */
  function countersOf(requests: readonly Attempt[]): Counter[] {
    const met = requests.flatMap((request) => countersMet(LONG_SCOPES, request) ?? []);
    return [...new Map(met.map((counter) => [counter.id, counter])).values()];
  }

  it('decides as the model, and every counter in Redis equals the requests it admitted', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(attempt, { minLength: 1, maxLength: 40, size: 'max' }),
        async (requests) => {
          const prefix = `${uniquePrefix('admission')}${++runs}:`;
          const target = subject(LONG_SCOPES, connection, prefix);
          try {
            const model = await expectModelDecisions(target, requests, REAL_CLOCK);
            const now = REAL_CLOCK.now();
            await expectUsage(target, model, now);
            await expectRedisCounts(
              prefix,
              countersOf(requests),
              model.countsAt(countersOf(requests), now),
            );
          } finally {
            target.gate.close();
          }
        },
      ),
      { numRuns: 40 },
    );
    expect(connection.health.state).toBe('shared');
  });

  it('never lets a counter exceed what it admitted when requests are decided concurrently', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(attempt, { minLength: 1, maxLength: 12, size: 'max' }), {
          minLength: 1,
          maxLength: 6,
          size: 'max',
        }),
        async (waves) => {
          const prefix = `${uniquePrefix('admission-concurrent')}${++runs}:`;
          const target = subject(LONG_SCOPES, connection, prefix);
          const admitted = new Map<string, number>();
          const refusedBy: Counter[][] = [];
          try {
            for (const wave of waves) {
              // One wave's script calls leave in one pipeline, in the order they were called.
              const decisions = await Promise.all(wave.map((request) => decide(target, request)));
              decisions.forEach((decision, index) => {
                const request = wave[index];
                const met = request === undefined ? [] : (countersMet(LONG_SCOPES, request) ?? []);
                if (decision.allowed) {
                  for (const counter of met) {
                    admitted.set(counter.id, (admitted.get(counter.id) ?? 0) + 1);
                  }
                } else {
                  const { error } = decision;
                  const scope = error instanceof RateLimitedError ? error.scope : undefined;
                  if (scope !== undefined) {
                    refusedBy.push(met.filter((counter) => counter.scope === scope));
                  }
                }
              });
            }
            // No window ends within a run, so each counter holds every admission it made.
            const counters = countersOf(waves.flat());
            await expectRedisCounts(prefix, counters, admitted);
            const limits = new Map(counters.map((c) => [c.id, c]));
            for (const [id, count] of admitted) {
              expect(count).toBeLessThanOrEqual(limits.get(id)?.limit ?? 0);
            }
            // A refusal names a limit that was full: it ends at its limit, never above.
            for (const [counter] of refusedBy) {
              expect(counter).toBeDefined();
              if (counter !== undefined) expect(admitted.get(counter.id)).toBe(counter.limit);
            }
          } finally {
            target.gate.close();
          }
        },
      ),
      { numRuns: 30 },
    );
    expect(connection.health.state).toBe('shared');
  });
});
