import { InvalidRequestError } from '../../lib/internal';
import { type LimitScopes, type Role } from '../../lib';
import {
  accountLimits,
  expiresAt,
  expiryTime,
  type Fail,
  identifier,
  ipWhitelist,
  isGraceSeconds,
  keyPermissions,
  role,
} from '../../lib/internal';
import { MAX_GRACE_SECONDS } from '../../lib/entry/postgres';

/** What a write route acts on: the id of its path and its body's checked fields. */
export interface AdminRequest {
  readonly id: string;
  readonly body: Record<string, unknown>;
}

/**
 * The body as an object with only `allowed` fields; no body is an empty object. A misspelt field
 * is a 400, never silently ignored.
 */
export function fieldsOf(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (body === undefined) return {};
  const object = body as Record<string, unknown>;
  for (const field of Object.keys(object)) {
    if (!allowed.includes(field)) {
      throw new InvalidRequestError(
        allowed.length === 0
          ? 'This route takes no body fields'
          : `unknown field ${JSON.stringify(field.slice(0, 64))}; expected ${allowed.join(', ')}`,
      );
    }
  }
  return object;
}

/** A field the route needs present (`null` may be its value): a 400 with `expected` otherwise. */
export function requireField(body: Record<string, unknown>, field: string, expected: string): void {
  if (!Object.hasOwn(body, field)) throw new InvalidRequestError(`${field}: ${expected}`);
}

/** The route's `:id`, or `''` where the path has none. */
export function pathId(params: Record<string, unknown>): string {
  return typeof params.id === 'string' ? params.id : '';
}

/**
 * The admin API's JSON, checked and typed for the key store, every fault a 400 naming the field as
 * the API spells it (`expires_at: …`, `grace_seconds: …`, `ip_whitelist[1]: …`), with the rules the
 * keys file and the store apply (key-rules.ts), so a value is refused in the same words wherever it
 * is given.
 */

const invalid: Fail = (where, problem) => {
  throw new InvalidRequestError(`${where}: ${problem}`);
};

/** What the store accepts in an account's `limits` and a key's `permissions`. */
export interface Vocabulary {
  readonly limitScopes: LimitScopes;
  readonly permissionNames: readonly string[];
}

export function accountIdField(value: unknown): string {
  return identifier(value, 'id', invalid);
}

/** A whitelist field: `null` or absent is no restriction. */
export function whitelistField(value: unknown, field: string): string[] | null {
  if (value === null || value === undefined) return null;
  return [...ipWhitelist(value, field, invalid).entries()];
}

/** A `limits` field of the account `account`: `null`, absent or `{}` is no override. */
export function limitsField(
  value: unknown,
  account: string,
  vocabulary: Vocabulary,
): Readonly<Record<string, number>> | null {
  if (value === null || value === undefined) return null;
  return accountLimits(value, 'limits', account, vocabulary.limitScopes, invalid) ?? null;
}

export function roleField(value: unknown): Role {
  return role(value, 'role', invalid);
}

/**
 * A `permissions` field: `null` is no restriction. `key` names the key in a fault when the sender
 * chose its id (never an id made up for a key being created).
 */
export function permissionsField(
  value: unknown,
  key: string | undefined,
  vocabulary: Vocabulary,
): readonly string[] | null {
  const mask = keyPermissions(value, 'permissions', key, vocabulary.permissionNames, invalid);
  return mask === undefined ? null : (value as string[]);
}

/** `expires_at`: an RFC 3339 time or ms since the epoch, in range and in the future; `null`: none. */
export function expiresAtField(value: unknown, now = Date.now()): number | null {
  if (value === null || value === undefined) return null;
  const time =
    typeof value === 'number'
      ? expiryTime(value, 'expires_at', invalid)
      : expiresAt(value, 'expires_at', invalid);
  if (time === undefined || time <= now) return invalid('expires_at', 'must be in the future');
  return time;
}

export function graceSecondsField(value: unknown): number {
  if (typeof value !== 'number' || !isGraceSeconds(value)) {
    return invalid('grace_seconds', `must be a whole number from 0 to ${MAX_GRACE_SECONDS}`);
  }
  return value + 0;
}
