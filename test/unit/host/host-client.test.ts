import { MessageChannel, MessagePort } from 'node:worker_threads';
import { HostClient } from '../../../lib/host/host-client';
import { HostIdempotencyStore } from '../../../lib/host/host-idempotency-store';
import { HostOperationError, HostUnavailableError } from '../../../lib/host/host-protocol';
import { HostState } from '../../../lib/host/host-state';
import { ConfigurationError } from '../../../lib/errors';
import { IdempotencyStoreError } from '../../../lib/idempotency/store';
import { AdmissionStore, type LocalCounters } from '../../../lib/rate-limit/admission-store';

/**
 * A `HostClient` and a `HostState` in one thread (a port works the same within a thread):
 *
 * - the operations called in one turn leave in one message of primitives, answered by one;
 * - the port keeps the event loop alive only while an answer is awaited;
 * - scopes registered alike by two clients are one set of counters, and differ by any part of
 *   their descriptor;
 * - a closed port fails what waits and everything after it, with `HostUnavailableError`;
 * - the host's `full` arrives as `IdempotencyStoreError('full')`, a host failure as
 *   `HostOperationError`.
 */

const WINDOW_MS = 60_000;

interface Setup {
  readonly state: HostState;
  readonly port: MessagePort;
  readonly client: HostClient;
  readonly store: AdmissionStore;
  readonly counter: LocalCounters;
}

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
  jest.restoreAllMocks();
});

function setup(state = new HostState()): Setup {
  const port = state.connect();
  const client = new HostClient(port);
  const store = new AdmissionStore({ windowMs: WINDOW_MS, host: client });
  cleanups.push(() => {
    store.shutdown();
    client.close();
    state.close();
  });
  return { state, port, client, store, counter: store.countersFor('rl:payments:') };
}

const request = (counter: LocalCounters, key: string, limit: number) => ({
  counter,
  key,
  limit,
  enforced: true,
});

/** Whether the port keeps the event loop alive (Node's `hasRef()`, missing from the typings). */
const hasRef = (port: MessagePort): boolean =>
  (port as MessagePort & { hasRef(): boolean }).hasRef();

/** The end of the current turn's check phase, after every `setImmediate` already queued. */
const nextCheckPhase = (): Promise<void> =>
  new Promise((resolve) => {
    setImmediate(resolve);
  });

describe('HostClient', () => {
  it('sends the operations of one turn in one message of primitives, answered by one', async () => {
    const { store, counter } = setup();
    const posted = jest.spyOn(MessagePort.prototype, 'postMessage');
    const admissions = Array.from({ length: 5 }, () =>
      store.admit([request(counter, 'account:{acct_1}', 3)]),
    );
    const reading = store.read([request(counter, 'account:{acct_1}', 3)]);
    const outcomes = await Promise.all(admissions);
    expect(outcomes.map((outcome) => outcome.refusedAt)).toEqual([-1, -1, -1, 0, 0]);
    expect((await reading)[0]?.count).toBe(3);
    // One batch (with the scope's registration) and one answer.
    expect(posted).toHaveBeenCalledTimes(2);
    for (const [message] of posted.mock.calls) {
      expect(Array.isArray(message)).toBe(true);
      for (const value of message as unknown[]) {
        expect(value === null || ['string', 'number', 'boolean'].includes(typeof value)).toBe(true);
      }
    }
  });

  it('keeps the event loop alive only while an answer is awaited', async () => {
    const { port, store, counter } = setup();
    expect(hasRef(port)).toBe(false);
    const admitted = store.admit([request(counter, 'account:{acct_1}', 3)]);
    await nextCheckPhase();
    expect(hasRef(port)).toBe(true);
    await admitted;
    expect(hasRef(port)).toBe(false);
  });

  it('counts one set of counters per descriptor, whichever client registers it', async () => {
    const state = new HostState();
    const first = setup(state);
    const second = setup(state);
    const longer = second.store.countersFor('rl:payments:', { windowMs: 2 * WINDOW_MS });
    const key = 'account:{acct_1}';
    await first.store.admit([request(first.counter, key, 10)]);
    await second.store.admit([request(second.counter, key, 10)]);
    await second.store.admit([request(longer, key, 10)]);
    const [shared] = await first.store.read([request(first.counter, key, 10)]);
    const [own] = await second.store.read([request(longer, key, 10)]);
    expect(shared?.count).toBe(2);
    expect(own?.count).toBe(1);
  });

  it('takes back and forgets counts on the host', async () => {
    const { store, counter } = setup();
    const key = 'ip:203.0.113.7';
    for (let i = 0; i < 3; i++) await store.admit([request(counter, key, 5)]);
    await store.decrement(counter, key);
    expect((await store.read([request(counter, key, 5)]))[0]?.count).toBe(2);
    await store.reset(counter, key);
    expect((await store.read([request(counter, key, 5)]))[0]?.count).toBe(0);
  });

  it('fails what waits when the host closes, and every later operation at once', async () => {
    const { state, client, store, counter } = setup();
    const waiting = store.admit([request(counter, 'account:{acct_1}', 3)]);
    await nextCheckPhase();
    state.close();
    await expect(waiting).rejects.toBeInstanceOf(HostUnavailableError);
    expect(client.closed).toBe(true);
    expect(client.pending).toBe(0);
    await expect(store.read([request(counter, 'account:{acct_1}', 3)])).rejects.toThrow(
      /cannot be reached/,
    );
  });

  it('lets the host drop a port its client closed', async () => {
    const { state, client } = setup();
    expect(state.connected).toBe(1);
    client.close();
    await nextCheckPhase();
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(state.connected).toBe(0);
  });

  it('refuses a counter it was never told of', async () => {
    const { client } = setup();
    const elsewhere = new AdmissionStore({ windowMs: WINDOW_MS });
    cleanups.push(() => {
      elsewhere.shutdown();
    });
    const stranger = elsewhere.countersFor('rl:other:');
    await expect(client.decrement(stranger, 'account:{acct_1}')).rejects.toThrow(/registered/);
  });

  it('closes a port that sends what a client never sends', async () => {
    const state = new HostState();
    cleanups.push(() => {
      state.close();
    });
    const port = state.connect();
    const closed = new Promise((resolve) => port.once('close', resolve));
    port.postMessage(['not an operation']);
    await closed;
    expect(state.connected).toBe(0);
    port.close();
  });
});

