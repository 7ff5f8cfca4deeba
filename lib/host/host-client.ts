import type { MessagePort } from 'node:worker_threads';
import { IdempotencyStoreError } from '../idempotency/store';
import {
  HostOp,
  HostOperationError,
  HostStatus,
  HostUnavailableError,
  type HostValue,
} from './host-protocol';

/**
 * A worker thread's side of the port to the host thread (`HostState`), where the process's
 * idempotency records kept in memory live.
 *
 * - The operations called in one event-loop turn wait in one array; in the turn's check phase
 *   (`setImmediate`) they leave as one message, and the host answers them with one message.
 * - The port keeps the worker's event loop alive only while an answer is awaited: a listener refs
 *   a port, so it is unref'd from the start, ref'd when a batch that expects an answer leaves, and
 *   unref'd again when no answer is awaited.
 * - When the port closes (the host closed it, or the host thread is gone) every operation waiting
 *   fails with `HostUnavailableError`, and every later one fails at once with the same error.
 */

/** The bounds of a record store, taken from the first worker that names it. */
export interface HostRecordBounds {
  readonly maxRecords?: number | undefined;
  readonly maxCharacters?: number | undefined;
}

/** An operation sent, waiting for its answer. */
interface Pending {
  readonly op: HostOp;
  resolve(value: unknown): void;
  reject(error: Error): void;
}

export class HostClient {
  /** The values of the operations called this turn, in order. */
  private outgoing: HostValue[] = [];
  /** The operations called this turn that expect an answer, in order. */
  private queued: Pending[] = [];
  private scheduled = false;
  /** Batches sent and not yet answered, oldest first. */
  private readonly inFlight: Pending[][] = [];
  private nextRecordsId = 0;
  private failure: HostUnavailableError | undefined;

  constructor(private readonly port: MessagePort) {
    port.on('message', this.onAnswer);
    port.on('messageerror', () => {
      this.fail(new HostUnavailableError('an answer could not be read'));
    });
    port.on('close', () => {
      this.fail(new HostUnavailableError('its port closed'));
    });
    // The message listener refs the port; nothing is awaited yet.
    port.unref();
  }

  /** Operations sent or queued whose answers have not come. */
  get pending(): number {
    let count = this.queued.length;
    for (const batch of this.inFlight) count += batch.length;
    return count;
  }

  /** Whether the port is closed: every operation fails at once. */
  get closed(): boolean {
    return this.failure !== undefined;
  }

  /** Names the record store `name` on the host: the number its operations use on this port. */
  registerRecords(name: string, bounds: HostRecordBounds = {}): number {
    const id = this.nextRecordsId++;
    this.enqueue(
      HostOp.registerRecords,
      id,
      name,
      bounds.maxRecords ?? null,
      bounds.maxCharacters ?? null,
    );
    return id;
  }

  /** `MemoryIdempotencyStore.claim()` in the host's store `records`. */
  claim(records: number, name: string, claim: string, ttlMs: number): Promise<string | undefined> {
    return this.call(HostOp.claim, [HostOp.claim, records, name, claim, ttlMs]) as Promise<
      string | undefined
    >;
  }

  /** `MemoryIdempotencyStore.settle()` in the host's store `records`. */
  settle(
    records: number,
    name: string,
    claim: string,
    record: string,
    ttlMs: number,
  ): Promise<boolean> {
    return this.call(HostOp.settle, [
      HostOp.settle,
      records,
      name,
      claim,
      record,
      ttlMs,
    ]) as Promise<boolean>;
  }

  /** `MemoryIdempotencyStore.release()` in the host's store `records`. */
  release(records: number, name: string, claim: string): Promise<void> {
    return this.call(HostOp.release, [HostOp.release, records, name, claim]) as Promise<void>;
  }

  /** Closes the port: what waits fails, as does every later operation. */
  close(): void {
    this.fail(new HostUnavailableError('the client was closed'));
  }

  /** Queues one operation that expects an answer. */
  private call(op: HostOp, values: readonly HostValue[]): Promise<unknown> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.enqueue(...values);
      this.queued.push({ op, resolve, reject });
    });
  }

  /** Appends values to this turn's batch, which leaves in the turn's check phase. */
  private enqueue(...values: HostValue[]): void {
    if (this.failure !== undefined) return;
    for (const value of values) this.outgoing.push(value);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const values = this.outgoing;
    const batch = this.queued;
    this.outgoing = [];
    this.queued = [];
    if (this.failure !== undefined || values.length === 0) return;
    try {
      this.port.postMessage(values);
    } catch (error) {
      const failure = new HostUnavailableError(`a batch could not be sent: ${messageOf(error)}`);
      for (const pending of batch) pending.reject(failure);
      this.fail(failure);
      return;
    }
    // The host answers a batch only when one of its operations expects an answer.
    if (batch.length === 0) return;
    this.inFlight.push(batch);
    if (this.inFlight.length === 1) this.port.ref();
  };

  /** The answer to the oldest batch in flight: each operation's status and values, in order. */
  private readonly onAnswer = (message: unknown): void => {
    const batch = this.inFlight.shift();
    if (this.inFlight.length === 0) this.port.unref();
    if (batch === undefined || !Array.isArray(message)) {
      this.fail(new HostUnavailableError('an answer came that no batch expects'));
      return;
    }
    const answer = message as readonly HostValue[];
    let at = 0;
    for (const pending of batch) {
      const status = answer[at++];
      if (status === HostStatus.FULL) {
        pending.reject(new IdempotencyStoreError('full'));
      } else if (status === HostStatus.FAILED) {
        pending.reject(new HostOperationError(String(answer[at++])));
      } else {
        at = settle(pending, answer, at);
      }
    }
  };

  /** Closes the port for good and fails everything waiting. */
  private fail(error: HostUnavailableError): void {
    if (this.failure !== undefined) return;
    this.failure = error;
    const waiting = [...this.inFlight.splice(0).flat(), ...this.queued.splice(0)];
    this.outgoing = [];
    for (const pending of waiting) pending.reject(error);
    this.port.close();
  }
}

/** Resolves one answered operation from `answer` at `at`: where the next operation's answer starts. */
function settle(pending: Pending, answer: readonly HostValue[], at: number): number {
  switch (pending.op) {
    case HostOp.claim: {
      const found = answer[at++];
      pending.resolve(typeof found === 'string' ? found : undefined);
      return at;
    }
    case HostOp.settle:
      pending.resolve(answer[at++] === true);
      return at;
    default:
      pending.resolve(undefined);
      return at;
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
