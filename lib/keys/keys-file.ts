import { ConfigurationError } from '../errors';
import { type IpWhitelist, WhitelistParser } from '../core/ip-whitelist';
import type { AccountLimits, KeyRecord, LimitScopes } from './key-record';
import { OWNER_ROLE, parseRole } from '../core/roles';
import {
  accountLimits,
  expiresAt,
  type Fail,
  identifier,
  keyPermissions,
  publishableKey,
  secretDigest,
} from './key-rules';
import { PERMISSIONS, PermissionSets } from '../core/permissions';

/**
 * Validation of the keys document:
 *
 *     { "accounts": [ { "id", "ipWhitelist"?, "limits"?, "keys": [ { "id", "publishableKey",
 *                                                          "secretKeySha256", "role"?, "revoked"?, "expiresAt"?,
 *                                                          "permissions"? } ] } ] }
 *
 * Every fault is a `ConfigurationError` naming the entry (`accounts[0].keys[1].role: …`). Unknown
 * fields are faults too: a misspelt `ipWhitelist` must not silently lift a restriction. An
 * account's `limits` may name only the per-account scopes of `limitScopes` (none by default); a
 * key's `permissions` only the names of `permissionNames` (the contract's seven by default).
 */

const ACCOUNT_FIELDS = new Set(['id', 'ipWhitelist', 'limits', 'keys']);
const KEY_FIELDS = new Set([
  'id',
  'publishableKey',
  'secretKeySha256',
  'role',
  'revoked',
  'expiresAt',
  'permissions',
]);
/**
 * A key of the document once validated, without its account's whitelist; its permissions as a
 * mask over the vocabulary (0: not restricted).
 */
export type KeysFileKey = Omit<
  KeyRecord,
  'ipWhitelist' | 'accountId' | 'limits' | 'permissions'
> & {
  readonly permissionMask: number;
};

/**
 * Where `visitKeysDocument` hands what it validated, in document order: each account, then its
 * keys with what `account()` returned for it.
 */
export interface KeysDocumentSink<A> {
  account(id: string, ipWhitelist: IpWhitelist | undefined, limits?: AccountLimits): A;
  key(account: A, key: KeysFileKey): void;
}

/** The records of a keys document, every key with its account's (shared) whitelist and limits. */
export function parseKeysDocument(
  document: unknown,
  source: string,
  limitScopes: LimitScopes = {},
  permissionNames: readonly string[] = PERMISSIONS,
): KeyRecord[] {
  const records: KeyRecord[] = [];
  const permissionSets = new PermissionSets(permissionNames);
  visitKeysDocument<Pick<KeyRecord, 'ipWhitelist' | 'limits'> & { id: string }>(
    document,
    source,
    {
      account: (id, ipWhitelist, limits) => ({ id, ipWhitelist, limits }),
      key: (account, { permissionMask, ...key }) => {
        const permissions = permissionSets.of(permissionMask);
        records.push({
          ...key,
          accountId: account.id,
          ipWhitelist: account.ipWhitelist,
          ...(account.limits === undefined ? {} : { limits: account.limits }),
          ...(permissions === undefined ? {} : { permissions }),
        });
      },
    },
    limitScopes,
    permissionNames,
  );
  return records;
}

/** Validates a keys document, handing each account and key to `sink`; throws on the first fault. */
export function visitKeysDocument<A>(
  document: unknown,
  source: string,
  sink: KeysDocumentSink<A>,
  limitScopes: LimitScopes = {},
  permissionNames: readonly string[] = PERMISSIONS,
): void {
  const fail = (where: string, problem: string): never => {
    throw new ConfigurationError(`${source}: ${where}: ${problem}`);
  };
  const root = asObject(document, 'the document', new Set(['accounts']), fail);
  const accounts = root.accounts;
  if (!Array.isArray(accounts) || accounts.length === 0) {
    return fail('accounts', 'must be a non-empty array');
  }

  const seen = { accounts: new Set<string>(), keys: new Set<string>(), pks: new Set<string>() };
  const digests = new Set<string>();
  const whitelists = new WhitelistParser();
  accounts.forEach((accountValue: unknown, a) => {
    const where = `accounts[${a}]`;
    const account = asObject(accountValue, where, ACCOUNT_FIELDS, fail);
    const accountId = identifier(account.id, `${where}.id`, fail);
    if (seen.accounts.has(accountId)) fail(`${where}.id`, `duplicate account id "${accountId}"`);
    seen.accounts.add(accountId);

    let ipWhitelist: IpWhitelist | undefined;
    if (account.ipWhitelist !== undefined) {
      try {
        ipWhitelist = whitelists.parse(account.ipWhitelist, `${where}.ipWhitelist`);
      } catch (error) {
        throw new ConfigurationError(`${source}: ${(error as Error).message}`);
      }
    }

    const limits =
      account.limits === undefined
        ? undefined
        : accountLimits(account.limits, `${where}.limits`, accountId, limitScopes, fail);

    if (!Array.isArray(account.keys) || account.keys.length === 0) {
      fail(`${where}.keys`, 'must be a non-empty array');
    }
    const handle = sink.account(accountId, ipWhitelist, limits);
    (account.keys as unknown[]).forEach((keyValue, k) => {
      const at = `${where}.keys[${k}]`;
      const key = asObject(keyValue, at, KEY_FIELDS, fail);
      const id = identifier(key.id, `${at}.id`, fail);
      if (seen.keys.has(id)) fail(`${at}.id`, `duplicate key id "${id}"`);
      seen.keys.add(id);

      const pk = publishableKey(key.publishableKey, `${at}.publishableKey`, fail);
      if (seen.pks.has(pk)) fail(`${at}.publishableKey`, 'duplicate publishable key');
      seen.pks.add(pk);

      const digest = secretDigest(key.secretKeySha256, `${at}.secretKeySha256`, fail);
      if (digests.has(digest)) fail(`${at}.secretKeySha256`, 'duplicate secret key');
      digests.add(digest);

      const role =
        key.role === undefined ? OWNER_ROLE : parseRole(key.role, `${source}: ${at}.role`);
      if (key.revoked !== undefined && typeof key.revoked !== 'boolean') {
        fail(`${at}.revoked`, 'must be true or false');
      }
      sink.key(handle, {
        id,
        role,
        publishableKey: pk,
        secretKeySha256: Buffer.from(digest, 'hex'),
        revoked: key.revoked === true,
        expiresAt: expiresAt(key.expiresAt, `${at}.expiresAt`, fail),
        permissionMask:
          keyPermissions(key.permissions, `${at}.permissions`, id, permissionNames, fail) ?? 0,
      });
    });
  });
}

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