describe('HostIdempotencyStore', () => {
  it('claims, settles and releases on the host, with its full as the same error', async () => {
    const { client } = setup();
    const store = new HostIdempotencyStore({ host: client, name: 'records', maxRecords: 1 });
    expect(store.state()).toBe('memory');
    expect(await store.claim('idem:{a}:1', 'claim', 1000)).toBeUndefined();
    expect(await store.claim('idem:{a}:1', 'other', 1000)).toBe('claim');
    const full = store.claim('idem:{a}:2', 'claim', 1000);
    await expect(full).rejects.toBeInstanceOf(IdempotencyStoreError);
    await expect(full).rejects.toMatchObject({ reason: 'full' });
    expect(await store.settle('idem:{a}:1', 'other', 'record', 1000)).toBe(false);
    expect(await store.settle('idem:{a}:1', 'claim', 'record', 1000)).toBe(true);
    await store.release('idem:{a}:1', 'record');
    expect(await store.claim('idem:{a}:2', 'claim', 1000)).toBeUndefined();
  });

  it('shares a store by name between clients; another name is another store', async () => {
    const state = new HostState();
    const one = new HostIdempotencyStore({ host: setup(state).client, name: 'records' });
    const two = new HostIdempotencyStore({ host: setup(state).client, name: 'records' });
    const other = new HostIdempotencyStore({ host: setup(state).client, name: 'elsewhere' });
    const claims = await Promise.all([
      one.claim('idem:{a}:1', 'one', 1000),
      two.claim('idem:{a}:1', 'two', 1000),
      other.claim('idem:{a}:1', 'other', 1000),
    ]);
    expect(claims).toEqual([undefined, 'one', undefined]);
  });

  it('reports a failure on the host as a HostOperationError', async () => {
    const { port1, port2 } = new MessageChannel();
    const client = new HostClient(port2);
    cleanups.push(() => {
      client.close();
      port1.close();
    });
    // A host that answers every batch with one failure.
    port1.on('message', () => {
      port1.postMessage([2, 'the host broke']);
    });
    const store = new HostIdempotencyStore({ host: client, name: 'records' });
    await expect(store.claim('idem:{a}:1', 'claim', 1000)).rejects.toEqual(
      new HostOperationError('the host broke'),
    );
  });
});

describe('the host options', () => {
  it('are checked as every option of the kit is', () => {
    expect(() => new HostState({ now: 5 } as never)).toThrow(ConfigurationError);
    const { client } = setup();
    expect(() => new HostIdempotencyStore({ host: client } as never)).toThrow(ConfigurationError);
    expect(
      () => new HostIdempotencyStore({ host: client, name: 'records', maxRecords: 0 }),
    ).toThrow(ConfigurationError);
    expect(() => new AdmissionStore({ windowMs: WINDOW_MS, host: {} as never })).toThrow(
      ConfigurationError,
    );
  });
});
