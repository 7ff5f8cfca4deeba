import { IpWhitelist } from '../model/ip-whitelist';
import { ROLES, type Role, isRole } from '../model/roles';
import type { AccountLimits, LimitScopes } from '../model/key-record';
import { keyShape } from '../model/key-format';
import { MAX_LIMIT } from '../rate-limit/window';

/**
 * The rules every account and key must pass, wherever it comes from: the keys file, the key
 * command, the admin API, the database store. Each check reports through `fail(where, problem)`,
 * which throws the caller's own error (`ConfigurationError` for a file, `InvalidRequestError` for
 * a request), so the message names the field the same way everywhere.
 */

export type Fail = (where: string, problem: string) => never;

export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;
export const DIGEST_PATTERN = /^[0-9a-f]{64}$/;
/** RFC 3339 with a time zone: `2026-12-31T23:59:59Z`, `2026-12-31T23:59:59.5+02:00`. */
const RFC3339_PATTERN =
  /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/i;

/** An account or key id: 1 to 64 letters, digits, `_`, `.`, `:` or `-`, not starting with a sign. */
export function identifier(value: unknown, where: string, fail: Fail): string {
  if (typeof value !== 'string' || !ID_PATTERN.test(value)) {
    return fail(where, 'must be 1 to 64 characters of letters, digits, "_", ".", ":" or "-"');
  }
  return value;
}

export function publishableKey(value: unknown, where: string, fail: Fail): string {
  if (typeof value !== 'string') return fail(where, 'must be a string');
  const shape = keyShape(value);
  if (shape === 'malformed') fail(where, 'must be 20 to 200 printable ASCII characters, no spaces');
  if (shape === 'corrupt') fail(where, 'has a wrong checksum');
  if (value.startsWith('sk_')) fail(where, 'is a secret key (sk_ prefix)');
  return value;
}

/** A SHA-256 digest as 64 lowercase hexadecimal characters. */
export function secretDigest(value: unknown, where: string, fail: Fail): string {
  if (typeof value !== 'string' || !DIGEST_PATTERN.test(value)) {
    return fail(where, 'must be 64 lowercase hexadecimal characters');
  }
  return value;
}

export function role(value: unknown, where: string, fail: Fail): Role {
  if (isRole(value)) return value;
  const shown = typeof value === 'string' ? JSON.stringify(value.slice(0, 64)) : typeof value;
  return fail(where, `unknown role ${shown}; expected one of ${ROLES.join(', ')}`);
}

/** A whitelist (addresses and CIDR ranges, never empty), reporting the first bad entry. */
export function ipWhitelist(value: unknown, where: string, fail: Fail): IpWhitelist {
  try {
    return IpWhitelist.parse(value, where);
  } catch (error) {
    const message = (error as Error).message;
    // IpWhitelist.parse names the entry itself: `where[1] "x" is not …` or `where: …`.
    const problem = message.startsWith(`${where}: `) ? message.slice(where.length + 2) : message;
    return message.startsWith(`${where}: `) ? fail(where, problem) : failWhole(message, fail);
  }
}

function failWhole(message: string, fail: Fail): never {
  const split = message.indexOf(' ');
  return fail(message.slice(0, split), message.slice(split + 1));
}

/**
 * The range of a key's deadline, in ms since the epoch: from 1970-01-01T00:00:00.000Z to
 * 9999-12-31T23:59:59.999Z. Every deadline in it is a valid `Date`, a `timestamptz`, and an
 * RFC 3339 time with a four-digit year, so the keys file, the database, the admin API's answers and
 * a backup all hold it as it was given. A deadline outside it is refused wherever it comes from.
 */
export const EXPIRY_MIN_MS = 0;
export const EXPIRY_MAX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const EXPIRY_RANGE = `from ${new Date(EXPIRY_MIN_MS).toISOString()} to ${new Date(EXPIRY_MAX_MS).toISOString()}`;

/** A deadline given in ms since the epoch: a whole number within the range above. */
export function expiryTime(value: number, where: string, fail: Fail): number {
  if (!Number.isInteger(value)) {
    return fail(where, `must be a whole number of ms since the epoch, ${EXPIRY_RANGE}`);
  }
  if (value < EXPIRY_MIN_MS || value > EXPIRY_MAX_MS) {
    return fail(where, `must be a time ${EXPIRY_RANGE}`);
  }
  // -0 is 0.
  return value + 0;
}

/** A key's deadline in ms since the epoch, from an RFC 3339 time; `undefined` when absent. */
export function expiresAt(value: unknown, where: string, fail: Fail): number | undefined {
  if (value === undefined) return undefined;
  const time = typeof value === 'string' && RFC3339_PATTERN.test(value) ? Date.parse(value) : NaN;
  if (!Number.isFinite(time) || !isCalendarDate(value as string)) {
    return fail(where, 'must be an RFC 3339 time with a zone, e.g. "2026-12-31T23:59:59Z"');
  }
  return expiryTime(time, where, fail);
}

