import { ConfigurationError } from '../errors';
import { type IpWhitelist, WhitelistParser } from '../model/ip-whitelist';
import type { AccountLimits, KeyRecord, LimitScopes } from '../model/key-record';
import { OWNER_ROLE, parseRole } from '../model/roles';
import {
  accountLimits,
  expiresAt,
  type Fail,
  identifier,
  keyPermissions,
  publishableKey,
  secretDigest,
} from './key-rules';
import { PERMISSIONS, PermissionSets } from '../model/permissions';
import { DuplicateFieldError, JsonSyntaxError, ReadError, readJsonFile } from './json-stream';

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
 * key's `permissions` only the names of `permissionNames` (the seven built-in ones by default).
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

/** A field of a key that must be unique across the document. */
export type UniqueKeyField = 'id' | 'publishableKey' | 'secretKeySha256';

/**
 * Where the checker hands what it validated, in document order: each account, then its keys with
 * what `account()` returned for it. The sink keeps the values that must be unique and says when
 * one was taken before: `account()` returns `TAKEN` for an account id seen before, `key()` the
 * first field of the key an earlier key took (or `undefined`). A ring builder answers from its own
 * hash tables; `UniqueValues` answers for sinks that keep no index.
 */
export interface KeysDocumentSink<A> {
  account(id: string, ipWhitelist: IpWhitelist | undefined, limits?: AccountLimits): A | Taken;
  key(account: A, key: KeysFileKey): UniqueKeyField | undefined;
}

export const TAKEN = Symbol('taken');
export type Taken = typeof TAKEN;

/** The unique values of a document, in sets: for sinks that keep no index of their own. */
class UniqueValues {
  private readonly accounts = new Set<string>();
  private readonly ids = new Set<string>();
  private readonly publishable = new Set<string>();
  private readonly secrets = new Set<string>();

  /** Records an account id; false when an earlier account had it. */
  account(id: string): boolean {
    return claim(this.accounts, id);
  }

  /** Records a key's unique fields; the first one an earlier key had, if any. */
  key(key: KeysFileKey): UniqueKeyField | undefined {
    if (!claim(this.ids, key.id)) return 'id';
    if (!claim(this.publishable, key.publishableKey)) return 'publishableKey';
    if (!claim(this.secrets, Buffer.from(key.secretKeySha256).toString('hex'))) {
      return 'secretKeySha256';
    }
    return undefined;
  }
}

