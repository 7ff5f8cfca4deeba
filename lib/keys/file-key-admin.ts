import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { OWNER_ROLE, type Role } from '../model/roles';
import {
  ConflictError,
  InvalidRequestError,
  KeyAlreadyRolledError,
  KeyNotRollableError,
  TollgateError,
} from '../errors';
import { sha256 } from './key-digest';
import { IpWhitelist } from '../model/ip-whitelist';
import { generateKey, type KeyEnvironment } from '../model/key-format';
import * as rules from './key-rules';
import type { LimitScopes } from '../model/key-record';
import { parseKeysDocument } from './keys-file';
import { KEY_STORE_LIMIT_OPTION_CHECKS } from './key-store';
import { check, checkOptions, type OptionChecks } from '../options';
import { permissionNames as checkedPermissionNames, permissionsOfMask } from '../model/permissions';
import { isGraceSeconds, MAX_GRACE_SECONDS, planRoll } from './key-roll';
import type { KeyAdmin } from './key-admin';
import type {
  AccountView,
  CreateKeyOptions,
  KeyChanges,
  KeysDocument,
  KeyView,
  NewKey,
  RollOptions,
  RollResult,
} from './pg-key-views';

/** Options of `FileKeyAdmin`, as `FileKeyStore` and `PgKeyStore` take them. */
export interface FileKeyAdminOptions {
  /** The scopes an account's `limits` may override (see `KeyStoreLimitOptions`). */
  readonly limitScopes?: LimitScopes;
  /** Permission names a key may hold besides the built-in ones. */
  readonly permissions?: readonly string[];
  /** Keys made by `createKey`: `pk_test_…` or `pk_live_…` (a roll keeps the old key's). */
  readonly keyEnvironment?: KeyEnvironment;
}

type Account = KeysDocument['accounts'][number];
type Key = Account['keys'][number];

const FILE_KEY_ADMIN_OPTION_CHECKS: OptionChecks<FileKeyAdminOptions> = {
  ...KEY_STORE_LIMIT_OPTION_CHECKS,
  keyEnvironment: check("'test' or 'live'", (value) => value === 'test' || value === 'live'),
};

const invalid: rules.Fail = (where, problem) => {
  throw new InvalidRequestError(`${where}: ${problem}`);
};

function notFound(what: 'account' | 'key', id: string): TollgateError {
  return new TollgateError(404, 'not_found', `No ${what} with id ${JSON.stringify(id)}`);
}

function newKeyId(): string {
  return `key_${randomBytes(6).toString('hex')}`;
}

/**
 * Key administration on a keys file (`KeyAdmin`): the document is held in memory, and each write
 * is checked with the rules `PgKeyStore` applies (key-rules.ts, key-roll.ts), refused with the same
 * errors, then the whole new document is validated by the keys file's loader and the file replaced
 * atomically (written beside it, mode 0600, then renamed), so a gateway reloading it on `SIGHUP`
 * loads it whole. A write refused leaves the file and the document as they were. A keys file holds
 * no account without keys: one made by `createAccount` is held in memory and written with its
 * first key. A keys file holds
 * no times of creation, change or use, nor when a key was revoked: those fields of the views are
 * `null` (`revoked` says whether a key is revoked).
 */
export class FileKeyAdmin implements KeyAdmin {
  private readonly limitScopes: LimitScopes;
  private readonly permissionNames: readonly string[];
  private readonly environment: KeyEnvironment;
  private current: KeysDocument;

  /**
   * `document` is validated here as the loader validates the file (`{ accounts: [] }`, a file
   * not written yet, is taken as it is); `file` is where writes go.
   */
  constructor(
    document: unknown,
    /** The keys file each write replaces. */
    readonly file: string,
    options: FileKeyAdminOptions = {},
  ) {
    checkOptions('FileKeyAdmin', options, FILE_KEY_ADMIN_OPTION_CHECKS);
    this.limitScopes = { ...(options.limitScopes ?? {}) };
    this.permissionNames = checkedPermissionNames(options.permissions, 'FileKeyAdmin');
    this.environment = options.keyEnvironment ?? 'test';
    // A file not written yet is empty, which the loader refuses: its first write makes it.
    if (!isEmptyDocument(document)) this.validate(document);
    this.current = structuredClone(document as KeysDocument);
  }

