import { MessageChannel, type MessagePort } from 'node:worker_threads';
import { checkOptions, isFunction, type OptionChecks } from '../options';
import {
  IdempotencyStoreError,
  MemoryIdempotencyStore,
  type MemoryIdempotencyStoreOptions,
} from '../idempotency/store';
import { HostOp, HostStatus, type HostValue } from './host-protocol';

/**
 * The idempotency records kept in memory by one process, on one thread (the host, normally the
 * main thread) for every worker thread that serves the process's port. Each worker gets a port
 * from `connect()` and sends its operations there (`HostClient`); the host runs each one in a
 * single synchronous step with the same code a single-threaded process runs, so one claim of a
 * key wins whatever worker its requests reach.
 *
 * Record stores are kept per name: what two workers register alike they share. The host's ports
 * do not keep its thread alive: a worker's own handle does that for as long as the worker runs.
 */

export interface HostStateOptions {
  /** The records' clock, one that never steps back. Defaults to `performance.now()`. */
  readonly recordsNow?: (() => number) | undefined;
}

const HOST_STATE_OPTION_CHECKS: OptionChecks<HostStateOptions> = {
  recordsNow: isFunction,
};

/** One worker's port and the stores it named, by the numbers it gave them. */
interface Connection {
  readonly port: MessagePort;
  readonly records: (MemoryIdempotencyStore | undefined)[];
}

/** Record stores one worker may name, at most: far more than a process makes. */
const MAX_ID = 2 ** 20;

/** A batch the worker sent that is not what `HostClient` sends: the port is closed. */
class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
}

/** Reads a batch's values in order, checking each one's type. */
class BatchReader {
  private at = 0;

  constructor(private readonly values: readonly unknown[]) {}

  get done(): boolean {
    return this.at >= this.values.length;
  }

  number(): number {
    const value = this.values[this.at++];
    if (typeof value !== 'number') throw new ProtocolError(`expected a number at ${this.at - 1}`);
    return value;
  }

  /** A number a worker gave one of its record stores: a whole number below `MAX_ID`. */
  id(): number {
    const value = this.number();
    if (!Number.isInteger(value) || value < 0 || value >= MAX_ID) {
      throw new ProtocolError(`expected an id at ${this.at - 1}`);
    }
    return value;
  }

  string(): string {
    const value = this.values[this.at++];
    if (typeof value !== 'string') throw new ProtocolError(`expected a string at ${this.at - 1}`);
    return value;
  }

  optionalNumber(): number | undefined {
    const value = this.values[this.at];
    if (value !== null) return this.number();
    this.at += 1;
    return undefined;
  }
}

export class HostState {
  private readonly recordsNow: (() => number) | undefined;
  private readonly records = new Map<string, MemoryIdempotencyStore>();
  private readonly connections = new Set<Connection>();
  private closed = false;

  constructor(options: HostStateOptions = {}) {
    checkOptions('HostState', options, HOST_STATE_OPTION_CHECKS);
    this.recordsNow = options.recordsNow;
  }

  /**
   * A new port for one worker (transfer it: `workerData` and `transferList`); its other end is
   * served here until either side closes it.
   */
  connect(): MessagePort {
    if (this.closed) throw new Error('HostState: connect() after close()');
    const { port1, port2 } = new MessageChannel();
    const connection: Connection = { port: port1, records: [] };
    this.connections.add(connection);
    port1.on('message', (message: unknown) => {
      this.serve(connection, message);
    });
    port1.on('close', () => {
      this.connections.delete(connection);
    });
    // A listener refs the port; the worker's handle is what keeps this thread alive.
    port1.unref();
    return port2;
  }

  /** Ports open now, one per connected worker. */
  get connected(): number {
    return this.connections.size;
  }

  /** Closes every port (pending operations of the workers fail) and drops every record. */
  close(): void {
    this.closed = true;
    for (const connection of this.connections) connection.port.close();
    this.connections.clear();
    this.records.clear();
  }

  /** Runs one batch in one synchronous step and answers it, or closes a port that broke the rules. */
  private serve(connection: Connection, message: unknown): void {
    const answer: HostValue[] = [];
    try {
      if (!Array.isArray(message)) throw new ProtocolError('a batch is an array');
      const batch = new BatchReader(message);
      while (!batch.done) this.runOne(connection, batch, answer);
    } catch {
      connection.port.close();
      return;
    }
    if (answer.length === 0) return;
    try {
      connection.port.postMessage(answer);
    } catch {
      // A port that cannot carry the answer is of no more use; its worker's operations fail.
      connection.port.close();
    }
  }

  /** Reads one operation, runs it, and appends its answer. */
  private runOne(connection: Connection, batch: BatchReader, answer: HostValue[]): void {
    const op = batch.number();
    switch (op) {
      case HostOp.registerRecords: {
        const id = batch.id();
        const name = batch.string();
        const maxRecords = batch.optionalNumber();
        const maxCharacters = batch.optionalNumber();
        connection.records[id] = this.recordsOf(name, { maxRecords, maxCharacters });
        return;
      }
      case HostOp.claim: {
        const store = connection.records[batch.id()];
        const name = batch.string();
        const claim = batch.string();
        const ttlMs = batch.number();
        if (store === undefined) {
          failed(answer, 'a record store was never registered');
          return;
        }
        attempt(answer, () => store.claimNow(name, claim, ttlMs) ?? null);
        return;
      }
      case HostOp.settle: {
        const store = connection.records[batch.id()];
        const name = batch.string();
        const claim = batch.string();
        const record = batch.string();
        const ttlMs = batch.number();
        if (store === undefined) {
          failed(answer, 'a record store was never registered');
          return;
        }
        attempt(answer, () => store.settleNow(name, claim, record, ttlMs));
        return;
      }
      case HostOp.release: {
        const store = connection.records[batch.id()];
        const name = batch.string();
        const claim = batch.string();
        if (store === undefined) {
          failed(answer, 'a record store was never registered');
          return;
        }
        attempt(answer, () => {
          store.releaseNow(name, claim);
        });
        return;
      }
      default:
        throw new ProtocolError(`unknown operation ${op}`);
    }
  }

  /** The record store named `name`, made with the bounds of the first worker that names it. */
  private recordsOf(
    name: string,
    bounds: Pick<MemoryIdempotencyStoreOptions, 'maxRecords' | 'maxCharacters'>,
  ): MemoryIdempotencyStore {
    let store = this.records.get(name);
    if (store === undefined) {
      store = new MemoryIdempotencyStore({ ...bounds, now: this.recordsNow });
      this.records.set(name, store);
    }
    return store;
  }
}

/** Runs one operation and appends its status and value (none for `undefined`). */
function attempt(answer: HostValue[], run: () => HostValue | undefined): void {
  let value: HostValue | undefined;
  try {
    value = run();
  } catch (error) {
    if (error instanceof IdempotencyStoreError && error.reason === 'full') {
      answer.push(HostStatus.FULL);
    } else {
      failed(answer, messageOf(error));
    }
    return;
  }
  answer.push(HostStatus.OK);
  if (value !== undefined) answer.push(value);
}

function failed(answer: HostValue[], message: string): void {
  answer.push(HostStatus.FAILED, message);
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