/** `2026-02-30…` matches the pattern and `Date.parse` rolls it over to March: refuse it. */
function isCalendarDate(time: string): boolean {
  const [year, month, day] = time.slice(0, 10).split('-').map(Number);
  const daysInMonth = new Date(Date.UTC(year ?? 0, month ?? 0, 0)).getUTCDate();
  return (day ?? 0) <= daysInMonth;
}

/** The highest per-account limit, per window: the highest of any counter. */
export const MAX_ACCOUNT_LIMIT = MAX_LIMIT;

/**
 * An account's limit overrides: an object of per-account scope to a whole number
 * from 1 to 1,000,000. Every fault names the account and the scope. `{}` is no override at all
 * (`undefined`); otherwise one frozen object, its scopes in name order, so equal sets compare by
 * `limitsText()`.
 */
export function accountLimits(
  value: unknown,
  where: string,
  account: string,
  scopes: LimitScopes,
  fail: Fail,
): AccountLimits | undefined {
  const owner = `account ${JSON.stringify(account)}`;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return fail(where, `${owner}: must be an object of scope name to requests per window`);
  }
  const names = Object.keys(value).sort();
  if (names.length === 0) return undefined;
  const limits: Record<string, number> = {};
  for (const name of names) {
    const scope = JSON.stringify(name.slice(0, 64));
    const per = Object.hasOwn(scopes, name) ? scopes[name] : undefined;
    if (per === undefined) {
      const known = Object.keys(scopes).filter((known) => scopes[known] === 'account');
      fail(
        `${where}.${name.slice(0, 64)}`,
        `${owner}: unknown scope ${scope}; scopes with per-account limits: ${known.join(', ') || 'none'}`,
      );
    }
    if (per === 'ip') {
      fail(
        `${where}.${name}`,
        `${owner}: scope ${scope} is counted per client IP and cannot be set per account`,
      );
    }
    const limit = (value as Record<string, unknown>)[name];
    if (
      typeof limit !== 'number' ||
      !Number.isInteger(limit) ||
      limit < 1 ||
      limit > MAX_ACCOUNT_LIMIT
    ) {
      fail(
        `${where}.${name}`,
        `${owner}: scope ${scope}: must be a whole number from 1 to ${MAX_ACCOUNT_LIMIT}`,
      );
    }
    limits[name] = limit;
  }
  return Object.freeze(limits);
}

/** A canonical text of validated limits, `authenticated=300,payments=6000`: equal sets, equal text. */
export function limitsText(limits: AccountLimits): string {
  return Object.keys(limits)
    .sort()
    .map((name) => `${name}=${String(limits[name])}`)
    .join(',');
}

/** The limits `limitsText()` wrote, as one frozen object. */
export function limitsFromText(text: string): AccountLimits {
  const limits: Record<string, number> = {};
  for (const entry of text.split(',')) {
    const split = entry.indexOf('=');
    limits[entry.slice(0, split)] = Number(entry.slice(split + 1));
  }
  return Object.freeze(limits);
}

/**
 * A key's permissions, as a mask over `names` (permissions.ts): `null` or absent is
 * `undefined`, a key that may do all its role allows. A list must hold at least one name, each once
 * and each among `names`: an empty list is refused rather than read as "nothing", since a key that
 * may call nothing should be revoked (the database's check forbids it too). Every fault names the
 * name, and the key when `key` is given (a key whose id was made for it is not named: the one who
 * sent the list never saw that id).
 */
export function keyPermissions(
  value: unknown,
  where: string,
  key: string | undefined,
  names: readonly string[],
  fail: Fail,
): number | undefined {
  if (value === null || value === undefined) return undefined;
  const owner = key === undefined ? '' : `key ${JSON.stringify(key)}: `;
  if (!Array.isArray(value)) {
    return fail(where, `${owner}must be a list of permission names, or null for no restriction`);
  }
  if (value.length === 0) {
    return fail(
      where,
      `${owner}an empty list would allow nothing; revoke the key instead, or null for no restriction`,
    );
  }
  let mask = 0;
  (value as unknown[]).forEach((name, index) => {
    const shown =
      typeof name === 'string'
        ? JSON.stringify(name.slice(0, 64))
        : typeof name === 'object' && name !== null
          ? 'an object'
          : String(name);
    const bit = typeof name === 'string' ? names.indexOf(name) : -1;
    if (bit < 0) {
      fail(
        `${where}[${index}]`,
        `${owner}unknown permission ${shown}; expected one of ${names.join(', ')}`,
      );
    }
    if ((mask & (1 << bit)) !== 0) {
      fail(`${where}[${index}]`, `${owner}permission ${shown} is listed twice`);
    }
    mask |= 1 << bit;
  });
  return mask;
}
