import fc from 'fast-check';
import { Redis } from 'ioredis';
import type { RequestFacts } from '../../lib/core/facts';
import { type CompiledPolicy, createGate, type Decision, type Gate } from '../../lib/core/gate';
import { RateLimitedError } from '../../lib/errors';
import { generateKey } from '../../lib/keys/key-format';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
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
 *   without room, and a refused request spends none of the others;
 * - no counter ever exceeds the requests it admitted: in memory (read back through `usage()`) and
 *   in Redis (every counter read back), also with requests decided concurrently, whose script calls
 *   leave in one pipeline.
 */

const PUBLIC_KEY_HEADER = 'x-service-public-api-key';
const SCOPES = {
  payments: { limit: 5, per: 'account' },
  'payments-publishable': { limit: 2, per: 'ip' },
  authenticated: { limit: 3, per: 'account' },
} as const;
type ScopeName = keyof typeof SCOPES;
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

const attempt: fc.Arbitrary<Attempt> = fc.record({
  account: fc.constantFrom(...ACCOUNTS),
  ip: fc.constantFrom(...IPS),
  credential: fc.constantFrom('secret' as const, 'publishable' as const),
  route: fc.constantFrom('status' as const, 'transactions' as const),
});

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

function limitOf(scope: ScopeName, account: Account): number {
  return OVERRIDES[account][scope] ?? SCOPES[scope].limit;
}

/** A counter the model tracks: its scope and its Redis key after the prefix. */
interface Counter {
  readonly scope: ScopeName;
  readonly key: string;
  readonly limit: number;
}

/** The counters an attempt meets, in the gate's order (the publishable cap first). */
function countersMet(request: Attempt): Counter[] | undefined {
  const account = `account:{${request.account}}`;
  const counter = (scope: ScopeName, key: string): Counter => ({
    scope,
    key: `${scope}:${key}`,
    limit: limitOf(scope, request.account),
  });
  if (request.route === 'transactions') {
    // A publishable key on a route that does not take one is refused before any limit.
    return request.credential === 'secret' ? [counter('authenticated', account)] : undefined;
  }
  return request.credential === 'publishable'
    ? [counter('payments-publishable', `${account}:ip:${request.ip}`), counter('payments', account)]
    : [counter('payments', account)];
}

/** The reference: counts per counter key, and the decision each attempt must get. */
class Model {
  readonly counts = new Map<string, number>();

  decide(request: Attempt): string {
    const met = countersMet(request);
    if (met === undefined) return '401 credential_not_allowed';
    const full = met.find((counter) => this.count(counter) >= counter.limit);
    if (full !== undefined) return `429 rate_limited ${full.scope}`;
    for (const counter of met) this.counts.set(counter.key, this.count(counter) + 1);
    return 'allowed';
  }

  count(counter: Counter): number {
    return this.counts.get(counter.key) ?? 0;
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
  readonly gate: Gate;
  readonly status: CompiledPolicy;
  readonly transactions: CompiledPolicy;
}

function subject(redis?: LimiterRedisConnection, redisPrefix?: string): Subject {
  const gate = createGate({ keyStore: keyRing(), scopes: SCOPES, redis, redisPrefix });
  return {
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

/** Runs `requests` one by one: each decision and its quotas are the model's. */
async function expectModelDecisions(target: Subject, requests: Attempt[]): Promise<Model> {
  const model = new Model();
  for (const request of requests) {
    const expected = model.decide(request);
    const decision = await decide(target, request);
    expect({ request, outcome: outcome(decision) }).toEqual({ request, outcome: expected });
    const met = countersMet(request) ?? [];
    const shown = expected === 'allowed' ? met : met.filter((c) => expected.endsWith(c.scope));
    expect(quotas(decision)).toEqual(
      Object.fromEntries(shown.map((counter) => [counter.scope, counter.limit])),
    );
  }
  return model;
}

/** `usage()` of each account shows the model's counts, at the account's own limits. */
async function expectUsage(target: Subject, model: Model): Promise<void> {
  for (const account of ACCOUNTS) {
    const usage = await target.gate.usage(account, OVERRIDES[account]);
    const used = (scope: ScopeName): number =>
      model.counts.get(`${scope}:account:{${account}}`) ?? 0;
    expect(usage.map(({ scope, limit, remaining }) => ({ scope, limit, remaining }))).toEqual(
      (['payments', 'authenticated'] as const).map((scope) => ({
        scope,
        limit: limitOf(scope, account),
        remaining: limitOf(scope, account) - used(scope),
      })),
    );
  }
}

describe('all-or-nothing admission in memory', () => {
  it('decides as the model, and no counter exceeds the requests it admitted', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(attempt, { minLength: 1, maxLength: 60, size: 'max' }),
        async (requests) => {
          const target = subject();
          try {
            const model = await expectModelDecisions(target, requests);
            await expectUsage(target, model);
          } finally {
            target.gate.close();
          }
        },
      ),
      { numRuns: 100 },
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

  /** Every counter of the model, read back from Redis under `prefix`. */
  async function expectRedisCounts(prefix: string, counts: ReadonlyMap<string, number>) {
    const written = (await admin.keys(`${prefix}*`)).sort();
    expect(written).toEqual([...counts.keys()].map((key) => `${prefix}${key}`).sort());
    for (const [key, count] of counts) {
      expect({ key, count: Number(await admin.get(`${prefix}${key}`)) }).toEqual({ key, count });
    }
  }

  it('decides as the model, and every counter in Redis equals the requests it admitted', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(attempt, { minLength: 1, maxLength: 40, size: 'max' }),
        async (requests) => {
          const prefix = `${uniquePrefix('admission')}${++runs}:`;
          const target = subject(connection, prefix);
          try {
            const model = await expectModelDecisions(target, requests);
            await expectUsage(target, model);
            await expectRedisCounts(prefix, model.counts);
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
          const target = subject(connection, prefix);
          const admitted = new Map<string, number>();
          const refusedBy: Counter[][] = [];
          try {
            for (const wave of waves) {
              // One wave's script calls leave in one pipeline, in the order they were called.
              const decisions = await Promise.all(wave.map((request) => decide(target, request)));
              decisions.forEach((decision, index) => {
                const request = wave[index];
                const met = request === undefined ? [] : (countersMet(request) ?? []);
                if (decision.allowed) {
                  for (const counter of met) {
                    admitted.set(counter.key, (admitted.get(counter.key) ?? 0) + 1);
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
            await expectRedisCounts(prefix, admitted);
            const limits = new Map(
              waves
                .flat()
                .flatMap((request) => countersMet(request) ?? [])
                .map((c) => [c.key, c]),
            );
            for (const [key, count] of admitted) {
              expect(count).toBeLessThanOrEqual(limits.get(key)?.limit ?? 0);
            }
            // A refusal names a limit that was full: it ends at its limit, never above.
            for (const [counter] of refusedBy) {
              expect(counter).toBeDefined();
              if (counter !== undefined) expect(admitted.get(counter.key)).toBe(counter.limit);
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
