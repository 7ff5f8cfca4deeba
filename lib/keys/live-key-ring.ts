import { timingSafeEqual } from 'node:crypto';
import type { IpWhitelist } from '../model/ip-whitelist';
import type { Role } from '../model/roles';
import { ABSENT_DIGEST, sha256 } from './key-digest';
import type { AccountLimits, KeyDirectory, KeyRecord, KeyStore } from '../model/key-record';
import { KeyIndex } from './key-index';
import { PackedKeyRing } from './packed-key-ring';

/** An account as the ring holds it: its whitelist and limits, parsed once and shared by its keys. */
export interface AccountRow {
  readonly id: string;
  readonly ipWhitelist: IpWhitelist | undefined;
  /** Its limit overrides; `undefined`: every scope at its default. */
  readonly limits?: AccountLimits | undefined;
  /** Its stored whitelist is invalid: its keys are held as revoked (fail closed). */
  readonly blocked?: boolean;
}

/** A key as the ring holds it, without its account's whitelist. */
export interface KeyRow {
  readonly id: string;
  readonly accountId: string;
  readonly role: Role;
  readonly publishableKey: string;
  readonly secretKeySha256: Buffer;
  readonly revoked: boolean;
  readonly expiresAt?: number | undefined;
  /** Its permissions, one shared set per distinct list; `undefined`: not restricted. */
  readonly permissions?: ReadonlySet<string> | undefined;
}

/** One batch of changes, applied as a whole: rows added or changed, and ids deleted. */
export interface RingChanges {
  readonly accounts: readonly AccountRow[];
  readonly keys: readonly KeyRow[];
  readonly deletedAccounts: readonly string[];
  readonly deletedKeys: readonly string[];
}

/**
 * A key ring that changes entry by entry: a packed base (packed-key-ring.ts, built whole off the
 * request path) under a small layer of the changes since. `apply()` touches only the keys a batch
 * names (and, for an account whose whitelist changed, that account's keys in the layer; its keys
 * in the base read the account from the layer), in one synchronous step, so a request sees the
 * ring wholly before or wholly after a batch. A key changed or deleted since the base was built
 * is masked there: the layer answers for it. `changes` says how big the layer has grown, for the
 * store to build a new base when it is worth it.
 */
export class LiveKeyRing implements KeyStore, KeyDirectory {
  /** Accounts changed since the base; `null`: deleted. */
  private readonly accounts = new Map<string, AccountRow | null>();
  /** Keys changed since the base; `null`: deleted. Any id here is masked in the base. */
  private readonly rows = new Map<string, KeyRow | null>();
  private readonly keysByAccount = new Map<string, Set<string>>();
  private readonly index = new KeyIndex();
  private count: number;

  constructor(private readonly base: PackedKeyRing = PackedKeyRing.EMPTY) {
    this.count = base.size;
  }

  get size(): number {
    return this.count;
  }

  /** Entries in the layer over the base. */
  get changes(): number {
    return this.rows.size + this.accounts.size;
  }

  apply(changes: RingChanges): void {
    for (const id of changes.deletedKeys) this.removeKey(id);
    for (const id of changes.deletedAccounts) {
      for (const keyId of [...(this.keysByAccount.get(id) ?? [])]) this.removeKey(keyId);
      const account = this.base.indexOfAccount(id);
      if (account >= 0) {
        // The base's keys of the account, unless changed since: the layer says where they are now.
        for (const k of this.base.keysOfAccount(account)) {
          const keyId = this.base.idAt(k);
          if (!this.rows.has(keyId)) this.removeKey(keyId);
        }
      }
      this.accounts.set(id, null);
    }
    for (const account of changes.accounts) this.accounts.set(account.id, account);
    for (const row of changes.keys) this.putKey(row);
    // Keys of the layer not in the batch whose account changed get its new whitelist and limits.
    for (const account of changes.accounts) {
      for (const keyId of [...(this.keysByAccount.get(account.id) ?? [])]) {
        const row = this.rows.get(keyId);
        if (row !== undefined && row !== null) this.putKey(row);
      }
    }
  }

