import fc from 'fast-check';
import { Redis } from 'ioredis';
import type { RequestFacts } from '../../lib/core/facts';
import {
  type IdempotencyClaim,
  type IdempotencyOutcome,
  IdempotencyRule,
  type IdempotencyStep,
} from '../../lib/core/idempotency';
import { TollgateError } from '../../lib/errors';
import type { StoredAnswer } from '../../lib/idempotency/answer';
import {
  type IdempotencyStore,
  MemoryIdempotencyStore,
  RedisIdempotencyStore,
} from '../../lib/idempotency/store';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import type { AuthContext } from '../../lib/types';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
} from '../helpers/redis';

/**
 * Idempotency keys under random interleavings, against a reference model. Three instances (three
 * `IdempotencyRule` objects) share one store: a `MemoryIdempotencyStore`, or a
 * `RedisIdempotencyStore` on a real Redis. A run is a sequence of rounds; the actions of a round
 * start together (their promises run concurrently) and are:
 *
 * - a request (an instance, an account, a key sent bare or quoted, one of a few fingerprints);
 *   on `claimed` the test's door "forwards" it to a model upstream and keeps the claim;
 * - the settling of a claim kept from an earlier round: the upstream answered (`complete` with a
 *   random status, content type and body, some larger than the bound), timed out (`complete` with
 *   the gateway's own `504 upstream_timeout`), refused the connection (`release`: the request never
 *   reached the upstream), or answered too large (`tooLarge`);
 *
 * and, between rounds, an instance restart: its rule object is replaced while the store survives,
 * and the claims it held are dropped, never settled (the forward may have reached the upstream).
 * With the memory store, whose clock the test holds, the clock may also move past every record's
 * lifetime: each key is new again, and the claims still held become stale (settling one must
 * change nothing: a late `complete` is `not_stored`, a late `release` removes no newer claim).
 *
 * Checked after every round:
 * - linearizability: for each (account, key), some order of the round's actions on it, applied to
 *   the model's record, gives exactly the outcomes observed (claimed; replay; 409
 *   idempotency_key_in_use, with `Retry-After: 1` while a claim is outstanding and without it after
 *   an answer too large; 422 idempotency_key_reused for another fingerprint);
 * - (a) the upstream receives at most one forward per (account, key) that reached it: a second
 *   `claimed` is only ever given after a release;
 * - (b) a replay goes only to the account and fingerprint that completed the key, and equals what
 *   was completed byte for byte;
 * - the outcomes reported through `onOutcome` are the steps returned, and every settlement is kept
 *   (`stored`, `too_large`, `released`, never `not_stored`);
 * - in Redis, the records left are exactly the model's.
 */

const MAX_ANSWER_BYTES = 64;
const TTL_SECONDS = 600;
/** How long a first request may be answered; a claim lives this long beyond the lifetime. */
const IN_FLIGHT_SECONDS = 60;
const INSTANCES = 3;
const SECRET = 'property-test secret, at least 32 bytes long';
const ACCOUNTS = ['acct_1', 'acct_2'] as const;
/** A key with a `"` inside is only valid bare. */
const KEYS = ['8e03978e-40d5-43e8-bc93-6894a57f9324', 'k', 'pay"out'] as const;
interface Fingerprint {
  readonly method: string;
  readonly path: string;
  readonly body: string | undefined;
}
const FINGERPRINTS: readonly Fingerprint[] = [
  { method: 'POST', path: '/api/v1/payouts/', body: '{"amount":100}' },
  { method: 'POST', path: '/api/v1/payouts/', body: '{"amount":101}' },
  { method: 'POST', path: '/api/v1/checkout/', body: '{"amount":100}' },
  { method: 'PUT', path: '/api/v1/payouts/', body: '{"amount":100}' },
  { method: 'POST', path: '/api/v1/payouts/', body: undefined },
];
const TIMEOUT_ANSWER: StoredAnswer = {
  kind: 'error',
  status: 504,
  code: 'upstream_timeout',
  message: 'The upstream did not answer in time',
};

type Fate =
  | { readonly kind: 'complete'; readonly answer: StoredAnswer }
  | { readonly kind: 'tooLarge'; readonly status: number }
  | { readonly kind: 'release' };