  /** Reads and validates the keys file at `file`; a file that is not there is an empty document. */
  static open(file: string, options: FileKeyAdminOptions = {}): FileKeyAdmin {
    checkOptions('FileKeyAdmin.open()', options, FILE_KEY_ADMIN_OPTION_CHECKS);
    const document: unknown = existsSync(file)
      ? JSON.parse(readFileSync(file, 'utf8'))
      : { accounts: [] };
    return new FileKeyAdmin(document, file, options);
  }

  /** The document as it is now (a copy), accounts not yet written (without keys) included. */
  document(): KeysDocument {
    return structuredClone(this.current);
  }

  /** The key with this id as the file holds it (a copy); `undefined` when there is none. */
  findKey(
    keyId: string,
  ): (KeysDocument['accounts'][number]['keys'][number] & { accountId: string }) | undefined {
    for (const account of this.current.accounts) {
      const key = account.keys.find((candidate) => candidate.id === keyId);
      if (key !== undefined) return { ...structuredClone(key), accountId: account.id };
    }
    return undefined;
  }

  /** The account with this id; `undefined` when there is none. */
  findAccount(accountId: string): AccountView | undefined {
    const account = this.current.accounts.find((candidate) => candidate.id === accountId);
    return account === undefined ? undefined : accountView(account);
  }

  createAccount(
    id: string,
    ipWhitelist?: readonly string[] | null,
    limits?: Readonly<Record<string, number>> | null,
  ): Promise<AccountView> {
    return this.write((document) => {
      const accountId = rules.identifier(id, 'id', invalid);
      const entries = whitelistEntries(ipWhitelist);
      const overrides = this.limits(limits ?? null, accountId);
      if (document.accounts.some((account) => account.id === accountId)) {
        throw new ConflictError('The account id is already in use');
      }
      const account: Account = {
        id: accountId,
        ...(entries === null ? {} : { ipWhitelist: entries }),
        ...(overrides === null ? {} : { limits: overrides }),
        keys: [],
      };
      document.accounts.push(account);
      return accountView(account);
    });
  }

  setLimits(
    accountId: string,
    limits: Readonly<Record<string, number>> | null,
  ): Promise<AccountView> {
    return this.write((document) => {
      const account = findAccount(document, accountId);
      // Checked for a caller in plain JavaScript, whom the types do not hold.
      if ((limits as unknown) === undefined) {
        invalid('limits', 'is required: an object of scope name to requests per window, or null');
      }
      const overrides = this.limits(limits, account.id);
      if (overrides === null) delete account.limits;
      else account.limits = overrides;
      return accountView(account);
    });
  }

  setIpWhitelist(accountId: string, entries: readonly string[] | null): Promise<AccountView> {
    return this.write((document) => {
      const account = findAccount(document, accountId);
      if ((entries as unknown) === undefined)
        invalid('entries', 'is required: a list of addresses, or null');
      const whitelist = whitelistEntries(entries);
      if (whitelist === null) delete account.ipWhitelist;
      else account.ipWhitelist = whitelist;
      return accountView(account);
    });
  }

  /**
   * `addAccount`: an account not in the file is added with the key, in the same write (the key
   * command's `create`); otherwise it is not found, as `PgKeyStore` says.
   */
  createKey(
    accountId: string,
    options: CreateKeyOptions = {},
    { addAccount = false }: { readonly addAccount?: boolean } = {},
  ): Promise<NewKey> {
    return this.write((document) => {
      if (addAccount && !document.accounts.some((account) => account.id === accountId)) {
        document.accounts.push({ id: rules.identifier(accountId, 'id', invalid), keys: [] });
      }
      const account = findAccount(document, accountId);
      const id =
        options.id === undefined ? newKeyId() : rules.identifier(options.id, 'id', invalid);
      const role =
        options.role === undefined ? OWNER_ROLE : rules.role(options.role, 'role', invalid);
      const expiresAt = expiryInput(options.expiresAt, Date.now());
      const permissions = this.permissions(
        options.permissions ?? null,
        options.id === undefined ? undefined : id,
      );
      return addKey(document, account, { id, role, expiresAt, permissions }, this.environment);
    });
  }

  updateKey(keyId: string, changes: KeyChanges): Promise<KeyView> {
    return this.write((document) => {
      const { account, key } = findKey(document, keyId);
      const hasRole = Object.hasOwn(changes, 'role') && changes.role !== undefined;
      const hasPermissions =
        Object.hasOwn(changes, 'permissions') && changes.permissions !== undefined;
      if (!hasRole && !hasPermissions) {
        throw new InvalidRequestError(
          'role or permissions is required: a role, a list of permissions, or null for no restriction',
        );
      }
      if (hasRole) key.role = rules.role(changes.role, 'role', invalid);
      if (hasPermissions) {
        const permissions = this.permissions(changes.permissions, key.id);
        if (permissions === null) delete key.permissions;
        else key.permissions = permissions;
      }
      return keyView(account, key);
    });
  }

