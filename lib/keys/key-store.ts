import { ConfigurationError } from '../errors';
import {
  check,
  checkOptions,
  describe,
  isObject,
  isStringList,
  type OptionChecks,
} from '../options';
import type {
  KeyDirectory,
  KeyReadiness,
  KeyRecord,
  KeyStore,
  LimitScopes,
} from '../model/key-record';
import { KeyIndex } from './key-index';
import { parseKeysDocument } from './keys-file';
import { PackedKeyRing } from './packed-key-ring';
import type { PackedTable } from './packed-table';
import { buildRing } from './ring-build';
import { permissionNames } from '../model/permissions';

export type { KeyDirectory, KeyReadiness, KeyRecord, KeyStore } from '../model/key-record';

export { sha256 } from './key-digest';

/** Options of the kit's key stores (`FileKeyStore`, `PgKeyStore`, `KeyRing.fromDocument`). */
export interface KeyStoreLimitOptions {
  /**
   * The gate's limit scopes, name to what each counts per (`{ payments: 'account', checkout:
   * 'ip' }`): an account's `limits` may override the `'account'` ones; any other scope name, or an
   * `'ip'` one, is a load error naming the account and the scope. Pass the same scopes as
   * `tollgate({ scopes })` (`limitScopesOf(scopes)`). Defaults to none: no account may carry limits.
   */
  readonly limitScopes?: LimitScopes;
  /**
   * Permission names a key's `permissions` may hold besides the seven built-in ones
   * (`wallets:read`, …), each `resource:action`; at most 16 in all. Pass the same as
   * `tollgate({ permissions })`.
   * Defaults to none: the seven built-in ones only.
   */
  readonly permissions?: readonly string[];
}

/** The rule of each option a key store takes about the gate's scopes and permissions. */
export const KEY_STORE_LIMIT_OPTION_CHECKS: OptionChecks<KeyStoreLimitOptions> = {
  limitScopes: check(
    "an object of scope names, each 'account' or 'ip'",
    (value) =>
      isObject.test(value) &&
      Object.values(value as object).every((per) => per === 'account' || per === 'ip'),
  ),
  permissions: isStringList,
};

/** An immutable, indexed set of key records. */
export class KeyRing implements KeyStore, KeyDirectory {
  private readonly index = new KeyIndex();

  /**
   * A ring of records already checked (`fromDocument()` checks a keys document first): the scopes
   * and permission names they were checked against, when given, are checked in turn, so an options
   * object given in their place (`new KeyRing(records, { permissions })`) is refused, not read as
   * a scope named `permissions`.
   */
  constructor(
    readonly records: readonly KeyRecord[],
    readonly limitScopes?: LimitScopes,
    readonly permissionNames?: readonly string[],
  ) {
    if (!isList(records)) {
      throw new ConfigurationError(
        `KeyRing: records must be a list of key records; got ${describe(records)}`,
      );
    }
    if (limitScopes !== undefined && !KEY_STORE_LIMIT_OPTION_CHECKS.limitScopes.test(limitScopes)) {
      throw new ConfigurationError(
        `KeyRing: limitScopes must be ${KEY_STORE_LIMIT_OPTION_CHECKS.limitScopes.accepts}; got ${describe(limitScopes)}` +
          ' (for a keys document and its options, use KeyRing.fromDocument(document, source, options))',
      );
    }
    if (permissionNames !== undefined && !isStringList.test(permissionNames)) {
      throw new ConfigurationError(
        `KeyRing: permissionNames must be ${isStringList.accepts}; got ${describe(permissionNames)}`,
      );
    }
    for (const record of records) this.index.add(record);
  }

  /**
   * Parses a keys document (the JSON of the keys file); throws `ConfigurationError` on any fault,
   * an unknown or ill-typed option among them.
   */
  static fromDocument(
    document: unknown,
    source = 'keys file',
    options: KeyStoreLimitOptions = {},
  ): KeyRing {
    if (typeof source !== 'string') {
      throw new ConfigurationError(
        `KeyRing.fromDocument(): source must be a string naming the document (its path); got ${describe(source)}`,
      );
    }
    checkOptions('KeyRing.fromDocument()', options, KEY_STORE_LIMIT_OPTION_CHECKS);
    const scopes = options.limitScopes ?? {};
    const names = permissionNames(options.permissions, 'KeyRing.fromDocument()');
    return new KeyRing(parseKeysDocument(document, source, scopes, names), scopes, names);
  }

  keyRecords(): readonly KeyRecord[] {
    return this.records;
  }

  recordsOfAccount(accountId: string): readonly KeyRecord[] {
    return this.records.filter((record) => record.accountId === accountId);
  }

  findBySecretKey(secretKey: string): KeyRecord | undefined {
    return this.index.findBySecretKey(secretKey);
  }

  findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined {
    return this.index.findByKeyPair(publishableKey, secretKey);
  }

  findByPublishableKey(publishableKey: string): KeyRecord | undefined {
    return this.index.findByPublishableKey(publishableKey);
  }

  findById(keyId: string): KeyRecord | undefined {
    return this.index.findById(keyId);
  }
}

let openShared: (
  path: string,
  options: KeyStoreLimitOptions,
  share: (table: PackedTable) => void,
) => Promise<FileKeyStore>;