interface RequestAction {
  readonly t: 'request';
  readonly instance: number;
  readonly account: number;
  readonly key: number;
  readonly quoted: boolean;
  readonly fingerprint: number;
}
interface SettleAction {
  readonly t: 'settle';
  /** Which claim kept from earlier rounds, modulo their number. */
  readonly pick: number;
  readonly fate: Fate;
}
type Round =
  | { readonly t: 'round'; readonly actions: readonly (RequestAction | SettleAction)[] }
  | { readonly t: 'restart'; readonly instance: number }
  /** The memory store's clock moves past every record's lifetime (memory runs only). */
  | { readonly t: 'expire' };

const requestAction: fc.Arbitrary<RequestAction> = fc.record({
  t: fc.constant('request' as const),
  instance: fc.integer({ min: 0, max: INSTANCES - 1 }),
  account: fc.integer({ min: 0, max: ACCOUNTS.length - 1 }),
  key: fc.integer({ min: 0, max: KEYS.length - 1 }),
  quoted: fc.boolean(),
  // Mostly the first fingerprint, so that most repeats of a key are retries.
  fingerprint: fc.oneof(
    { weight: 3, arbitrary: fc.constant(0) },
    { weight: 2, arbitrary: fc.integer({ min: 1, max: FINGERPRINTS.length - 1 }) },
  ),
});

const upstreamAnswer: fc.Arbitrary<StoredAnswer> = fc.record({
  kind: fc.constant('answer' as const),
  status: fc.integer({ min: 100, max: 599 }),
  contentType: fc.constantFrom(
    undefined,
    'application/json',
    'application/json; charset=utf-8',
    'text/plain; charset=latin1',
    '',
  ),
  // Some larger than the bound: kept as too large.
  body: fc
    .oneof(
      fc.uint8Array({ maxLength: 24 }),
      fc.uint8Array({ minLength: MAX_ANSWER_BYTES - 1, maxLength: MAX_ANSWER_BYTES + 2 }),
    )
    .map((bytes) => Buffer.from(bytes)),
});

const fate: fc.Arbitrary<Fate> = fc.oneof(
  { weight: 3, arbitrary: upstreamAnswer.map((answer) => ({ kind: 'complete' as const, answer })) },
  { weight: 1, arbitrary: fc.constant({ kind: 'complete' as const, answer: TIMEOUT_ANSWER }) },
  { weight: 2, arbitrary: fc.constant({ kind: 'release' as const }) },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 100, max: 599 })
      .map((status) => ({ kind: 'tooLarge' as const, status })),
  },
);

const settleAction: fc.Arbitrary<SettleAction> = fc.record({
  t: fc.constant('settle' as const),
  pick: fc.nat({ max: 20 }),
  fate,
});

const roundOrRestart: fc.Arbitrary<Round> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      t: fc.constant('round' as const),
      actions: fc.array(
        fc.oneof({ weight: 3, arbitrary: requestAction }, { weight: 2, arbitrary: settleAction }),
        { minLength: 1, maxLength: 6, size: 'max' },
      ),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('restart' as const),
      instance: fc.integer({ min: 0, max: INSTANCES - 1 }),
    }),
  },
);

const rounds = fc.array(roundOrRestart, { minLength: 1, maxLength: 25, size: 'max' });
const roundsWithExpiry = fc.array(
  fc.oneof(
    { weight: 12, arbitrary: roundOrRestart },
    { weight: 1, arbitrary: fc.constant({ t: 'expire' as const }) },
  ),
  { minLength: 1, maxLength: 30, size: 'max' },
);

/** The model's record of one (account, key); `undefined`: none. */
type ModelRecord =
  | { readonly kind: 'claim'; readonly fingerprint: number; readonly claimId: number }
  | { readonly kind: 'answered'; readonly fingerprint: number; readonly answer: StoredAnswer }
  | { readonly kind: 'tooLarge'; readonly fingerprint: number; readonly status: number };

/** What a request got, as the door sees it. */
type Observed =
  | { readonly kind: 'claimed'; readonly claimId: number }
  | { readonly kind: 'replay'; readonly answer: StoredAnswer }
  | { readonly kind: 'refused'; readonly error: TollgateError }
  | { readonly kind: 'none' };

