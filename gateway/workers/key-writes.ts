import type { Logger } from '../../lib';
import {
  ConflictError,
  KeyAlreadyRolledError,
  NotFoundError,
  type RingFollower,
} from '../../lib/internal';
import type { PgKeyStore } from '../../lib/entry/postgres';
import { asAdminError, DatabaseUnavailableError } from '../admin/database-store';
import type { ReportKeyStore } from '../secret-scanning';

/**
 * The key writes a worker thread asks of the main thread, the one that holds the database key
 * store: a revocation or a roll made by the secret-scanning endpoint. The main thread answers once
 * the change is in force there, after the batch that brings it to the workers: a worker that gets
 * its answer already serves the change.
 */

export type KeyWrite =
  | { readonly op: 'revoke'; readonly keyId: string }
  | { readonly op: 'roll'; readonly keyId: string; readonly graceSeconds: number };

/** A write's failure, as plain data: the worker makes the same error of it. */
export type WriteFailure =
  | { readonly kind: 'already_rolled' }
  | { readonly kind: 'conflict'; readonly message: string }
  | { readonly kind: 'not_found' }
  | { readonly kind: 'database_unavailable' }
  | { readonly kind: 'failed'; readonly message: string };

/** Makes the write on the main thread's store; a failure is described, never thrown. */
export async function runKeyWrite(
  store: PgKeyStore,
  write: KeyWrite,
  logger: Logger,
): Promise<{ value: unknown } | { failure: WriteFailure }> {
  try {
    const value =
      write.op === 'revoke'
        ? await store.revoke(write.keyId)
        : await store.roll(write.keyId, write.graceSeconds);
    return { value };
  } catch (error) {
    return { failure: describeFailure(asAdminError(error, logger)) };
  }
}

function describeFailure(error: unknown): WriteFailure {
  if (error instanceof KeyAlreadyRolledError) return { kind: 'already_rolled' };
  if (error instanceof ConflictError) return { kind: 'conflict', message: error.message };
  if (error instanceof NotFoundError) return { kind: 'not_found' };
  if (error instanceof DatabaseUnavailableError) return { kind: 'database_unavailable' };
  return { kind: 'failed', message: error instanceof Error ? error.message : String(error) };
}

/** The error a worker throws for a failed write: the class the main thread's store threw. */
export function failureError(write: KeyWrite, failure: WriteFailure): Error {
  switch (failure.kind) {
    case 'already_rolled':
      return new KeyAlreadyRolledError(write.keyId);
    case 'conflict':
      return new ConflictError(failure.message);
    case 'not_found':
      return new NotFoundError();
    case 'database_unavailable':
      return new DatabaseUnavailableError();
    case 'failed':
      return new Error(failure.message);
  }
}

/**
 * What a worker's secret-scanning endpoint writes through and looks keys up in: the writes are
 * asked of the main thread (`ask`), the lookups read the worker's own ring, never as a use.
 */
export function hostKeyWriter(
  keys: RingFollower,
  ask: (write: KeyWrite) => Promise<unknown>,
): ReportKeyStore {
  return {
    revoke: (keyId) => ask({ op: 'revoke', keyId }) as ReturnType<ReportKeyStore['revoke']>,
    roll: (keyId, graceSeconds) =>
      ask({ op: 'roll', keyId, graceSeconds }) as ReturnType<ReportKeyStore['roll']>,
    peekBySecretKey: (secretKey) => keys.peekBySecretKey(secretKey),
    findByPublishableKey: (publishableKey) => keys.findByPublishableKey(publishableKey),
  };
}
