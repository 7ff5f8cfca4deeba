import type { RequestFacts } from '../../../lib/core/facts';
import {
  type IdempotencyClaim,
  type IdempotencyEvent,
  type IdempotencyMode,
  IdempotencyRule,
  type IdempotencyStep,
} from '../../../lib/core/idempotency';
import type { TollgateError } from '../../../lib/errors';
import type { StoredAnswer } from '../../../lib/idempotency/answer';
import {
  type IdempotencyStore,
  IdempotencyStoreError,
  MemoryIdempotencyStore,
} from '../../../lib/idempotency/store';
import type { AuthContext } from '../../../lib/types';

/** The rule every door applies to a request that may carry an `Idempotency-Key`. */

const SECRET = 'rule test secret, at least 32 bytes long';
const MAX_ANSWER_BYTES = 32;

function auth(accountId = 'acct_1'): AuthContext {
  return { accountId, keyId: `key_of_${accountId}`, role: 'administrator', credential: 'secret' };
}

function facts(
  key: string | string[] | undefined,
  overrides: { method?: string; path?: string; body?: string } = {},
): RequestFacts {
  const path = overrides.path ?? '/api/v1/payouts/';
  return {
    method: overrides.method ?? 'POST',
    path,
    originalUrl: `${path}?trace=1`,
    headersDistinct:
      key === undefined ? {} : { 'idempotency-key': Array.isArray(key) ? key : [key] },
    rawBody: Buffer.from(overrides.body ?? '{"amount":100}', 'utf8'),
  };
}

const ANSWER: StoredAnswer = {
  kind: 'answer',
  status: 201,
  contentType: 'application/json',
  body: Buffer.from('{"id":"po_1"}'),
};

function subject<S extends IdempotencyStore = MemoryIdempotencyStore>(
  store: S = new MemoryIdempotencyStore() as IdempotencyStore as S,
  secret = SECRET,
) {
  const events: IdempotencyEvent[] = [];
  const rule = new IdempotencyRule({
    secret,
    store,
    ttlSeconds: 60,
    maxAnswerBytes: MAX_ANSWER_BYTES,
    onOutcome: (event) => events.push(event),
  });
  const check = (
    request: RequestFacts,
    mode: IdempotencyMode = 'optional',
    account: AuthContext = auth(),
  ): Promise<IdempotencyStep | undefined> =>
    Promise.resolve(rule.check(request, 'payouts', mode, account));
  const outcomes = (): string[] => events.map((event) => event.outcome);
  return { rule, events, check, outcomes, store };
}

function claimOf(step: IdempotencyStep | undefined): IdempotencyClaim {
  if (step?.kind !== 'claimed') throw new Error(`expected a claim, got ${JSON.stringify(step)}`);
  return step.claim;
}

function refusalOf(step: IdempotencyStep | undefined): TollgateError {
  if (step?.kind !== 'refused') throw new Error(`expected a refusal, got ${JSON.stringify(step)}`);
  return step.error;
}

function replayOf(step: IdempotencyStep | undefined): StoredAnswer {
  if (step?.kind !== 'replay') throw new Error(`expected a replay, got ${JSON.stringify(step)}`);
  return step.answer;
}