/** One action of a round on one (account, key), with what it observed. */
type Op =
  | { readonly t: 'request'; readonly fingerprint: number; readonly observed: Observed }
  | {
      readonly t: 'settle';
      readonly claimId: number;
      readonly fate: Fate;
      /** Its record expired meanwhile: the settlement changes nothing. */
      readonly stale: boolean;
    };

function sameAnswer(a: StoredAnswer, b: StoredAnswer): boolean {
  if (a.kind === 'answer' && b.kind === 'answer') {
    return a.status === b.status && a.contentType === b.contentType && a.body.equals(b.body);
  }
  if (a.kind === 'error' && b.kind === 'error') {
    return a.status === b.status && a.code === b.code && a.message === b.message;
  }
  return false;
}

const NO_MATCH = Symbol('no match');
type Applied = ModelRecord | undefined | typeof NO_MATCH;

/** The record after `op` on `record`, or `NO_MATCH` when what `op` observed is not the model's. */
function apply(record: ModelRecord | undefined, op: Op): Applied {
  if (op.t === 'settle') {
    if (op.stale) return record;
    if (record?.kind !== 'claim' || record.claimId !== op.claimId) return NO_MATCH;
    const settled = op.fate;
    if (settled.kind === 'release') return undefined;
    if (settled.kind === 'tooLarge') {
      return { kind: 'tooLarge', fingerprint: record.fingerprint, status: settled.status };
    }
    const { answer } = settled;
    return answer.kind === 'answer' && answer.body.length > MAX_ANSWER_BYTES
      ? { kind: 'tooLarge', fingerprint: record.fingerprint, status: answer.status }
      : { kind: 'answered', fingerprint: record.fingerprint, answer };
  }
  const { observed, fingerprint } = op;
  if (record === undefined) {
    return observed.kind === 'claimed'
      ? { kind: 'claim', fingerprint, claimId: observed.claimId }
      : NO_MATCH;
  }
  if (record.fingerprint !== fingerprint) {
    return observed.kind === 'refused' &&
      observed.error.status === 422 &&
      observed.error.code === 'idempotency_key_reused'
      ? record
      : NO_MATCH;
  }
  switch (record.kind) {
    case 'claim':
      return observed.kind === 'refused' &&
        observed.error.status === 409 &&
        observed.error.code === 'idempotency_key_in_use' &&
        observed.error.headers['Retry-After'] === '1'
        ? record
        : NO_MATCH;
    case 'tooLarge':
      return observed.kind === 'refused' &&
        observed.error.status === 409 &&
        observed.error.code === 'idempotency_key_in_use' &&
        observed.error.headers['Retry-After'] === undefined &&
        observed.error.message.includes(`status ${record.status}`)
        ? record
        : NO_MATCH;
    case 'answered':
      return observed.kind === 'replay' && sameAnswer(observed.answer, record.answer)
        ? record
        : NO_MATCH;
  }
}

/**
 * Some order of `ops` (actions that ran concurrently on one record) that gives what each observed,
 * from `record`: the record it leaves, or `NO_MATCH` when no order does.
 */
function linearize(record: ModelRecord | undefined, ops: readonly Op[]): Applied {
  if (ops.length === 0) return record;
  for (let index = 0; index < ops.length; index++) {
    const op = ops[index];
    if (op === undefined) continue;
    const next = apply(record, op);
    if (next === NO_MATCH) continue;
    const rest = linearize(next, [...ops.slice(0, index), ...ops.slice(index + 1)]);
    if (rest !== NO_MATCH) return rest;
  }
  return NO_MATCH;
}

interface Kept {
  readonly claimId: number;
  readonly instance: number;
  readonly record: string;
  readonly account: number;
  readonly fingerprint: number;
  readonly claim: IdempotencyClaim;
  readonly facts: RequestFacts;
}

const STEP_OUTCOME: Readonly<Record<Observed['kind'], IdempotencyOutcome | undefined>> = {
  claimed: 'claimed',
  replay: 'replayed',
  refused: undefined,
  none: undefined,
};

function authOf(account: number): AuthContext {
  return {
    accountId: ACCOUNTS[account] ?? 'acct_missing',
    keyId: `key_${account}`,
    role: 'administrator',
    credential: 'secret',
  };
}

