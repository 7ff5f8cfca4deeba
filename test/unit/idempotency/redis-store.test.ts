import { Redis } from 'ioredis';
import type { RequestFacts } from '../../../lib/core/facts';
import { type IdempotencyOutcome, IdempotencyRule } from '../../../lib/core/idempotency';
import { IdempotencyStoreError, RedisIdempotencyStore } from '../../../lib/idempotency/store';
import {
  createLimiterRedis,
  type LimiterRedisConnection,
} from '../../../lib/rate-limit/redis-client';
import type { AuthContext } from '../../../lib/types';
import {
  acquireTestRedis,
  describeWithRedis,
  freePort,
  type TestRedis,
  uniquePrefix,
} from '../../helpers/redis';

/**
 * The Redis store on a real Redis: atomic claims, lifetimes, compare-and-set settlements and
 * releases, records tagged per account and unreadable, and a Redis that cannot be used refused.
 */

const SECRET = 'redis store test secret, at least 32 bytes';

async function waitUsable(connection: LimiterRedisConnection): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!connection.health.usable && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  expect(connection.health.state).toBe('shared');
}

async function storeError(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
}

describeWithRedis('RedisIdempotencyStore', () => {
  let redis: TestRedis;
  let connection: LimiterRedisConnection;
  let admin: Redis;
  const prefixes: string[] = [];

  function fresh(label: string): { store: RedisIdempotencyStore; prefix: string } {
    const prefix = uniquePrefix(`idem-${label}`);
    prefixes.push(prefix);
    return { store: new RedisIdempotencyStore({ redis: connection, prefix }), prefix };
  }

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

  beforeAll(async () => {
    const acquired = await acquireTestRedis();
    if (acquired === undefined) throw new Error('no Redis');
    redis = acquired;
    connection = createLimiterRedis({ url: redis.url, commandTimeoutMs: 2000 });
    admin = new Redis(redis.url);
    await waitUsable(connection);
  });

  afterAll(async () => {
    for (const prefix of prefixes) {
      const keys = await keysUnder(prefix);
      if (keys.length > 0) await admin.del(...keys);
    }
    await connection.close();
    admin.disconnect();
    await redis.close();
  });

  it('is shared while Redis is usable', () => {
    expect(fresh('state').store.state()).toBe('shared');
  });

  it('gives a name to exactly one of 50 concurrent claims', async () => {
    const { store, prefix } = fresh('concurrent');
    const found = await Promise.all(
      Array.from({ length: 50 }, (_, index) =>
        store.claim('idem:{acct}:n', `claim-${index}`, 60_000),
      ),
    );
    expect(found.filter((record) => record === undefined)).toHaveLength(1);
    const winner = `claim-${found.indexOf(undefined)}`;
    expect(found.filter((record) => record === winner)).toHaveLength(49);
    expect(await admin.get(`${prefix}idem:{acct}:n`)).toBe(winner);
  });

  it('sets the lifetime on a claim, and again on its settlement', async () => {
    const { store, prefix } = fresh('ttl');
    const key = `${prefix}idem:{acct}:n`;
    expect(await store.claim('idem:{acct}:n', 'c1', 60_000)).toBeUndefined();
    const claimed = await admin.pttl(key);
    expect(claimed).toBeGreaterThan(0);
    expect(claimed).toBeLessThanOrEqual(60_000);
    expect(await store.settle('idem:{acct}:n', 'c1', 'answer', 120_000)).toBe(true);
    const settled = await admin.pttl(key);
    expect(settled).toBeGreaterThan(60_000);
    expect(settled).toBeLessThanOrEqual(120_000);
  });

  it('forgets a record when its lifetime ends', async () => {
    const { store } = fresh('expiry');
    expect(await store.claim('idem:{acct}:n', 'c1', 50)).toBeUndefined();
    expect(await store.claim('idem:{acct}:n', 'c2', 50)).toBe('c1');
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(await store.claim('idem:{acct}:n', 'c3', 60_000)).toBeUndefined();
  });

  it('settles and releases only the claim it holds', async () => {
    const { store } = fresh('cas');
    const name = 'idem:{acct}:n';
    expect(await store.claim(name, 'c1', 60_000)).toBeUndefined();
    expect(await store.settle(name, 'c2', 'by-c2', 60_000)).toBe(false);
    await store.release(name, 'c2');
    expect(await store.claim(name, 'x', 60_000)).toBe('c1');
    expect(await store.settle(name, 'c1', 'answer', 60_000)).toBe(true);
    expect(await store.settle(name, 'c1', 'again', 60_000)).toBe(false);
    await store.release(name, 'c1');
    expect(await store.claim(name, 'x', 60_000)).toBe('answer');
    expect(await store.claim('idem:{acct}:m', 'c3', 60_000)).toBeUndefined();
    await store.release('idem:{acct}:m', 'c3');
    expect(await store.claim('idem:{acct}:m', 'c4', 60_000)).toBeUndefined();
    expect(await store.settle('idem:{acct}:absent', 'c5', 'answer', 60_000)).toBe(false);
  });

  describe('through the rule', () => {
    const auth: AuthContext = {
      accountId: 'acct_tagged',
      keyId: 'key_1',
      role: 'administrator',
      credential: 'secret',
    };
    const KEY = 'key-f00d-5ecret-idempotency-value';
    const BODY = '{"amount":4242,"iban":"DE89370400440532013000"}';
    const ANSWER_BODY = '{"id":"po_answer_body_marker","iban":"DE89370400440532013000"}';
    const facts: RequestFacts = {
      method: 'POST',
      path: '/api/v1/payouts/',
      originalUrl: '/api/v1/payouts/',
      headersDistinct: { 'idempotency-key': [KEY] },
      rawBody: Buffer.from(BODY),
    };

    it('keeps one record per key, tagged with its account, with nothing readable in it', async () => {
      const { store, prefix } = fresh('tagged');
      const rule = new IdempotencyRule({
        secret: SECRET,
        store,
        ttlSeconds: 60,
        maxAnswerBytes: 1024,
        inFlightSeconds: 30,
      });
      const step = await rule.check(facts, 'payouts', 'optional', auth);
      if (step?.kind !== 'claimed') throw new Error('expected a claim');
      const [claimed] = await keysUnder(prefix);
      // A claim outlives the in-flight window by a whole lifetime: 60 + 30 s.
      expect(await admin.pttl(claimed ?? '')).toBeGreaterThan(60_000);
      expect(await admin.pttl(claimed ?? '')).toBeLessThanOrEqual(90_000);
      expect(await keysUnder(prefix)).toHaveLength(1);
      expect(claimed?.slice(prefix.length)).toMatch(/^idem:\{acct_tagged\}:[A-Za-z0-9_-]{43}$/);
      // The first `{…}` of the whole key is the account's: its Cluster hash tag.
      expect(claimed && /\{([^}]*)\}/.exec(claimed)?.[1]).toBe('acct_tagged');
      await step.claim.complete({
        kind: 'answer',
        status: 201,
        contentType: 'application/json',
        body: Buffer.from(ANSWER_BODY),
      });
      expect(await keysUnder(prefix)).toEqual([claimed]);
      const stored = await admin.get(claimed ?? '');
      expect(stored).not.toBeNull();
      expect(await admin.pttl(claimed ?? '')).toBeGreaterThan(0);
      for (const secret of [
        KEY,
        BODY,
        ANSWER_BODY,
        'po_answer_body_marker',
        'DE89370400440532013000',
        '4242',
        '/api/v1/payouts/',
        Buffer.from(ANSWER_BODY).toString('base64'),
        Buffer.from('po_answer_body_marker').toString('base64'),
      ]) {
        expect({ secret, inValue: stored?.includes(secret) }).toEqual({ secret, inValue: false });
        expect({ secret, inName: claimed?.includes(secret) }).toEqual({ secret, inName: false });
      }
      // And yet a retry is replayed from it.
      const retry = await rule.check(facts, 'payouts', 'optional', auth);
      expect(retry?.kind === 'replay' && retry.answer.kind === 'answer').toBe(true);
      if (retry?.kind === 'replay' && retry.answer.kind === 'answer') {
        expect(retry.answer.body.toString()).toBe(ANSWER_BODY);
      }
    });
  });

  describe('when Redis cannot be used', () => {
    it('refuses every operation with IdempotencyStoreError, and the rule answers 503', async () => {
      // Nothing listens on this port.
      const away = createLimiterRedis({
        url: `redis://127.0.0.1:${await freePort()}`,
        connectTimeoutMs: 200,
      });
      try {
        const store = new RedisIdempotencyStore({ redis: away, prefix: uniquePrefix('idem-away') });
        expect(away.health.usable).toBe(false);
        expect(store.state()).toBe('degraded');
        for (const operation of [
          store.claim('idem:{a}:n', 'c', 60_000),
          store.settle('idem:{a}:n', 'c', 'r', 60_000),
          store.release('idem:{a}:n', 'c'),
        ]) {
          const error = await storeError(operation);
          expect(error).toBeInstanceOf(IdempotencyStoreError);
          expect((error as IdempotencyStoreError).reason).toBe('unavailable');
        }
        const outcomes: IdempotencyOutcome[] = [];
        const rule = new IdempotencyRule({
          secret: SECRET,
          store,
          ttlSeconds: 60,
          maxAnswerBytes: 1024,
          onOutcome: (event) => outcomes.push(event.outcome),
        });
        const step = await rule.check(
          {
            method: 'POST',
            path: '/api/v1/payouts/',
            originalUrl: '/api/v1/payouts/',
            headersDistinct: { 'idempotency-key': ['k'] },
          },
          'payouts',
          'optional',
          { accountId: 'a', keyId: 'k', role: 'administrator', credential: 'secret' },
        );
        expect(step?.kind).toBe('refused');
        if (step?.kind === 'refused') {
          expect({
            status: step.error.status,
            code: step.error.code,
            headers: step.error.headers,
          }).toEqual({
            status: 503,
            code: 'idempotency_unavailable',
            headers: { 'Retry-After': '1' },
          });
        }
        expect(outcomes).toEqual(['unavailable']);
      } finally {
        await away.close();
      }
    });

    it('sends nothing while the health cools down after a failure', async () => {
      const cooling = createLimiterRedis({ url: redis.url, commandTimeoutMs: 2000 });
      try {
        await waitUsable(cooling);
        const { prefix } = fresh('cooling');
        const store = new RedisIdempotencyStore({ redis: cooling, prefix });
        cooling.health.failed(new Error('a command failed'));
        expect(cooling.health.usable).toBe(false);
        const error = await storeError(store.claim('idem:{a}:n', 'c', 60_000));
        expect(error).toBeInstanceOf(IdempotencyStoreError);
        // Refused before Redis: nothing was claimed.
        expect(await keysUnder(prefix)).toEqual([]);
      } finally {
        await cooling.close();
      }
    });
  });
});
