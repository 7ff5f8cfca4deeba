import {
  ConflictError,
  KeyAlreadyRolledError,
  KeyNotRollableError,
  NotFoundError,
} from '../../../lib/errors';
import type { PgKeyStore } from '../../../lib/entry/postgres';
import { DatabaseUnavailableError } from '../../../gateway/admin/database-store';
import { failureError, type KeyWrite, runKeyWrite } from '../../../gateway/workers/key-writes';
import { captureLogs } from '../../helpers/logs';

/**
 * A worker's key write fails with the error the main thread's store threw, by its class: the
 * secret-scanning endpoint tells a key rolled just before from one revoked meanwhile by it.
 */

const ROLL: KeyWrite = { op: 'roll', keyId: 'key_1', graceSeconds: 60 };

/** A store whose writes throw `error`. */
function failingStore(error: Error): PgKeyStore {
  const fail = (): Promise<never> => Promise.reject(error);
  return { revoke: fail, roll: fail } as unknown as PgKeyStore;
}

describe('key writes asked of the main thread', () => {
  const logs = captureLogs();

  const unreachable = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });

  it.each([
    ['a key already rolled', new KeyAlreadyRolledError('key_1'), KeyAlreadyRolledError, undefined],
    [
      'a key no longer rollable',
      new KeyNotRollableError('key_1', 'revoked'),
      ConflictError,
      undefined,
    ],
    ['a conflict', new ConflictError('Key "key_1" is revoked'), ConflictError, undefined],
    ['an unknown key', new NotFoundError(), NotFoundError, undefined],
    [
      'an unreachable database',
      unreachable,
      DatabaseUnavailableError,
      new DatabaseUnavailableError(),
    ],
  ])('fail in the worker with the class of %s', async (_name, thrown, kind, answered) => {
    const outcome = await runKeyWrite(failingStore(thrown), ROLL, logs.logger);
    if (!('failure' in outcome)) throw new Error('the write did not fail');
    const error = failureError(ROLL, structuredClone(outcome.failure));
    expect(error).toBeInstanceOf(kind);
    expect(error.message).toBe((answered ?? thrown).message);
  });

  it('answer with what the store answered', async () => {
    const store = { revoke: (id: string) => Promise.resolve({ id, revoked: true }) };
    const outcome = await runKeyWrite(
      store as unknown as PgKeyStore,
      { op: 'revoke', keyId: 'key_2' },
      logs.logger,
    );
    expect(outcome).toEqual({ value: { id: 'key_2', revoked: true } });
  });

  it('fail with the message of any other error, and no more', async () => {
    const outcome = await runKeyWrite(failingStore(new Error('boom')), ROLL, logs.logger);
    expect(outcome).toEqual({ failure: { kind: 'failed', message: 'boom' } });
    const error = failureError(ROLL, { kind: 'failed', message: 'boom' });
    expect(error.constructor).toBe(Error);
  });
});
