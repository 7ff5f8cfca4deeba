/**
 * What the worker threads of one process and their host thread say to each other over a
 * `MessagePort`, so the idempotency records kept in memory are one set for the process.
 *
 * Each message is a flat array of primitives (strings, numbers, booleans, `null`), never an object
 * per operation: structured cloning copies a flat array in one pass.
 *
 * - A worker sends one batch per event-loop turn: the operations of that turn one after another,
 *   each its code followed by its arguments (see `HostOp`).
 * - The host runs the batch's operations in order, each in one synchronous step, and answers with
 *   one message when at least one of them answers (registrations answer nothing): for each
 *   answering operation, in order, a status, then its value when the status is `OK` and the
 *   operation answers one, nothing when it is `FULL`, one message string when it is `FAILED`.
 *
 * A port delivers its messages in order, so the answers come in the order of the batches and a
 * registration reaches the host before any operation that uses it.
 */

/** The operation codes, each with the arguments that follow it in a batch. */
export const HostOp = {
  /** `id, name, maxRecords | null, maxCharacters | null`: names a record store `id` on this port. */
  registerRecords: 1,
  /** `recordsId, name, claim, ttlMs`. Answers the record found, or `null` when written. */
  claim: 2,
  /** `recordsId, name, claim, record, ttlMs`. Answers `true` when settled. */
  settle: 3,
  /** `recordsId, name, claim`. Answers nothing past its status. */
  release: 4,
} as const;
export type HostOp = (typeof HostOp)[keyof typeof HostOp];

/** The status that starts each answer. */
export const HostStatus = {
  OK: 0,
  /** The record store is full: `IdempotencyStoreError('full')`. */
  FULL: 1,
  /** The operation failed on the host; a message string follows. */
  FAILED: 2,
} as const;
export type HostStatus = (typeof HostStatus)[keyof typeof HostStatus];

/** A value a message may carry. */
export type HostValue = string | number | boolean | null;

/** The host cannot be reached: its port closed, or the host thread is gone. */
export class HostUnavailableError extends Error {
  override readonly name = 'HostUnavailableError';
  constructor(readonly why: string) {
    super(`the host thread of the shared records cannot be reached: ${why}`);
  }
}

/** The host ran an operation and it failed there: `message` is the host's error message. */
export class HostOperationError extends Error {
  override readonly name = 'HostOperationError';
  constructor(message: string) {
    super(`the host thread of the shared records failed an operation: ${message}`);
  }
}