/** A key as a request sends it: bare, or quoted when it can be. */
function headerValue(key: string, quoted: boolean): string {
  return quoted && !key.includes('"') ? `"${key}"` : key;
}

interface RunResult {
  /** The model's records, by `account|key`. */
  readonly records: ReadonlyMap<string, ModelRecord>;
}

/** Runs `plan` against rules sharing `store`, checking every round against the model. */
async function run(
  store: IdempotencyStore,
  plan: readonly Round[],
  /** Moves the store's clock past every record's lifetime; required for `expire` steps. */
  expireAll?: () => void,
): Promise<RunResult> {
  const outcomes = new Map<RequestFacts, IdempotencyOutcome[]>();
  const makeRule = (): IdempotencyRule =>
    new IdempotencyRule({
      secret: SECRET,
      store,
      ttlSeconds: TTL_SECONDS,
      maxAnswerBytes: MAX_ANSWER_BYTES,
      inFlightSeconds: IN_FLIGHT_SECONDS,
      onOutcome: (event) => {
        const seen = outcomes.get(event.facts);
        if (seen === undefined) outcomes.set(event.facts, [event.outcome]);
        else seen.push(event.outcome);
      },
    });
  const rules = Array.from({ length: INSTANCES }, makeRule);
  const records = new Map<string, ModelRecord>();
  /** Forwards that reached the upstream (or may have), by `account|key`. */
  const reached = new Map<string, number>();
  /** What was completed for each `account|key`, by whom. */
  const completed = new Map<string, { fingerprint: number; answer: StoredAnswer }>();
  let kept: Kept[] = [];
  /** Claims whose record expired: settling them changes nothing. */
  const stale = new Set<number>();
  let nextClaimId = 0;
  let requests = 0;

  const countForward = (record: string): void => {
    const count = (reached.get(record) ?? 0) + 1;
    reached.set(record, count);
    // (a): at most one forward per key reached the upstream within its lifetime.
    expect({ record, reached: count }).toEqual({ record, reached: 1 });
  };

  const request = async (action: RequestAction): Promise<[string, Op, RequestFacts]> => {
    const key = KEYS[action.key] ?? '';
    const spec = FINGERPRINTS[action.fingerprint] ?? FINGERPRINTS[0];
    if (spec === undefined) throw new Error('no fingerprint');
    const facts: RequestFacts = {
      method: spec.method,
      path: spec.path,
      originalUrl: `${spec.path}?request=${++requests}`,
      headersDistinct: { 'idempotency-key': [headerValue(key, action.quoted)] },
      rawBody: spec.body === undefined ? undefined : Buffer.from(spec.body, 'utf8'),
    };
    const record = `${action.account}|${action.key}`;
    const rule = rules[action.instance];
    if (rule === undefined) throw new Error('no instance');
    const step: IdempotencyStep | undefined = await rule.check(
      facts,
      'payouts',
      'optional',
      authOf(action.account),
    );
    let observed: Observed;
    if (step === undefined) {
      observed = { kind: 'none' };
    } else if (step.kind === 'claimed') {
      const claimId = nextClaimId++;
      observed = { kind: 'claimed', claimId };
      // The door forwards the request; whether it reached the upstream is known when it settles.
      kept.push({
        claimId,
        instance: action.instance,
        record,
        account: action.account,
        fingerprint: action.fingerprint,
        claim: step.claim,
        facts,
      });
    } else if (step.kind === 'replay') {
      observed = { kind: 'replay', answer: step.answer };
      // (b): replayed only to the account and fingerprint that completed the key, byte for byte.
      const first = completed.get(record);
      expect(first).toBeDefined();
      expect(first?.fingerprint).toBe(action.fingerprint);
      expect(first !== undefined && sameAnswer(step.answer, first.answer)).toBe(true);
    } else {
      observed = { kind: 'refused', error: step.error };
    }
    return [record, { t: 'request', fingerprint: action.fingerprint, observed }, facts];
  };

  const settle = async (target: Kept, settled: Fate): Promise<[string, Op, RequestFacts]> => {
    const isStale = stale.has(target.claimId);
    const op: Op = { t: 'settle', claimId: target.claimId, fate: settled, stale: isStale };
    if (isStale) {
      // Its forward belongs to a past lifetime of the key, and what it settles is not kept.
      if (settled.kind === 'release') await target.claim.release();
      else if (settled.kind === 'tooLarge') await target.claim.tooLarge(settled.status);
      else await target.claim.complete(settled.answer);
      return [target.record, op, target.facts];
    }
    if (settled.kind === 'release') {
      await target.claim.release();
    } else {
      countForward(target.record);
      if (settled.kind === 'tooLarge') {
        await target.claim.tooLarge(settled.status);
      } else {
        const { answer } = settled;
        if (answer.kind === 'error' || answer.body.length <= MAX_ANSWER_BYTES) {
          completed.set(target.record, { fingerprint: target.fingerprint, answer });
        }
        await target.claim.complete(answer);
      }
    }
    return [target.record, op, target.facts];
  };

  const expectOutcomes = (facts: RequestFacts, expected: readonly IdempotencyOutcome[]): void => {
    expect({ path: facts.originalUrl, outcomes: outcomes.get(facts) ?? [] }).toEqual({
      path: facts.originalUrl,
      outcomes: expected,
    });
  };

  const playRound = async (actions: readonly (RequestAction | SettleAction)[]): Promise<void> => {
    // Settlements pick among the claims kept before the round, each claim at most once.
    const available = [...kept];
    const started: Promise<[string, Op, RequestFacts]>[] = [];
    for (const action of actions) {
      if (action.t === 'request') {
        started.push(request(action));
        continue;
      }
      if (available.length === 0) continue;
      const [target] = available.splice(action.pick % available.length, 1);
      if (target === undefined) continue;
      kept = kept.filter((claim) => claim !== target);
      started.push(settle(target, action.fate));
    }
    const done = await Promise.all(started);
    const byRecord = new Map<string, Op[]>();
    for (const [record, op] of done) {
      const ops = byRecord.get(record);
      if (ops === undefined) byRecord.set(record, [op]);
      else ops.push(op);
    }
    for (const [record, ops] of byRecord) {
      const after = linearize(records.get(record), ops);
      if (after === NO_MATCH) {
        throw new Error(
          `no order of the round's actions on ${record} gives what they observed, from ${JSON.stringify(
            records.get(record),
          )}: ${JSON.stringify(ops.map(describeOp))}`,
        );
      }
      if (after === undefined) records.delete(record);
      else records.set(record, after);
    }
    for (const [, op, facts] of done) {
      if (op.t === 'settle') {
        const claimed: IdempotencyOutcome = 'claimed';
        const expected: IdempotencyOutcome =
          op.fate.kind === 'release'
            ? 'released'
            : op.stale
              ? 'not_stored'
              : op.fate.kind === 'tooLarge' ||
                  (op.fate.answer.kind === 'answer' &&
                    op.fate.answer.body.length > MAX_ANSWER_BYTES)
                ? 'too_large'
                : 'stored';
        expectOutcomes(facts, [claimed, expected]);
      } else if (op.observed.kind === 'refused') {
        const refusal: IdempotencyOutcome =
          op.observed.error.code === 'idempotency_key_reused' ? 'reused' : 'in_use';
        expectOutcomes(facts, [refusal]);
      } else {
        // A claim of this round is settled in a later one, if ever.
        const reported = STEP_OUTCOME[op.observed.kind];
        expectOutcomes(facts, reported === undefined ? [] : [reported]);
      }
    }
  };

  for (const step of plan) {
    if (step.t === 'expire') {
      if (expireAll === undefined) throw new Error('this store cannot be aged');
      // Every record's lifetime ends: a key is new again, claims still held are stale.
      expireAll();
      records.clear();
      reached.clear();
      completed.clear();
      for (const claim of kept) stale.add(claim.claimId);
      continue;
    }
    if (step.t === 'restart') {
      // The instance dies mid-request: its claims are never settled, their forwards may have
      // reached the upstream. The store survives.
      for (const claim of kept.filter((held) => held.instance === step.instance)) {
        if (!stale.has(claim.claimId)) countForward(claim.record);
      }
      kept = kept.filter((held) => held.instance !== step.instance);
      rules[step.instance] = makeRule();
      continue;
    }
    await playRound(step.actions);
  }
  // Every (account, key) asked once more with its first fingerprint, one after the other.
  for (let account = 0; account < ACCOUNTS.length; account++) {
    for (let key = 0; key < KEYS.length; key++) {
      await playRound([
        { t: 'request', instance: 0, account, key, quoted: key % 2 === 0, fingerprint: 0 },
      ]);
    }
  }
  // Claims still in flight: their forwards reached the upstream.
  for (const claim of kept) if (!stale.has(claim.claimId)) countForward(claim.record);
  return { records };
}