  private putKey(row: KeyRow): void {
    this.removeKey(row.id);
    const account = this.accountOf(row.accountId);
    const record: KeyRecord = {
      id: row.id,
      accountId: row.accountId,
      role: row.role,
      publishableKey: row.publishableKey,
      secretKeySha256: row.secretKeySha256,
      revoked: row.revoked || account?.blocked === true,
      expiresAt: row.expiresAt,
      ipWhitelist: account?.ipWhitelist,
      limits: account?.limits,
      permissions: row.permissions,
    };
    this.rows.set(row.id, row);
    this.index.add(record);
    this.count++;
    let ids = this.keysByAccount.get(row.accountId);
    if (ids === undefined) {
      ids = new Set();
      this.keysByAccount.set(row.accountId, ids);
    }
    ids.add(row.id);
  }

  private removeKey(id: string): void {
    const record = this.index.remove(id);
    if (record !== undefined) {
      this.count--;
      const ids = this.keysByAccount.get(record.accountId);
      ids?.delete(id);
      if (ids?.size === 0) this.keysByAccount.delete(record.accountId);
    } else if (!this.rows.has(id) && this.base.indexOfId(id) >= 0) {
      this.count--; // the base's key, masked from now on
    }
    if (this.base.indexOfId(id) >= 0) this.rows.set(id, null);
    else this.rows.delete(id);
  }

  /** The account as the layer has it, or as the base does. */
  private accountOf(accountId: string): AccountRow | undefined {
    const changed = this.accounts.get(accountId);
    if (changed !== undefined) return changed ?? undefined;
    const a = this.base.indexOfAccount(accountId);
    return a < 0 ? undefined : this.base.accountAt(a);
  }

  /** Base key `k` as a record, unless the layer answers for its id. */
  private fromBase(k: number): KeyRecord | undefined {
    if (k < 0) return undefined;
    if (this.rows.size > 0 && this.rows.has(this.base.idAt(k))) return undefined;
    if (this.accounts.size === 0) return this.base.record(k);
    const changed = this.accounts.get(this.base.accountIdOf(k));
    return changed === undefined || changed === null
      ? this.base.record(k)
      : this.base.record(k, changed);
  }

  /** The keys of one account: the base's still in force, then the layer's. */
  *recordsOfAccount(accountId: string): Generator<KeyRecord, void, undefined> {
    const a = this.base.indexOfAccount(accountId);
    if (a >= 0) {
      for (const k of this.base.keysOfAccount(a)) {
        const record = this.fromBase(k);
        if (record !== undefined) yield record;
      }
    }
    for (const id of this.keysByAccount.get(accountId) ?? []) {
      const record = this.index.findById(id);
      if (record !== undefined) yield record;
    }
  }

  /** Every key: the base's still in force, then the layer's. */
  *keyRecords(): Generator<KeyRecord, void, undefined> {
    for (let k = 0; k < this.base.size; k++) {
      const record = this.fromBase(k);
      if (record !== undefined) yield record;
    }
    yield* this.index.records();
  }

  findBySecretKey(secretKey: string): KeyRecord | undefined {
    const digest = sha256(secretKey);
    return this.index.findByDigest(digest) ?? this.fromBase(this.base.indexOfDigest(digest));
  }

  findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined {
    const record = this.findByPublishableKey(publishableKey);
    const matches = timingSafeEqual(sha256(secretKey), record?.secretKeySha256 ?? ABSENT_DIGEST);
    return matches ? record : undefined;
  }

  findByPublishableKey(publishableKey: string): KeyRecord | undefined {
    return (
      this.index.findByPublishableKey(publishableKey) ??
      this.fromBase(this.base.indexOfPublishableKey(publishableKey))
    );
  }

  findById(keyId: string): KeyRecord | undefined {
    const changed = this.rows.get(keyId);
    if (changed === null) return undefined;
    if (changed !== undefined) return this.index.findById(keyId);
    return this.fromBase(this.base.indexOfId(keyId));
  }
}
