import type { RequestHandler } from 'express';
import { type Logger, TollgateError } from '../../lib';
import { type PgKeyStore } from '../../lib/entry/postgres';
import type { AccountView as StoredAccount } from '../../lib/entry/postgres';
import type { StoreAction } from './routes';
import {
  accountIdField,
  type AdminRequest,
  expiresAtField,
  fieldsOf,
  graceSecondsField,
  limitsField,
  pathId,
  permissionsField,
  requireField,
  roleField,
  type Vocabulary,
  whitelistField,
} from './validation';
import type { KeyAdmin } from '../../lib/entry/postgres';
import { accountAnswer, keyAnswer, listedAccountAnswer, newKeyAnswer } from './views';

/**
 * What the admin routes need of a key store that takes writes (the database store): the typed key
 * administration, its reads, and what its `limits` and `permissions` may name.
 */
export type KeyManager = Pick<
  KeyAdmin,
  'createAccount' | 'setIpWhitelist' | 'setLimits' | 'createKey' | 'updateKey' | 'roll' | 'revoke'
> &
  Pick<PgKeyStore, 'listAccounts' | 'findAccount'> &
  Vocabulary;

/** The database did not answer: the write may be retried; nothing half-done stays (one transaction). */
export class DatabaseUnavailableError extends TollgateError {
  override readonly name = 'DatabaseUnavailableError';
  constructor() {
    super(503, 'upstream_unavailable', 'The key database is unavailable; the change was not made', {
      'Retry-After': '1',
    });
  }
}

/** PostgreSQL's classes of failures of reach: connection (08), resources (53). */
const UNAVAILABLE_CLASSES = ['08', '53'];
/** Shutting down or starting (57P01 to 57P05), or a statement cancelled at its time limit. */
const UNAVAILABLE_CODES = /^(57P0\d|57014)$/;
/** Node's codes for a connection that could not be made or was lost. */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
]);
/** The client library's own failures of reach, which carry no code. */
const NETWORK_MESSAGES =
  /^(Connection terminated|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error)/i;

/**
 * Whether `error` says the database could not be reached or could not serve now. Read by shape, not
 * by class: Node's own errors (a refused connection) may come from another realm than this code's.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, message, errors } = error as {
    code?: unknown;
    message?: unknown;
    errors?: unknown;
  };
  // A connection tried on several addresses fails with all of their failures.
  if (Array.isArray(errors) && errors.length > 0 && code === undefined) {
    return errors.every(isDatabaseUnavailable);
  }
  if (typeof code === 'string') {
    if (/^[0-9A-Z]{5}$/.test(code)) {
      return UNAVAILABLE_CLASSES.includes(code.slice(0, 2)) || UNAVAILABLE_CODES.test(code);
    }
    return NETWORK_CODES.has(code);
  }
  return typeof message === 'string' && NETWORK_MESSAGES.test(message);
}

/**
 * The failure's class, for the log as the error handler writes it: its class name and code, never
 * its message (it may hold a URL or a value).
 */
function faultClass(error: unknown): { name: string; code?: string } {
  if (typeof error !== 'object' || error === null) return { name: typeof error };
  const { name, code } = error as { name?: unknown; code?: unknown };
  // The client library names every server error "error": its class says more.
  const shown =
    typeof name !== 'string' ? 'unknown' : name === 'error' ? error.constructor.name : name;
  return typeof code === 'string' ? { name: shown, code } : { name: shown };
}

/**
 * A write's failure as it is answered: a refusal as it was made; a database out of reach as
 * `503 upstream_unavailable`, logged with its class; anything else as it is, for the error handler
 * to answer `500 internal_error` and log with its class.
 */
export function asAdminError(error: unknown, logger: Logger): unknown {
  if (error instanceof TollgateError) return error;
  if (!isDatabaseUnavailable(error)) return error;
  logger.error(
    { event: 'admin.database_unavailable', error: faultClass(error) },
    'the key database could not be reached: the change was not made',
  );
  return new DatabaseUnavailableError();
}

/**
 * With the database store: each route validates its body's fields (unknown ones are a 400, as a
 * misspelt field must not be silently ignored), calls the store, which validates the values with
 * the keys file's rules and answers once the change is in force here, and renders the result.
 */
export function databaseHandlers(
  manager: KeyManager,
  logger: Logger,
): Record<StoreAction, RequestHandler> {
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
          next(asAdminError(error, logger));
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
    'accounts.create': run(201, ['id', 'ip_whitelist', 'limits'], async ({ body }) => {
      const id = accountIdField(body.id);
      const whitelist = whitelistField(body.ip_whitelist, 'ip_whitelist');
      return accountAnswer(
        await manager.createAccount(id, whitelist, limitsField(body.limits, id, manager)),
      );
    }),
    'accounts.set_ip_whitelist': setting(
      'entries',
      'a list of addresses and ranges, or null to lift the restriction',
      (id, entries) => manager.setIpWhitelist(id, whitelistField(entries, 'entries')),
    ),
    'accounts.set_limits': setting(
      'limits',
      'an object of scope name to requests per minute, or null for the defaults',
      (id, limits) => manager.setLimits(id, limitsField(limits, id, manager)),
    ),
    'keys.create': run(201, ['role', 'id', 'expires_at', 'permissions'], async ({ id, body }) => {
      const keyId = body.id === undefined ? undefined : identifier(body.id);
      return newKeyAnswer(
        await manager.createKey(id, {
          ...(body.role === undefined ? {} : { role: roleField(body.role) }),
          ...(keyId === undefined ? {} : { id: keyId }),
          expiresAt: expiresAtField(body.expires_at),
          permissions: permissionsField(body.permissions, keyId, manager),
        }),
      );
    }),
    // The role, the permissions (null lifts them), or both in one write.
    'keys.update': run(200, ['role', 'permissions'], async ({ id, body }) =>
      keyAnswer(
        await manager.updateKey(id, {
          ...(body.role === undefined ? {} : { role: roleField(body.role) }),
          ...(body.permissions === undefined
            ? {}
            : { permissions: permissionsField(body.permissions, id, manager) }),
        }),
      ),
    ),
    'keys.roll': run(201, ['grace_seconds'], async ({ id, body }) => {
      const rolled = await manager.roll(id, graceSecondsField(body.grace_seconds));
      return { ...newKeyAnswer(rolled.key), previous: keyAnswer(rolled.previous) };
    }),
    'keys.revoke': run(200, [], async ({ id }) => keyAnswer(await manager.revoke(id))),
  };
}

/** A key id given in a body: the same rule as an account's. */
function identifier(value: unknown): string {
  return accountIdField(value);
}
