import { MessageChannel, MessagePort } from 'node:worker_threads';
import { HostClient } from '../../../lib/host/host-client';
import { HostIdempotencyStore } from '../../../lib/host/host-idempotency-store';
import { HostOperationError, HostUnavailableError } from '../../../lib/host/host-protocol';
import { HostState } from '../../../lib/host/host-state';
import { ConfigurationError } from '../../../lib/errors';
import { IdempotencyStoreError } from '../../../lib/idempotency/store';

/**
 * A `HostClient` and a `HostState` in one thread (a port works the same within a thread):
 *
 * - the operations called in one turn leave in one message of primitives, answered by one;
 * - the port keeps the event loop alive only while an answer is awaited;
 * - record stores named alike by two clients are one store;
 * - a closed port fails what waits and everything after it, with `HostUnavailableError`;
 * - the host's `full` arrives as `IdempotencyStoreError('full')`, a host failure as
 *   `HostOperationError`.
 */

interface Setup {
  readonly state: HostState;
  readonly port: MessagePort;
  readonly client: HostClient;
  readonly records: HostIdempotencyStore;
}

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
  jest.restoreAllMocks();
});

function setup(state = new HostState()): Setup {
  const port = state.connect();
  const client = new HostClient(port);
  cleanups.push(() => {
    client.close();
    state.close();
  });
  return {
    state,
    port,
    client,
    records: new HostIdempotencyStore({ host: client, name: 'setup' }),
  };
}

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
    const { records } = setup();
    const posted = jest.spyOn(MessagePort.prototype, 'postMessage');
    const claims = ['one', 'two', 'three'].map((claim) => records.claim('idem:{a}:1', claim, 1000));
    const other = records.claim('idem:{a}:2', 'four', 1000);
    expect(await Promise.all(claims)).toEqual([undefined, 'one', 'one']);
    expect(await other).toBeUndefined();
    // One batch (with the store's registration) and one answer.
    expect(posted).toHaveBeenCalledTimes(2);
    for (const [message] of posted.mock.calls) {
      expect(Array.isArray(message)).toBe(true);
      for (const value of message as unknown[]) {
        expect(value === null || ['string', 'number', 'boolean'].includes(typeof value)).toBe(true);
      }
    }
  });

  it('keeps the event loop alive only while an answer is awaited', async () => {
    const { port, records } = setup();
    expect(hasRef(port)).toBe(false);
    const claimed = records.claim('idem:{a}:1', 'claim', 1000);
    await nextCheckPhase();
    expect(hasRef(port)).toBe(true);
    await claimed;
    expect(hasRef(port)).toBe(false);
  });

  it('fails what waits when the host closes, and every later operation at once', async () => {
    const { state, client, records } = setup();
    const waiting = records.claim('idem:{a}:1', 'claim', 1000);
    await nextCheckPhase();
    state.close();
    await expect(waiting).rejects.toBeInstanceOf(HostUnavailableError);
    expect(client.closed).toBe(true);
    expect(client.pending).toBe(0);
    await expect(records.claim('idem:{a}:2', 'claim', 1000)).rejects.toThrow(/cannot be reached/);
  });

  it('lets the host drop a port its client closed', async () => {
    const { state, client } = setup();
    expect(state.connected).toBe(1);
    client.close();
    await nextCheckPhase();
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(state.connected).toBe(0);
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
    expect(() => new HostState({ recordsNow: 5 } as never)).toThrow(ConfigurationError);
    const { client } = setup();
    expect(() => new HostIdempotencyStore({ host: client } as never)).toThrow(ConfigurationError);
    expect(
      () => new HostIdempotencyStore({ host: client, name: 'records', maxRecords: 0 }),
    ).toThrow(ConfigurationError);
  });
});