/**
 * `FileKeyStore.load()` for a host whose threads serve one ring: each ring it loads is built in
 * shared memory and handed to `share` once in force (the first load included), for the other
 * threads to serve through a `TableKeyStore` of their own. Reloads are the store's own.
 */
export function loadSharedFileKeyStore(
  path: string,
  options: KeyStoreLimitOptions,
  share: (table: PackedTable) => void,
): Promise<FileKeyStore> {
  checkOptions('loadSharedFileKeyStore()', options, KEY_STORE_LIMIT_OPTION_CHECKS);
  return openShared(path, options, share);
}

/**
 * The keys file (docs/keys.md): loaded at start, swapped whole on `reload()`. A file that fails
 * to load leaves the keys in force unchanged, so a bad edit never locks everyone out.
 *
 * The file is read, validated and packed (packed-key-ring.ts) in a worker thread; the request
 * thread only swaps the finished ring in, in one assignment, so a reload of a million keys never
 * holds a request up and no request sees a half-built ring.
 */
export class FileKeyStore implements KeyStore, KeyDirectory, KeyReadiness {
  /** The last reload scheduled, settled (never rejects): the next one starts after it. */
  private tail: Promise<unknown> = Promise.resolve();
  /** The reload scheduled and not yet reading the file, which calls until it starts share. */
  private waiting: Promise<number> | undefined;

  private ring = PackedKeyRing.EMPTY;
  private loaded = false;
  /** Settles once the first read is done: rejects when it failed. */
  readonly firstLoad: Promise<void>;

  /** The scopes an account's `limits` may name (see `KeyStoreLimitOptions`). */
  readonly limitScopes: LimitScopes;
  /** The names a key's `permissions` may hold (see `KeyStoreLimitOptions`). */
  readonly permissionNames: readonly string[];

  private constructor(
    readonly path: string,
    options: KeyStoreLimitOptions,
    /** Given each ring in shared memory once it is in force, for other threads to serve. */
    private readonly share?: ((table: PackedTable) => void) | undefined,
  ) {
    this.limitScopes = { ...(options.limitScopes ?? {}) };
    this.permissionNames = permissionNames(options.permissions, 'FileKeyStore');
    this.firstLoad = this.reload().then(() => {
      this.loaded = true;
    });
  }

  static {
    openShared = async (path, options, share) => {
      const store = new FileKeyStore(path, options, share);
      await store.firstLoad;
      return store;
    };
  }

  /** Reads and validates the file; rejects with a `ConfigurationError` naming the bad entry. */
  static async load(path: string, options: KeyStoreLimitOptions = {}): Promise<FileKeyStore> {
    checkOptions('FileKeyStore.load()', options, KEY_STORE_LIMIT_OPTION_CHECKS);
    const store = FileKeyStore.open(path, options);
    await store.firstLoad;
    return store;
  }

  /**
   * The store at once, its first read under way: `ready` is false, and every lookup finds
   * nothing, until the first ring is in (`firstLoad`).
   */
  static open(path: string, options: KeyStoreLimitOptions = {}): FileKeyStore {
    checkOptions('FileKeyStore.open()', options, KEY_STORE_LIMIT_OPTION_CHECKS);
    if (typeof path !== 'string' || path === '') {
      throw new ConfigurationError("FileKeyStore.open(): path must be the keys file's path");
    }
    const store = new FileKeyStore(path, options);
    store.firstLoad.catch(() => undefined);
    return store;
  }

  get ready(): boolean {
    return this.loaded;
  }

  /**
   * Re-reads the file and resolves with the number of keys now in force. Reloads are serialised
   * and coalesced: one chain of reads, one after the other; a call while a read
   * is running schedules exactly one more, which reads the file as it is when it starts, so the
   * file read last is the one in force, and a storm of calls costs at most two reads. On failure
   * the previous keys stay in force and it rejects.
   */
  reload(): Promise<number> {
    this.waiting ??= this.scheduleRead();
    return this.waiting;
  }

  private scheduleRead(): Promise<number> {
    const read = this.tail
      .then(() => {
        // From now on the file may change unseen by this read: a new call schedules another.
        this.waiting = undefined;
        return buildRing({
          kind: 'file',
          path: this.path,
          background: this.loaded,
          limitScopes: this.limitScopes,
          permissions: this.permissionNames,
          shared: this.share !== undefined,
        });
      })
      .then(({ table }) => {
        this.ring = new PackedKeyRing(table);
        this.share?.(table);
        return table.keyCount;
      });
    this.tail = read.catch(() => undefined);
    return read;
  }

  keyRecords(): Iterable<KeyRecord> {
    return this.ring.records();
  }

  recordsOfAccount(accountId: string): Iterable<KeyRecord> {
    return this.ring.recordsOfAccount(accountId);
  }

  /** Keys in force. */
  get size(): number {
    return this.ring.size;
  }

  findBySecretKey(secretKey: string): KeyRecord | undefined {
    return this.ring.findBySecretKey(secretKey);
  }

  findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined {
    return this.ring.findByKeyPair(publishableKey, secretKey);
  }

  findByPublishableKey(publishableKey: string): KeyRecord | undefined {
    return this.ring.findByPublishableKey(publishableKey);
  }

  findById(keyId: string): KeyRecord | undefined {
    return this.ring.findById(keyId);
  }
}

/** A list, without narrowing its type to `any[]` as `Array.isArray` does. */
function isList(value: unknown): boolean {
  return Array.isArray(value);
}
