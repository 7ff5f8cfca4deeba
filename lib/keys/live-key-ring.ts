import type { IpWhitelist } from '../core/ip-whitelist';
import type { Role } from '../core/roles';
import type { KeyDirectory, KeyRecord, KeyStore } from './key-record';
import { KeyIndex } from './key-index';

/** An account as the ring holds it: its whitelist, parsed once and shared by its keys. */
export interface AccountRow {
  readonly id: string;
  readonly ipWhitelist: IpWhitelist | undefined;
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
}

/** One batch of changes, applied as a whole: rows added or changed, and ids deleted. */
export interface RingChanges {
  readonly accounts: readonly AccountRow[];
  readonly keys: readonly KeyRow[];
  readonly deletedAccounts: readonly string[];
  readonly deletedKeys: readonly string[];
}

/**
 * A key ring that changes entry by entry: `apply()` updates only the keys a batch touches (and,
 * for an account whose whitelist changed, that account's keys), in one synchronous step, so a
 * request sees the ring wholly before or wholly after a batch, never half of it.
 */
export class LiveKeyRing implements KeyStore, KeyDirectory {
  private readonly accounts = new Map<string, AccountRow>();
  private readonly keysByAccount = new Map<string, Set<string>>();
  /** The rows as stored, to rebuild a key's record when its account changes. */
  private readonly rows = new Map<string, KeyRow>();
  private readonly index = new KeyIndex();
  private listed: readonly KeyRecord[] | undefined;

  get size(): number {
    return this.index.size;
  }

  apply(changes: RingChanges): void {
    for (const id of changes.deletedKeys) this.removeKey(id);
    for (const id of changes.deletedAccounts) {
      for (const keyId of [...(this.keysByAccount.get(id) ?? [])]) this.removeKey(keyId);
      this.accounts.delete(id);
    }
    for (const account of changes.accounts) this.accounts.set(account.id, account);
    for (const row of changes.keys) this.putKey(row);
    // Keys not in the batch whose account's whitelist changed get the new whitelist.
    for (const account of changes.accounts) {
      for (const keyId of [...(this.keysByAccount.get(account.id) ?? [])]) {
        const row = this.rows.get(keyId);
        if (row !== undefined) this.putKey(row);
      }
    }
    this.listed = undefined;
  }

  private putKey(row: KeyRow): void {
    this.removeKey(row.id);
    const account = this.accounts.get(row.accountId);
    const record: KeyRecord = {
      id: row.id,
      accountId: row.accountId,
      role: row.role,
      publishableKey: row.publishableKey,
      secretKeySha256: row.secretKeySha256,
      revoked: row.revoked || account?.blocked === true,
      expiresAt: row.expiresAt,
      ipWhitelist: account?.ipWhitelist,
    };
    this.rows.set(row.id, row);
    this.index.add(record);
    let ids = this.keysByAccount.get(record.accountId);
    if (ids === undefined) {
      ids = new Set();
      this.keysByAccount.set(record.accountId, ids);
    }
    ids.add(record.id);
  }

  private removeKey(id: string): void {
    const record = this.index.remove(id);
    if (record === undefined) return;
    this.rows.delete(id);
    const ids = this.keysByAccount.get(record.accountId);
    ids?.delete(id);
    if (ids?.size === 0) this.keysByAccount.delete(record.accountId);
  }

  keyRecords(): readonly KeyRecord[] {
    this.listed ??= [...this.index.records()];
    return this.listed;
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
