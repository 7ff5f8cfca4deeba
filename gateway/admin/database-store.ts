import type { RequestHandler } from 'express';
import { type PgKeyStore } from '../../lib/entry/postgres';
import { TollgateError } from '../../lib';
import type { AccountView as StoredAccount } from '../../lib/entry/postgres';
import type { StoreAction } from './routes';
import { type AdminRequest, fieldsOf, pathId, requireField } from './validation';
import { accountAnswer, keyAnswer, listedAccountAnswer, newKeyAnswer } from './views';

/** What the admin routes need of a key store that takes writes (the database store). */
export type KeyManager = Pick<
  PgKeyStore,
  | 'listAccounts'
  | 'findAccount'
  | 'createAccount'
  | 'setIpWhitelist'
  | 'setLimits'
  | 'createKey'
  | 'setRole'
  | 'updateKey'
  | 'roll'
  | 'revoke'
>;

/** The database did not answer: the write may be retried; nothing half-done stays (one transaction). */
export class DatabaseUnavailableError extends TollgateError {
  override readonly name = 'DatabaseUnavailableError';
  constructor() {
    super(503, 'upstream_unavailable', 'The key database is unavailable; the change was not made', {
      'Retry-After': '1',
    });
  }
}

/** A refusal as it was made, or any other failure as the database being out of reach. */
export function asAdminError(error: unknown): TollgateError {
  return error instanceof TollgateError ? error : new DatabaseUnavailableError();
}

/**
 * With the database store: each route validates its body's fields (unknown ones are a 400, as a
 * misspelt field must not be silently ignored), calls the store, which validates the values with
 * the keys file's rules and answers once the change is in force here, and renders the result.
 */
export function databaseHandlers(manager: KeyManager): Record<StoreAction, RequestHandler> {
  const run =
    (
      status: number,
      fields: readonly string[],
      act: (req: AdminRequest) => Promise<unknown>,
    ): RequestHandler =>
    (req, res, next) => {
      let body: Record<string, unknown>;
      try {
        body = fieldsOf(req.body, fields);
      } catch (error) {
        next(error);
        return;
      }
      act({ id: pathId(req.params), body }).then(
        (result) => {
          res.status(status).json(result);
        },
        (error: unknown) => {
          next(asAdminError(error));
        },
      );
    };
  // An account setting: its one field is required (`null` resets it), and the account answers.
  const setting = (
    field: string,
    expected: string,
    write: (id: string, value: unknown) => Promise<StoredAccount>,
  ): RequestHandler =>
    run(200, [field], async ({ id, body }) => {
      requireField(body, field, expected);
      return accountAnswer(await write(id, body[field]));
    });
  return {
    'accounts.list': run(200, [], async () => ({
      accounts: (await manager.listAccounts()).map(listedAccountAnswer),
    })),
    'accounts.create': run(201, ['id', 'ip_whitelist', 'limits'], async ({ body }) =>
      accountAnswer(
        await manager.createAccount(body.id, body.ip_whitelist ?? undefined, body.limits),
      ),
    ),
    'accounts.set_ip_whitelist': setting(
      'entries',
      'a list of addresses and ranges, or null to lift the restriction',
      (id, entries) => manager.setIpWhitelist(id, entries),
    ),
    'accounts.set_limits': setting(
      'limits',
      'an object of scope name to requests per minute, or null for the defaults',
      (id, limits) => manager.setLimits(id, limits),
    ),
    'keys.create': run(201, ['role', 'id', 'expires_at', 'permissions'], async ({ id, body }) =>
      newKeyAnswer(
        await manager.createKey(id, {
          role: body.role,
          id: body.id,
          expiresAt: body.expires_at,
          permissions: body.permissions,
        }),
      ),
    ),
    // The role, the permissions (null lifts them), or both in one write.
    'keys.update': run(200, ['role', 'permissions'], async ({ id, body }) =>
      keyAnswer(await manager.updateKey(id, body)),
    ),
    'keys.roll': run(201, ['grace_seconds'], async ({ id, body }) => {
      const rolled = await manager.roll(id, body.grace_seconds);
      return { ...newKeyAnswer(rolled.key), previous: keyAnswer(rolled.previous) };
    }),
    'keys.revoke': run(200, [], async ({ id }) => keyAnswer(await manager.revoke(id))),
  };
}
