import { ConfigurationError } from '../errors';
import { IpWhitelist } from '../core/ip-whitelist';
import { keyShape } from './key-format';
import type { KeyRecord } from './key-record';
import { OWNER_ROLE, parseRole } from '../core/roles';

/**
 * Validation of the keys document:
 *
 *     { "accounts": [ { "id", "ipWhitelist"?, "keys": [ { "id", "publishableKey",
 *                                                          "secretKeySha256", "role"?, "revoked"?, "expiresAt"? } ] } ] }
 *
 * Every fault is a `ConfigurationError` naming the entry (`accounts[0].keys[1].role: …`). Unknown
 * fields are faults too: a misspelt `ipWhitelist` must not silently lift a restriction.
 */

const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;
const DIGEST_PATTERN = /^[0-9a-f]{64}$/;
const ACCOUNT_FIELDS = new Set(['id', 'ipWhitelist', 'keys']);
const KEY_FIELDS = new Set([
  'id',
  'publishableKey',
  'secretKeySha256',
  'role',
  'revoked',
  'expiresAt',
]);
/** RFC 3339 with a time zone: `2026-12-31T23:59:59Z`, `2026-12-31T23:59:59.5+02:00`. */
const RFC3339_PATTERN =
  /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/i;

export function parseKeysDocument(document: unknown, source: string): KeyRecord[] {
  const fail = (where: string, problem: string): never => {
    throw new ConfigurationError(`${source}: ${where}: ${problem}`);
  };
  const root = asObject(document, 'the document', new Set(['accounts']), fail);
  const accounts = root.accounts;
  if (!Array.isArray(accounts) || accounts.length === 0) {
    return fail('accounts', 'must be a non-empty array');
  }

  const records: KeyRecord[] = [];
  const seen = { accounts: new Set<string>(), keys: new Set<string>(), pks: new Set<string>() };
  const digests = new Set<string>();
  accounts.forEach((accountValue: unknown, a) => {
    const where = `accounts[${a}]`;
    const account = asObject(accountValue, where, ACCOUNT_FIELDS, fail);
    const accountId = identifier(account.id, `${where}.id`, fail);
    if (seen.accounts.has(accountId)) fail(`${where}.id`, `duplicate account id "${accountId}"`);
    seen.accounts.add(accountId);

    let ipWhitelist: IpWhitelist | undefined;
    if (account.ipWhitelist !== undefined) {
      try {
        ipWhitelist = IpWhitelist.parse(account.ipWhitelist, `${where}.ipWhitelist`);
      } catch (error) {
        throw new ConfigurationError(`${source}: ${(error as Error).message}`);
      }
    }

    if (!Array.isArray(account.keys) || account.keys.length === 0) {
      fail(`${where}.keys`, 'must be a non-empty array');
    }
    (account.keys as unknown[]).forEach((keyValue, k) => {
      const at = `${where}.keys[${k}]`;
      const key = asObject(keyValue, at, KEY_FIELDS, fail);
      const id = identifier(key.id, `${at}.id`, fail);
      if (seen.keys.has(id)) fail(`${at}.id`, `duplicate key id "${id}"`);
      seen.keys.add(id);

      const publishableKey = key.publishableKey;
      if (typeof publishableKey !== 'string') fail(`${at}.publishableKey`, 'must be a string');
      const pk = publishableKey as string;
      const shape = keyShape(pk);
      if (shape === 'malformed') {
        fail(`${at}.publishableKey`, 'must be 20 to 200 printable ASCII characters, no spaces');
      }
      if (shape === 'corrupt') fail(`${at}.publishableKey`, 'has a wrong checksum');
      if (pk.startsWith('sk_')) fail(`${at}.publishableKey`, 'is a secret key (sk_ prefix)');
      if (seen.pks.has(pk)) fail(`${at}.publishableKey`, 'duplicate publishable key');
      seen.pks.add(pk);

      const digest = key.secretKeySha256;
      if (typeof digest !== 'string' || !DIGEST_PATTERN.test(digest)) {
        fail(`${at}.secretKeySha256`, 'must be 64 lowercase hexadecimal characters');
      }
      if (digests.has(digest as string)) fail(`${at}.secretKeySha256`, 'duplicate secret key');
      digests.add(digest as string);

      const role =
        key.role === undefined ? OWNER_ROLE : parseRole(key.role, `${source}: ${at}.role`);
      if (key.revoked !== undefined && typeof key.revoked !== 'boolean') {
        fail(`${at}.revoked`, 'must be true or false');
      }
      records.push({
        id,
        accountId,
        role,
        publishableKey: pk,
        secretKeySha256: Buffer.from(digest as string, 'hex'),
        revoked: key.revoked === true,
        expiresAt: expiresAt(key.expiresAt, `${at}.expiresAt`, fail),
        ipWhitelist,
      });
    });
  });
  return records;
}

type Fail = (where: string, problem: string) => never;

function asObject(
  value: unknown,
  where: string,
  allowed: ReadonlySet<string>,
  fail: Fail,
): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return fail(where, 'must be an object');
  }
  for (const field of Object.keys(value)) {
    if (!allowed.has(field)) {
      fail(where, `unknown field "${field}" (expected ${[...allowed].join(', ')})`);
    }
  }
  return value as Record<string, unknown>;
}

/** A key's deadline in ms since the epoch, from an RFC 3339 time; `undefined` when absent. */
function expiresAt(value: unknown, where: string, fail: Fail): number | undefined {
  if (value === undefined) return undefined;
  const time = typeof value === 'string' && RFC3339_PATTERN.test(value) ? Date.parse(value) : NaN;
  if (!Number.isFinite(time) || !isCalendarDate(value as string)) {
    return fail(where, 'must be an RFC 3339 time with a zone, e.g. "2026-12-31T23:59:59Z"');
  }
  return time;
}

/** `2026-02-30…` matches the pattern and `Date.parse` rolls it over to March: refuse it. */
function isCalendarDate(time: string): boolean {
  const [year, month, day] = time.slice(0, 10).split('-').map(Number);
  const daysInMonth = new Date(Date.UTC(year ?? 0, month ?? 0, 0)).getUTCDate();
  return (day ?? 0) <= daysInMonth;
}

function identifier(value: unknown, where: string, fail: Fail): string {
  if (typeof value !== 'string' || !ID_PATTERN.test(value)) {
    return fail(where, 'must be 1 to 64 characters of letters, digits, "_", ".", ":" or "-"');
  }
  return value;
}