function describeOp(op: Op): unknown {
  if (op.t === 'settle') return { settle: op.claimId, fate: op.fate.kind, stale: op.stale };
  const { observed } = op;
  return {
    request: op.fingerprint,
    observed:
      observed.kind === 'refused'
        ? `${observed.error.status} ${observed.error.code}`
        : observed.kind === 'replay'
          ? `replay ${observed.answer.status}`
          : observed.kind,
  };
}

describe('idempotency keys against a model, instances sharing a memory store', () => {
  it('forwards each key at most once, replays only what was completed, refuses the rest', async () => {
    await fc.assert(
      fc.asyncProperty(roundsWithExpiry, async (plan) => {
        let now = 0;
        const store = new MemoryIdempotencyStore({ now: () => now });
        await run(store, plan, () => {
          now += (TTL_SECONDS + IN_FLIGHT_SECONDS) * 1000;
        });
        expect(store.size).toBeLessThanOrEqual(ACCOUNTS.length * KEYS.length);
      }),
      { numRuns: 100 },
    );
  });

  it('the model check fails on a store that forgets answers', async () => {
    // A store whose claim never sees a record: every retry would be forwarded again.
    const forgetful: IdempotencyStore = {
      state: () => 'memory',
      claim: () => Promise.resolve(undefined),
      settle: () => Promise.resolve(true),
      release: () => Promise.resolve(),
    };
    const retried: Round[] = [
      { t: 'round', actions: [request(0, 0), request(1, 0)] },
      { t: 'round', actions: [{ t: 'settle', pick: 0, fate: { kind: 'complete', answer: ok } }] },
      { t: 'round', actions: [request(2, 0)] },
    ];
    await expect(run(forgetful, retried)).rejects.toThrow();
  });
});