  roll(keyId: string, graceSeconds: number, options: RollOptions = {}): Promise<RollResult> {
    return this.write((document) => {
      const { account, key } = findKey(document, keyId);
      if (typeof graceSeconds !== 'number' || !isGraceSeconds(graceSeconds)) {
        invalid('graceSeconds', `must be a whole number from 0 to ${MAX_GRACE_SECONDS}`);
      }
      const newId =
        options.id === undefined ? newKeyId() : rules.identifier(options.id, 'id', invalid);
      const plan = planRoll(
        {
          revoked: key.revoked === true,
          expiresAt: key.expiresAt === undefined ? undefined : Date.parse(key.expiresAt),
        },
        graceSeconds,
        Date.now(),
      );
      if (plan.kind === 'revoked' || plan.kind === 'expired') {
        throw new KeyNotRollableError(key.id, plan.kind);
      }
      if (plan.kind === 'rolled') throw new KeyAlreadyRolledError(key.id);
      // The new pair may do what the old one could, no more, in the old one's environment.
      const created = addKey(
        document,
        account,
        {
          id: newId,
          role: roleOf(key),
          expiresAt: undefined,
          permissions: key.permissions === undefined ? null : [...key.permissions],
        },
        environmentOf(key.publishableKey) ?? this.environment,
      );
      key.expiresAt = new Date(plan.deadline).toISOString();
      return { key: created, previous: keyView(account, key) };
    });
  }

  revoke(keyId: string): Promise<KeyView> {
    return this.write((document) => {
      const { account, key } = findKey(document, keyId);
      key.revoked = true;
      return keyView(account, key);
    });
  }

  /**
   * Adds the document's accounts and keys to the file's, all or nothing: an account or key id
   * the file holds already is a `ConflictError`, and the result is checked whole by the loader.
   */
  import(document: unknown): Promise<{ accounts: number; keys: number }> {
    return this.write((current) => {
      try {
        parseKeysDocument(document, 'document', this.limitScopes, this.permissionNames);
      } catch (error) {
        throw new InvalidRequestError((error as Error).message);
      }
      const incoming = structuredClone(document as KeysDocument);
      let keys = 0;
      for (const account of incoming.accounts) {
        if (current.accounts.some((candidate) => candidate.id === account.id)) {
          throw new ConflictError('The account id is already in use');
        }
        keys += account.keys.length;
        current.accounts.push(account);
      }
      try {
        this.validate(current);
      } catch (error) {
        throw new ConflictError((error as Error).message);
      }
      return { accounts: incoming.accounts.length, keys };
    });
  }

  /** The accounts with keys (a keys file holds no others, nor does `PgKeyStore` export them). */
  export(): Promise<KeysDocument> {
    return Promise.resolve(fileDocument(this.document()));
  }