function claim(values: Set<string>, value: string): boolean {
  if (values.has(value)) return false;
  values.add(value);
  return true;
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
  const unique = new UniqueValues();
  visitKeysDocument<Pick<KeyRecord, 'ipWhitelist' | 'limits'> & { id: string }>(
    document,
    source,
    {
      account: (id, ipWhitelist, limits) =>
        unique.account(id) ? { id, ipWhitelist, limits } : TAKEN,
      key: (account, key) => {
        const taken = unique.key(key);
        if (taken !== undefined) return taken;
        const { permissionMask, ...fields } = key;
        const permissions = permissionSets.of(permissionMask);
        records.push({
          ...fields,
          accountId: account.id,
          ipWhitelist: account.ipWhitelist,
          ...(account.limits === undefined ? {} : { limits: account.limits }),
          ...(permissions === undefined ? {} : { permissions }),
        });
        return undefined;
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
  const checker = new KeysDocumentChecker(source, sink, limitScopes, permissionNames);
  const root = asObject(document, 'the document', ROOT_FIELDS, checker.fail);
  if (Array.isArray(root.accounts)) {
    for (const account of root.accounts as unknown[]) checker.account(account);
  } else checker.field('accounts', root.accounts);
  checker.end();
}

/**
 * Validates the keys file at `path` as it is read, one account at a time (json-stream.ts), handing
 * each account and key to `sink`: a file of a million keys is never held whole. `opened(bytes)` is
 * called with the file's size before it is read. Faults are `ConfigurationError`s, as
 * `FileKeyStore` has always reported them: `keys file <path>: cannot be read (ENOENT)` or `…: is
 * not valid JSON`, and `<path>: accounts[0].keys[1].role: …` for an entry. Read in order, a fault
 * in an entry is reported before a syntax error further on.
 */
export function visitKeysFile<A>(
  path: string,
  sink: KeysDocumentSink<A>,
  limitScopes: LimitScopes = {},
  permissionNames: readonly string[] = PERMISSIONS,
  opened?: (bytes: number) => void,
): void {
  const checker = new KeysDocumentChecker(path, sink, limitScopes, permissionNames);
  try {
    readJsonFile(
      path,
      'accounts',
      {
        element: (account) => {
          checker.account(account);
        },
        field: (name, value) => {
          checker.field(name, value);
        },
        root: () => checker.fail('the document', 'must be an object'),
      },
      opened,
    );
  } catch (error) {
    if (error instanceof ReadError)
      throw new ConfigurationError(`keys file ${path}: ${error.message}`);
    if (error instanceof DuplicateFieldError) checker.fail('the document', error.message);
    if (error instanceof JsonSyntaxError)
      throw new ConfigurationError(`keys file ${path}: is not valid JSON`);
    throw error;
  }
  checker.end();
}

const ROOT_FIELDS = new Set(['accounts']);

/**
 * Checks a keys document's accounts one by one (`account()`, in document order), then `end()`.
 * Every fault is a `ConfigurationError` naming the entry.
 */
class KeysDocumentChecker<A> {
  private accounts = 0;
  private readonly whitelists = new WhitelistParser(WHITELISTS_REMEMBERED);

  constructor(
    private readonly source: string,
    private readonly sink: KeysDocumentSink<A>,
    private readonly limitScopes: LimitScopes,
    private readonly permissionNames: readonly string[],
  ) {}

  readonly fail = (where: string, problem: string): never => {
    throw new ConfigurationError(`${this.source}: ${where}: ${problem}`);
  };

  /** A field of the root object other than an `accounts` array. */
  field(name: string, value: unknown): void {
    if (!ROOT_FIELDS.has(name)) {
      this.fail(
        'the document',
        `unknown field "${name}" (expected ${[...ROOT_FIELDS].join(', ')})`,
      );
    }
    if (!Array.isArray(value)) this.fail('accounts', 'must be a non-empty array');
  }

  end(): void {
    if (this.accounts === 0) this.fail('accounts', 'must be a non-empty array');
  }

  account(value: unknown): void {
    const fail = this.fail;
    const where = `accounts[${this.accounts++}]`;
    const account = asObject(value, where, ACCOUNT_FIELDS, fail);
    const accountId = identifier(account.id, `${where}.id`, fail);

    let ipWhitelist: IpWhitelist | undefined;
    if (account.ipWhitelist !== undefined) {
      try {
        ipWhitelist = this.whitelists.parse(account.ipWhitelist, `${where}.ipWhitelist`);
      } catch (error) {
        throw new ConfigurationError(`${this.source}: ${(error as Error).message}`);
      }
    }

    const limits =
      account.limits === undefined
        ? undefined
        : accountLimits(account.limits, `${where}.limits`, accountId, this.limitScopes, fail);

    if (!Array.isArray(account.keys) || account.keys.length === 0) {
      fail(`${where}.keys`, 'must be a non-empty array');
    }
    const handle = this.sink.account(accountId, ipWhitelist, limits);
    if (handle === TAKEN) fail(`${where}.id`, `duplicate account id "${accountId}"`);
    (account.keys as unknown[]).forEach((keyValue, k) => {
      this.key(handle as A, keyValue, `${where}.keys[${k}]`);
    });
  }

  private key(handle: A, value: unknown, at: string): void {
    const fail = this.fail;
    const key = asObject(value, at, KEY_FIELDS, fail);
    const id = identifier(key.id, `${at}.id`, fail);
    const pk = publishableKey(key.publishableKey, `${at}.publishableKey`, fail);
    const digest = secretDigest(key.secretKeySha256, `${at}.secretKeySha256`, fail);
    const role =
      key.role === undefined ? OWNER_ROLE : parseRole(key.role, `${this.source}: ${at}.role`);
    if (key.revoked !== undefined && typeof key.revoked !== 'boolean') {
      fail(`${at}.revoked`, 'must be true or false');
    }
    const taken = this.sink.key(handle, {
      id,
      role,
      publishableKey: pk,
      secretKeySha256: Buffer.from(digest, 'hex'),
      revoked: key.revoked === true,
      expiresAt: expiresAt(key.expiresAt, `${at}.expiresAt`, fail),
      permissionMask:
        keyPermissions(key.permissions, `${at}.permissions`, id, this.permissionNames, fail) ?? 0,
    });
    if (taken !== undefined) fail(`${at}.${taken}`, DUPLICATE[taken](id));
  }
}

const DUPLICATE: Record<UniqueKeyField, (id: string) => string> = {
  id: (id) => `duplicate key id "${id}"`,
  publishableKey: () => 'duplicate publishable key',
  secretKeySha256: () => 'duplicate secret key',
};

/**
 * Parsed whitelists the checker keeps for reuse (accounts often share lists): bounded, so a file
 * where every account has a list of its own never holds them all.
 */
const WHITELISTS_REMEMBERED = 4096;

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