const ok: StoredAnswer = {
  kind: 'answer',
  status: 201,
  contentType: 'application/json',
  body: Buffer.from('{"id":"po_1"}'),
};

function request(instance: number, fingerprint: number): RequestAction {
  return { t: 'request', instance, account: 0, key: 0, quoted: false, fingerprint };
}

describeWithRedis('idempotency keys against a model, instances sharing Redis', () => {
  let redis: TestRedis;
  let connection: LimiterRedisConnection;
  let admin: Redis;
  let runs = 0;

  beforeAll(async () => {
    const acquired = await acquireTestRedis();
    if (acquired === undefined) throw new Error('no Redis');
    redis = acquired;
    // A generous command timeout: a timed-out claim is a 503, which this model does not cover.
    connection = createLimiterRedis({ url: redis.url, commandTimeoutMs: 5000 });
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

  async function keysUnder(prefix: string): Promise<string[]> {
    const found: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      found.push(...keys);
    } while (cursor !== '0');
    return found;
  }

  it('forwards each key at most once, replays only what was completed, refuses the rest', async () => {
    await fc.assert(
      fc.asyncProperty(rounds, async (plan) => {
        const prefix = `${uniquePrefix('idempotency')}${++runs}:`;
        try {
          const { records } = await run(
            new RedisIdempotencyStore({ redis: connection, prefix }),
            plan,
          );
          // Redis holds exactly the model's records, one per (account, key), tagged per account.
          const keys = await keysUnder(prefix);
          expect(keys.length).toBe(records.size);
          for (const key of keys) {
            expect(key.slice(prefix.length)).toMatch(/^idem:\{acct_[12]\}:[A-Za-z0-9_-]{43}$/);
          }
        } finally {
          const keys = await keysUnder(prefix);
          if (keys.length > 0) await admin.del(...keys);
        }
      }),
      { numRuns: 60 },
    );
    expect(connection.health.state).toBe('shared');
  });
});