  /** A change applied to a copy, the copy validated whole and written, then taken as current. */
  private write<T>(change: (document: KeysDocument) => T): Promise<T> {
    try {
      const next = structuredClone(this.current);
      const result = change(next);
      const written = fileDocument(next);
      // Nothing a keys file can hold yet (accounts without keys): nothing to write.
      if (written.accounts.length > 0) {
        this.validate(written);
        writeKeysFile(this.file, written);
      }
      this.current = next;
      return Promise.resolve(result);
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
  }

  private validate(document: unknown): void {
    parseKeysDocument(document, this.file, this.limitScopes, this.permissionNames);
  }

  private limits(value: unknown, account: string): Record<string, number> | null {
    if (value === null) return null;
    const limits = rules.accountLimits(value, 'limits', account, this.limitScopes, invalid);
    if (limits === undefined) return null;
    // In the order given, as a person wrote them: the file is theirs to read.
    return Object.fromEntries(
      Object.keys(value as object).flatMap((scope) => {
        const limit = limits[scope];
        return limit === undefined ? [] : [[scope, limit] as const];
      }),
    );
  }

  private permissions(value: unknown, key: string | undefined): string[] | null {
    const mask = rules.keyPermissions(value, 'permissions', key, this.permissionNames, invalid);
    return mask === undefined ? null : [...permissionsOfMask(mask, this.permissionNames)];
  }
}

/** Writes a keys document atomically: a file beside it, mode 0600, renamed over it. */
export function writeKeysFile(file: string, document: KeysDocument): void {
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(document, null, 2)}\n`, { mode: 0o600 });
  renameSync(temporary, file);
}

/**
 * `null`/absent: no restriction; otherwise the canonical entries of a valid whitelist. A fault is
 * the parser's own words, naming the entry as the file does: `ipWhitelist[1] "x" is not …`.
 */
function whitelistEntries(value: unknown): string[] | null {
  if (value === null || value === undefined) return null;
  try {
    return [...IpWhitelist.parse(value, 'ipWhitelist').entries()];
  } catch (error) {
    throw new InvalidRequestError((error as Error).message);
  }
}

function expiryInput(value: unknown, now: number): number | undefined {
  if (value === undefined || value === null) return undefined;
  const time =
    typeof value === 'number'
      ? rules.expiryTime(value, 'expiresAt', invalid)
      : value instanceof Date
        ? rules.expiryTime(value.getTime(), 'expiresAt', invalid)
        : rules.expiresAt(value, 'expiresAt', invalid);
  if (time !== undefined && time <= now) invalid('expiresAt', 'must be in the future');
  return time;
}

function environmentOf(publishableKey: string): KeyEnvironment | undefined {
  if (publishableKey.startsWith('pk_live_')) return 'live';
  if (publishableKey.startsWith('pk_test_')) return 'test';
  return undefined;
}

function findAccount(document: KeysDocument, accountId: unknown): Account {
  if (typeof accountId !== 'string') invalid('account id', 'must be a string');
  const account = document.accounts.find((candidate) => candidate.id === accountId);
  if (account === undefined) throw notFound('account', accountId.slice(0, 64));
  return account;
}

function findKey(document: KeysDocument, keyId: unknown): { account: Account; key: Key } {
  if (typeof keyId !== 'string') invalid('key id', 'must be a string');
  for (const account of document.accounts) {
    const key = account.keys.find((candidate) => candidate.id === keyId);
    if (key !== undefined) return { account, key };
  }
  throw notFound('key', keyId.slice(0, 64));
}

function addKey(
  document: KeysDocument,
  account: Account,
  key: {
    id: string;
    role: Role;
    expiresAt: number | undefined;
    permissions: readonly string[] | null;
  },
  environment: KeyEnvironment,
): NewKey {
  if (document.accounts.some((each) => each.keys.some((candidate) => candidate.id === key.id))) {
    throw new ConflictError('The key id is already in use');
  }
  const publishableKey = generateKey('publishable', environment);
  const secretKey = generateKey('secret', environment);
  const entry: Key = {
    id: key.id,
    publishableKey,
    secretKeySha256: sha256(secretKey).toString('hex'),
    role: key.role,
    ...(key.expiresAt === undefined ? {} : { expiresAt: new Date(key.expiresAt).toISOString() }),
    ...(key.permissions === null ? {} : { permissions: [...key.permissions] }),
  };
  account.keys.push(entry);
  return { ...keyView(account, entry), secretKey };
}

function accountView(account: Account): AccountView {
  return {
    id: account.id,
    ipWhitelist: account.ipWhitelist === undefined ? null : [...account.ipWhitelist],
    limits: account.limits === undefined ? null : { ...account.limits },
    createdAt: null,
    updatedAt: null,
  };
}

function keyView(account: Account, key: Key): KeyView {
  return {
    id: key.id,
    accountId: account.id,
    role: roleOf(key),
    publishableKey: key.publishableKey,
    createdAt: null,
    expiresAt: key.expiresAt === undefined ? null : new Date(key.expiresAt),
    revoked: key.revoked === true,
    revokedAt: null,
    lastUsedAt: null,
    permissions: key.permissions === undefined ? null : [...key.permissions],
  };
}

/** A key of a keys file without a role is an owner's key, as the loader reads it. */
function roleOf(key: Key): Role {
  const { role } = key as { role?: Role };
  return role ?? OWNER_ROLE;
}

function isEmptyDocument(document: unknown): boolean {
  if (typeof document !== 'object' || document === null) return false;
  const { accounts } = document as { accounts?: unknown };
  return Object.keys(document).length === 1 && Array.isArray(accounts) && accounts.length === 0;
}

/** What the file holds of a document: the accounts with keys. */
function fileDocument(document: KeysDocument): KeysDocument {
  return { accounts: document.accounts.filter((account) => account.keys.length > 0) };
}
