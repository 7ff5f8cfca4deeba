import { EventEmitter } from 'node:events';
import fc from 'fast-check';
import { HostClient } from '../../lib/host/host-client';
import { HostIdempotencyStore } from '../../lib/host/host-idempotency-store';
import { HostState } from '../../lib/host/host-state';
import { type IdempotencyStore, MemoryIdempotencyStore } from '../../lib/idempotency/store';
import {
  AdmissionStore,
  type CounterRequest,
  type LocalCounters,
} from '../../lib/rate-limit/admission-store';
import type { RedisCommandClient } from '../../lib/rate-limit/redis-commands';
import { RedisHealth, type RedisStatusSource } from '../../lib/rate-limit/redis-health';
import { createSharedCountersBuffer, SharedCounters } from '../../lib/rate-limit/shared-counters';

/**
 * What the threads of a process share gives the answers the process's own memory gives: one
 * `AdmissionStore` with shared counters (in a shared buffer, on the test's clock) and one without
 * go through the same random sequence of admissions over one to three scopes (fixed windows,
 * rolling windows, IPv4 keys, shadow scopes, per-request limits), readings, decrements, resets and
 * clock moves across window edges, and every refusal and reading is the same. Once with no Redis
 * (counts as they are), once with a Redis that cannot be used and three expected instances
 * (counts scaled). The same for idempotency records: a `HostIdempotencyStore` and a
 * `MemoryIdempotencyStore` answer a random sequence of claims, settles and releases alike, the
 * host's `full` included.
 */

const WINDOW_MS = 2000;
const KEYS = ['account:{acct_a}', 'account:{acct_b}', 'ip:203.0.113.7', 'ip:198.51.100.1'];

/** A Redis connection that is never ready: the stores count in memory, scaled. */
class DownRedis extends EventEmitter implements RedisCommandClient, RedisStatusSource {
  readonly status = 'end';

  call(): Promise<unknown> {
    return Promise.reject(new Error('the connection is closed'));
  }
}

interface Scope {
  readonly prefix: string;
  readonly windowMs?: number;
  readonly rolling?: boolean;
}

const SCOPES: readonly Scope[] = [
  { prefix: 'rl:fixed:' },
  { prefix: 'rl:rolling:', windowMs: 1500, rolling: true },
  { prefix: 'rl:short:', windowMs: 1000 },
];

interface Use {
  readonly scope: number;
  readonly key: string;
  readonly limit: number;
  readonly enforced: boolean;
}

type Step =
  | { readonly kind: 'admit'; readonly uses: readonly Use[] }
  | { readonly kind: 'read'; readonly uses: readonly Use[] }
  | { readonly kind: 'decrement' | 'reset'; readonly scope: number; readonly key: string }
  | { readonly kind: 'wait'; readonly ms: number };

const use: fc.Arbitrary<Use> = fc.record({
  scope: fc.integer({ min: 0, max: SCOPES.length - 1 }),
  key: fc.constantFrom(...KEYS),
  limit: fc.integer({ min: 1, max: 7 }),
  enforced: fc.boolean(),
});

/** One to three counters, each scope at most once (as a request meets them). */
const uses = fc.uniqueArray(use, { minLength: 1, maxLength: 3, selector: (entry) => entry.scope });

const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 6, arbitrary: uses.map((list) => ({ kind: 'admit' as const, uses: list })) },
  { weight: 1, arbitrary: uses.map((list) => ({ kind: 'read' as const, uses: list })) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constantFrom('decrement' as const, 'reset' as const),
      scope: fc.integer({ min: 0, max: SCOPES.length - 1 }),
      key: fc.constantFrom(...KEYS),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.integer({ min: 0, max: 900 }).map((ms) => ({ kind: 'wait' as const, ms })),
  },
);

/** One store and its scopes' counters. */
interface Side {
  readonly store: AdmissionStore;
  readonly counters: readonly LocalCounters[];
}

function side(store: AdmissionStore): Side {
  return {
    store,
    counters: SCOPES.map((scope) =>
      store.countersFor(scope.prefix, { windowMs: scope.windowMs, rolling: scope.rolling }),
    ),
  };
}

function counterOf(on: Side, scope: number): LocalCounters {
  const counter = on.counters[scope];
  if (counter === undefined) throw new Error(`no scope ${scope}`);
  return counter;
}

function requestsOf(on: Side, list: readonly Use[]): CounterRequest[] {
  return list.map((entry) => ({
    counter: counterOf(on, entry.scope),
    key: entry.key,
    limit: entry.limit,
    enforced: entry.enforced,
  }));
}