describe('IdempotencyRule', () => {
  it('lets a request without a key through on an optional route, reporting nothing', async () => {
    const { check, events } = subject();
    expect(await check(facts(undefined))).toBeUndefined();
    expect(events).toEqual([]);
  });

  it('refuses a request without a key on a required route: missing', async () => {
    const { check, events, store } = subject();
    const request = facts(undefined);
    const error = refusalOf(await check(request, 'required'));
    expect({ status: error.status, code: error.code }).toEqual({
      status: 400,
      code: 'idempotency_key_required',
    });
    expect(events).toEqual([
      { policy: 'payouts', outcome: 'missing', facts: request, auth: auth() },
    ]);
    expect(store.size).toBe(0);
  });

  it.each([[['']], [['"']], [['a b']], [['a', 'b']], [['x'.repeat(256)]]])(
    'refuses a malformed key %j: invalid, nothing claimed',
    async (values) => {
      const { check, outcomes, store } = subject();
      for (const mode of ['optional', 'required'] as const) {
        const error = refusalOf(await check(facts(values), mode));
        expect({ status: error.status, code: error.code }).toEqual({
          status: 400,
          code: 'idempotency_key_invalid',
        });
      }
      expect(outcomes()).toEqual(['invalid', 'invalid']);
      expect(store.size).toBe(0);
    },
  );

  it('claims a first use, stores its answer and replays it to the same request', async () => {
    const { check, events, outcomes } = subject();
    const first = facts('k-1');
    const claim = claimOf(await check(first));
    expect(claim.maxAnswerBytes).toBe(MAX_ANSWER_BYTES);
    await claim.complete(ANSWER);
    // Settled once the store has it: the next retry is a replay.
    const retry = facts('k-1');
    const replayed = replayOf(await check(retry));
    expect(replayed).toEqual(ANSWER);
    expect(outcomes()).toEqual(['claimed', 'stored', 'replayed']);
    expect(events.map((event) => event.facts)).toEqual([first, first, retry]);
    expect(events.every((event) => event.policy === 'payouts')).toBe(true);
  });

  it('replays an answer of its own (a timeout) with its status, code and message', async () => {
    const { check } = subject();
    const timeout: StoredAnswer = {
      kind: 'error',
      status: 504,
      code: 'upstream_timeout',
      message: 'Upstream timed out',
    };
    await claimOf(await check(facts('k'))).complete(timeout);
    expect(replayOf(await check(facts('k')))).toEqual(timeout);
  });

  it('answers a retry in flight 409 in_use with Retry-After: 1, on the bare and quoted key', async () => {
    const { check, outcomes } = subject();
    claimOf(await check(facts('8e03-key')));
    for (const value of ['8e03-key', '"8e03-key"']) {
      const error = refusalOf(await check(facts(value)));
      expect({ status: error.status, code: error.code, headers: error.headers }).toEqual({
        status: 409,
        code: 'idempotency_key_in_use',
        headers: { 'Retry-After': '1' },
      });
    }
    expect(outcomes()).toEqual(['claimed', 'in_use', 'in_use']);
  });

  it('tells the retries of a claim older than inFlightSeconds its outcome is unknown: 409 without Retry-After', async () => {
    let now = 1_700_000_000_000;
    const store = new MemoryIdempotencyStore();
    const rule = new IdempotencyRule({
      secret: SECRET,
      store,
      ttlSeconds: 60,
      maxAnswerBytes: MAX_ANSWER_BYTES,
      inFlightSeconds: 15,
      now: () => now,
    });
    const ask = async (): Promise<IdempotencyStep | undefined> =>
      rule.check(facts('stalled'), 'payouts', 'optional', auth());
    // Claimed, then never answered: its instance stopped, or a reverse proxy forwarded it.
    claimOf(await ask());
    now += 15_000;
    expect(refusalOf(await ask()).headers).toEqual({ 'Retry-After': '1' });
    now += 1;
    const late = refusalOf(await ask());
    expect({ status: late.status, code: late.code, headers: late.headers }).toEqual({
      status: 409,
      code: 'idempotency_key_in_use',
      headers: {},
    });
    expect(late.message).toMatch(/outcome is unknown/);
  });

  it('names the same record with the quoted and bare key: a quoted retry is replayed', async () => {
    const { check } = subject();
    await claimOf(await check(facts('"8e03-key"'))).complete(ANSWER);
    expect(replayOf(await check(facts('8e03-key')))).toEqual(ANSWER);
  });

  it.each([
    ['another body', { body: '{"amount":101}' }],
    ['another path', { path: '/api/v1/checkout/' }],
    ['another method', { method: 'PUT' }],
  ])('refuses the key with %s 422 reused, in flight and answered', async (_label, changed) => {
    const { check, outcomes } = subject();
    const claim = claimOf(await check(facts('k')));
    const inFlight = refusalOf(await check(facts('k', changed)));
    expect({ status: inFlight.status, code: inFlight.code }).toEqual({
      status: 422,
      code: 'idempotency_key_reused',
    });
    await claim.complete(ANSWER);
    const answered = refusalOf(await check(facts('k', changed)));
    expect(answered.code).toBe('idempotency_key_reused');
    expect(outcomes()).toEqual(['claimed', 'reused', 'stored', 'reused']);
  });

  it('keeps keys apart per account', async () => {
    const { check } = subject();
    await claimOf(await check(facts('k'), 'optional', auth('acct_1'))).complete(ANSWER);
    const other = claimOf(await check(facts('k'), 'optional', auth('acct_2')));
    await other.complete({ ...ANSWER, body: Buffer.from('{"id":"po_2"}') });
    expect(replayOf(await check(facts('k'), 'optional', auth('acct_1')))).toEqual(ANSWER);
    expect(replayOf(await check(facts('k'), 'optional', auth('acct_2'))).kind).toBe('answer');
  });

  it('releases a claim whose request never reached the upstream: the retry is claimed', async () => {
    const { check, outcomes } = subject();
    await claimOf(await check(facts('k'))).release();
    const again = claimOf(await check(facts('k')));
    await again.complete(ANSWER);
    expect(replayOf(await check(facts('k')))).toEqual(ANSWER);
    expect(outcomes()).toEqual(['claimed', 'released', 'claimed', 'stored', 'replayed']);
  });

  it('settles a claim once: a second complete, tooLarge or release changes nothing', async () => {
    const { check, outcomes } = subject();
    const claim = claimOf(await check(facts('k')));
    await claim.complete(ANSWER);
    await claim.release();
    await claim.tooLarge(500);
    await claim.complete({ ...ANSWER, status: 500 });
    expect(replayOf(await check(facts('k')))).toEqual(ANSWER);
    expect(outcomes()).toEqual(['claimed', 'stored', 'replayed']);
  });

  it('refuses the retries of an answer too large 409, naming its status, without Retry-After', async () => {
    const { check, outcomes } = subject();
    await claimOf(await check(facts('a'))).tooLarge(201);
    await claimOf(await check(facts('b'))).complete({
      ...ANSWER,
      status: 202,
      body: Buffer.alloc(MAX_ANSWER_BYTES + 1, 0x61),
    });
    // At the bound: kept.
    await claimOf(await check(facts('c'))).complete({
      ...ANSWER,
      body: Buffer.alloc(MAX_ANSWER_BYTES, 0x61),
    });
    for (const [key, status] of [
      ['a', 201],
      ['b', 202],
    ] as const) {
      const error = refusalOf(await check(facts(key)));
      expect({ status: error.status, code: error.code, headers: error.headers }).toEqual({
        status: 409,
        code: 'idempotency_key_in_use',
        headers: {},
      });
      expect(error.message).toContain(`status ${status}`);
    }
    expect(replayOf(await check(facts('c'))).kind).toBe('answer');
    expect(outcomes()).toEqual([
      'claimed',
      'too_large',
      'claimed',
      'too_large',
      'claimed',
      'stored',
      'in_use',
      'in_use',
      'replayed',
    ]);
  });

  it('reports not_stored when the store cannot take the answer; its retries get 409', async () => {
    // Room for a claim, not for a sealed answer.
    const { check, outcomes } = subject(new MemoryIdempotencyStore({ maxCharacters: 100 }));
    await claimOf(await check(facts('k'))).complete(ANSWER);
    const error = refusalOf(await check(facts('k')));
    expect({ status: error.status, code: error.code }).toEqual({
      status: 409,
      code: 'idempotency_key_in_use',
    });
    expect(outcomes()).toEqual(['claimed', 'not_stored', 'in_use']);
  });

  it('answers 503 unavailable when the store is full, claiming nothing', async () => {
    const { check, outcomes, store } = subject(new MemoryIdempotencyStore({ maxRecords: 1 }));
    claimOf(await check(facts('a')));
    const error = refusalOf(await check(facts('b')));
    expect({ status: error.status, code: error.code, headers: error.headers }).toEqual({
      status: 503,
      code: 'idempotency_unavailable',
      headers: { 'Retry-After': '1' },
    });
    expect(error.message).toMatch(/Too many idempotency keys/);
    expect(store.size).toBe(1);
    expect(outcomes()).toEqual(['claimed', 'unavailable']);
  });

  it('withdraws a claim that landed although the store call failed (a late answer): the retry claims the key', async () => {
    const memory = new MemoryIdempotencyStore();
    let late = true;
    // A store whose claim is written, then reported failed: a Redis answering after the timeout.
    const store: IdempotencyStore = {
      state: () => memory.state(),
      claim: async (name, claim, ttlMs) => {
        const found = await memory.claim(name, claim, ttlMs);
        if (!late) return found;
        late = false;
        throw new IdempotencyStoreError('unavailable');
      },
      settle: (...args) => memory.settle(...args),
      release: (...args) => memory.release(...args),
    };
    const { check, outcomes } = subject(store);
    expect(refusalOf(await check(facts('late'))).code).toBe('idempotency_unavailable');
    claimOf(await check(facts('late')));
    expect(outcomes()).toEqual(['unavailable', 'claimed']);
  });

  it('never replays nor forwards again a key stored under another secret: 409, unknown outcome', async () => {
    // Contract section 17: an answer that fails to open (the secret changed) is an unknown outcome.
    const store = new MemoryIdempotencyStore();
    const before = subject(store, SECRET);
    await claimOf(await before.check(facts('answered'))).complete(ANSWER);
    await claimOf(await before.check(facts('too-large'))).tooLarge(201);
    claimOf(await before.check(facts('in-flight')));
    const after = subject(store, `${SECRET} rotated`);
    for (const key of ['answered', 'too-large', 'in-flight']) {
      const error = refusalOf(await after.check(facts(key)));
      expect({ key, status: error.status, code: error.code }).toEqual({
        key,
        status: 409,
        code: 'idempotency_key_in_use',
      });
      // Another request with the key: still never forwarded.
      const other = refusalOf(await after.check(facts(key, { body: '{"amount":1}' })));
      expect({ key, status: other.status }).toEqual({ key, status: 409 });
    }
    expect(after.outcomes()).toEqual(['in_use', 'in_use', 'in_use', 'in_use', 'in_use', 'in_use']);
    // An instance still on the old secret replays it, and keys new to the store are claimed.
    expect(replayOf(await before.check(facts('answered')))).toEqual(ANSWER);
    claimOf(await after.check(facts('new-key')));
  });

  it('refuses 409 a record it cannot open, and forwards nothing', async () => {
    // A store that hands back a damaged answer under the right name and fingerprint.
    const memory = new MemoryIdempotencyStore();
    const damaging: IdempotencyStore = {
      state: () => memory.state(),
      claim: async (name, claim, ttlMs) => {
        const found = await memory.claim(name, claim, ttlMs);
        return found?.startsWith('a') === true ? `${found.slice(0, -8)}AAAAAAA=` : found;
      },
      settle: (name, claim, record, ttlMs) => memory.settle(name, claim, record, ttlMs),
      release: (name, claim) => memory.release(name, claim),
    };
    const { check, outcomes } = subject(damaging);
    await claimOf(await check(facts('k'))).complete(ANSWER);
    const error = refusalOf(await check(facts('k')));
    expect({ status: error.status, code: error.code }).toEqual({
      status: 409,
      code: 'idempotency_key_in_use',
    });
    expect(error.message).toMatch(/unknown/);
    expect(outcomes()).toEqual(['claimed', 'stored', 'in_use']);
  });
});