/** What one step answers: the same for both sides. */
async function run(on: Side, next: Step): Promise<unknown> {
  switch (next.kind) {
    case 'admit':
      return on.store.admit(requestsOf(on, next.uses));
    case 'read':
      return on.store.read(requestsOf(on, next.uses));
    case 'decrement':
      await on.store.decrement(counterOf(on, next.scope), next.key);
      return undefined;
    case 'reset':
      await on.store.reset(counterOf(on, next.scope), next.key);
      return undefined;
    case 'wait':
      return undefined;
  }
}

describe('AdmissionStore with shared counters answers as without them', () => {
  it.each([
    ['no Redis', false],
    ['an unusable Redis, three instances expected', true],
  ] as const)('with %s', async (_name, redisDown) => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 60 }), async (steps) => {
        const clock = { ms: Date.UTC(2026, 10, 28, 12, 0, 0) };
        const now = (): number => clock.ms;
        const redisOption = (): ConstructorParameters<typeof AdmissionStore>[0]['redis'] => {
          if (!redisDown) return undefined;
          const client = new DownRedis();
          return { client, health: new RedisHealth(client, { now }) };
        };
        const sharedCounters = new SharedCounters(
          createSharedCountersBuffer({ maxKeys: 64, maxTimes: 4096 }),
        );
        const options = { windowMs: WINDOW_MS, expectedInstances: 3, now };
        const local = side(new AdmissionStore({ ...options, redis: redisOption() }));
        const shared = side(
          new AdmissionStore({ ...options, redis: redisOption(), sharedCounters }),
        );
        try {
          for (const next of steps) {
            if (next.kind === 'wait') clock.ms += next.ms;
            expect(await run(shared, next)).toEqual(await run(local, next));
          }
        } finally {
          local.store.shutdown();
          shared.store.shutdown();
        }
      }),
      { numRuns: 60 },
    );
  });
});

type RecordStep =
  | { readonly kind: 'claim'; readonly name: string; readonly value: string }
  | {
      readonly kind: 'settle';
      readonly name: string;
      readonly claim: string;
      readonly value: string;
    }
  | { readonly kind: 'release'; readonly name: string; readonly claim: string }
  | { readonly kind: 'wait'; readonly ms: number };

const NAMES = ['idem:{acct_a}:k1', 'idem:{acct_a}:k2', 'idem:{acct_b}:k1'];
const VALUES = ['c1', 'c2', 'record-a', 'record-bb'];
const TTL_MS = 1000;

const recordStep: fc.Arbitrary<RecordStep> = fc.oneof(
  fc.record({
    kind: fc.constant('claim' as const),
    name: fc.constantFrom(...NAMES),
    value: fc.constantFrom(...VALUES),
  }),
  fc.record({
    kind: fc.constant('settle' as const),
    name: fc.constantFrom(...NAMES),
    claim: fc.constantFrom(...VALUES),
    value: fc.constantFrom(...VALUES),
  }),
  fc.record({
    kind: fc.constant('release' as const),
    name: fc.constantFrom(...NAMES),
    claim: fc.constantFrom(...VALUES),
  }),
  fc.integer({ min: 0, max: 700 }).map((ms) => ({ kind: 'wait' as const, ms })),
);

/** What one step answers, a rejection as its error's class, message and reason. */
async function runRecords(store: IdempotencyStore, next: RecordStep): Promise<unknown> {
  try {
    switch (next.kind) {
      case 'claim':
        return await store.claim(next.name, next.value, TTL_MS);
      case 'settle':
        return await store.settle(next.name, next.claim, next.value, TTL_MS);
      case 'release':
        await store.release(next.name, next.claim);
        return undefined;
      case 'wait':
        return undefined;
    }
  } catch (error) {
    const { name, message, reason } = error as { name: string; message: string; reason?: string };
    return {
      rejected: error instanceof Error ? error.constructor : undefined,
      name,
      message,
      reason,
    };
  }
}

describe('HostIdempotencyStore answers as a MemoryIdempotencyStore', () => {
  it('on random claims, settles and releases, records expiring and the store filling', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(recordStep, { minLength: 1, maxLength: 40 }), async (steps) => {
        const clock = { ms: 0 };
        const recordsNow = (): number => clock.ms;
        const bounds = { maxRecords: 2, maxCharacters: 12 };
        const state = new HostState({ recordsNow });
        const client = new HostClient(state.connect());
        const memory = new MemoryIdempotencyStore({ ...bounds, now: recordsNow });
        const hosted = new HostIdempotencyStore({ host: client, name: 'records', ...bounds });
        try {
          expect(hosted.state()).toBe(memory.state());
          for (const next of steps) {
            if (next.kind === 'wait') clock.ms += next.ms;
            expect(await runRecords(hosted, next)).toEqual(await runRecords(memory, next));
          }
        } finally {
          client.close();
          state.close();
        }
      }),
      { numRuns: 100 },
    );
  });
});
