import { timingSafeEqual } from 'node:crypto';
import { IpWhitelist } from '../model/ip-whitelist';
import { ABSENT_DIGEST, sha256 } from './key-digest';
import type { AccountLimits, KeyRecord, KeyStore } from '../model/key-record';
import { limitsFromText } from './key-rules';
import { PackedTableBuilder } from './packed-builder';
import { PermissionSets } from '../model/permissions';
import {
  BLOCKED,
  bytesEqual,
  digestHash,
  hashString,
  isRevokedFlag,
  NO_LIMITS,
  NO_LIST,
  type PackedTable,
  roleOf,
} from './packed-table';

/**
 * The lookups of a `PackedTable`. A lookup stays synchronous and allocates only the record it
 * returns: the record is made on demand from the table (its strings decoded, its whitelist parsed
 * the first time any key of that list is looked up, then shared; an account's limits likewise, one
 * frozen object per distinct set). A secret is found by its digest's first four bytes and then
 * compared whole in constant time; a key pair costs the same whether the publishable key exists or
 * not. Revoked and expired keys are returned as they are.
 */
export class PackedKeyRing implements KeyStore {
  private readonly text: Buffer;
  private readonly listText: Buffer;
  /** Whitelists parsed so far, by list index: shared by every account with that list. */
  private readonly whitelists = new Map<number, IpWhitelist>();
  /** Limit sets made so far, by set index: shared by every account with that set. */
  private readonly limitSets = new Map<number, AccountLimits>();
  /** Permission sets made so far, one per distinct mask. */
  private readonly permissionSets: PermissionSets;

  constructor(readonly table: PackedTable) {
    this.text = Buffer.from(table.text.buffer, table.text.byteOffset, table.text.byteLength);
    this.listText = Buffer.from(
      table.listText.buffer,
      table.listText.byteOffset,
      table.listText.byteLength,
    );
    const vocabulary = Buffer.from(
      table.permissionText.buffer,
      table.permissionText.byteOffset,
      table.permissionText.byteLength,
    ).toString('latin1');
    this.permissionSets = new PermissionSets(vocabulary === '' ? [] : vocabulary.split(','));
  }

  /** The names the table's permission masks are over. */
  get permissionNames(): readonly string[] {
    return this.permissionSets.names;
  }

  /** Key `k`'s permissions, one shared set per distinct mask; `undefined`: not restricted. */
  permissionsAt(k: number): ReadonlySet<string> | undefined {
    return this.permissionSets.of(this.table.keyPermissions[k] ?? 0);
  }

  static readonly EMPTY = new PackedKeyRing(new PackedTableBuilder().build());

  get size(): number {
    return this.table.keyCount;
  }

  findBySecretKey(secretKey: string): KeyRecord | undefined {
    const index = this.indexOfDigest(sha256(secretKey));
    return index < 0 ? undefined : this.record(index);
  }

  findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined {
    const index = this.indexOfPublishableKey(publishableKey);
    const expected = index < 0 ? ABSENT_DIGEST : this.digestAt(index);
    return timingSafeEqual(sha256(secretKey), expected) && index >= 0
      ? this.record(index)
      : undefined;
  }

  findByPublishableKey(publishableKey: string): KeyRecord | undefined {
    const index = this.indexOfPublishableKey(publishableKey);
    return index < 0 ? undefined : this.record(index);
  }

  findById(keyId: string): KeyRecord | undefined {
    const index = this.indexOfId(keyId);
    return index < 0 ? undefined : this.record(index);
  }

  /** Every key, in the order it was added, each record made as it is reached. */
  *records(): Generator<KeyRecord, void, undefined> {
    for (let k = 0; k < this.table.keyCount; k++) yield this.record(k);
  }

  /** The keys of one account, found by its index. */
  *recordsOfAccount(accountId: string): Generator<KeyRecord, void, undefined> {
    const a = this.indexOfAccount(accountId);
    if (a < 0) return;
    for (const k of this.keysOfAccount(a)) yield this.record(k);
  }

  /** The key whose digest is `digest` (compared in constant time), or -1. */
  indexOfDigest(digest: Uint8Array): number {
    const { bySecret, digests } = this.table;
    const tag = digestHash(digest);
    const mask = bySecret.length - 1;
    for (let slot = tag & mask; ; slot = (slot + 1) & mask) {
      const entry = bySecret[slot] ?? 0;
      if (entry === 0) return -1;
      const k = entry - 1;
      if (digestHash(digests, k * 32) === tag && timingSafeEqual(digest, this.digestAt(k))) {
        return k;
      }
    }
  }

  indexOfPublishableKey(publishableKey: string): number {
    const { byPublishable, keyText, keyLengths, seed } = this.table;
    const mask = byPublishable.length - 1;
    for (let slot = hashString(publishableKey, seed) & mask; ; slot = (slot + 1) & mask) {
      const entry = byPublishable[slot] ?? 0;
      if (entry === 0) return -1;
      const k = entry - 1;
      const start = (keyText[k] ?? 0) + (keyLengths[2 * k] ?? 0);
      if (bytesEqual(this.table.text, start, keyLengths[2 * k + 1] ?? 0, publishableKey)) return k;
    }
  }

  indexOfId(keyId: string): number {
    const { byId, keyText, keyLengths, seed } = this.table;
    const mask = byId.length - 1;
    for (let slot = hashString(keyId, seed) & mask; ; slot = (slot + 1) & mask) {
      const entry = byId[slot] ?? 0;
      if (entry === 0) return -1;
      const k = entry - 1;
      if (bytesEqual(this.table.text, keyText[k] ?? 0, keyLengths[2 * k] ?? 0, keyId)) return k;
    }
  }

  indexOfAccount(accountId: string): number {
    const { byAccount, accountText, accountLengths, seed } = this.table;
    const mask = byAccount.length - 1;
    for (let slot = hashString(accountId, seed) & mask; ; slot = (slot + 1) & mask) {
      const entry = byAccount[slot] ?? 0;
      if (entry === 0) return -1;
      const a = entry - 1;
      if (bytesEqual(this.table.text, accountText[a] ?? 0, accountLengths[a] ?? 0, accountId)) {
        return a;
      }
    }
  }

  /** The indexes of the keys of account `account`. */
  keysOfAccount(account: number): Uint32Array {
    const { accountKeyStart, accountKeys } = this.table;
    return accountKeys.subarray(accountKeyStart[account] ?? 0, accountKeyStart[account + 1] ?? 0);
  }

  idAt(k: number): string {
    const start = this.table.keyText[k] ?? 0;
    return this.text.toString('latin1', start, start + (this.table.keyLengths[2 * k] ?? 0));
  }

  accountIdAt(a: number): string {
    const start = this.table.accountText[a] ?? 0;
    return this.text.toString('latin1', start, start + (this.table.accountLengths[a] ?? 0));
  }

  accountIdOf(k: number): string {
    return this.accountIdAt(this.table.keyAccount[k] ?? 0);
  }

  /** Account `a`'s whitelist, limits and whether it is blocked. */
  accountAt(a: number): {
    readonly id: string;
    readonly ipWhitelist: IpWhitelist | undefined;
    readonly limits: AccountLimits | undefined;
    readonly blocked: boolean;
  } {
    const list = this.table.accountList[a] ?? NO_LIST;
    return {
      id: this.accountIdAt(a),
      ipWhitelist: this.whitelist(list),
      limits: this.limits(this.table.accountLimits[a] ?? NO_LIMITS),
      blocked: list === BLOCKED,
    };
  }

  digestAt(k: number): Uint8Array {
    return this.table.digests.subarray(k * 32, k * 32 + 32);
  }

  /**
   * Key `k` as a record; `account` replaces its account's whitelist and limits (the live ring's
   * changes).
   */
  record(
    k: number,
    account?: {
      readonly ipWhitelist: IpWhitelist | undefined;
      readonly limits?: AccountLimits | undefined;
      readonly blocked?: boolean;
    },
  ): KeyRecord {
    const { keyText, keyLengths, keyFlags, keyExpires, keyAccount, accountList } = this.table;
    const start = keyText[k] ?? 0;
    const idEnd = start + (keyLengths[2 * k] ?? 0);
    const flags = keyFlags[k] ?? 0;
    const expires = keyExpires[k] ?? Number.NaN;
    const a = keyAccount[k] ?? 0;
    const list = accountList[a] ?? NO_LIST;
    const blocked = account === undefined ? list === BLOCKED : account.blocked === true;
    return {
      id: this.text.toString('latin1', start, idEnd),
      accountId: this.accountIdAt(a),
      role: roleOf(flags),
      publishableKey: this.text.toString('latin1', idEnd, idEnd + (keyLengths[2 * k + 1] ?? 0)),
      secretKeySha256: Buffer.from(
        this.table.digests.buffer,
        this.table.digests.byteOffset + k * 32,
        32,
      ),
      revoked: isRevokedFlag(flags) || blocked,
      expiresAt: Number.isNaN(expires) ? undefined : expires,
      ipWhitelist: account === undefined ? this.whitelist(list) : account.ipWhitelist,
      limits:
        account === undefined
          ? this.limits(this.table.accountLimits[a] ?? NO_LIMITS)
          : account.limits,
      permissions: this.permissionsAt(k),
    };
  }

  private limits(set: number): AccountLimits | undefined {
    if (set < 0) return undefined;
    let limits = this.limitSets.get(set);
    if (limits === undefined) {
      const { limitOffsets } = this.table;
      limits = limitsFromText(
        Buffer.from(
          this.table.limitText.buffer,
          this.table.limitText.byteOffset,
          this.table.limitText.byteLength,
        ).toString('latin1', limitOffsets[set] ?? 0, limitOffsets[set + 1] ?? 0),
      );
      this.limitSets.set(set, limits);
    }
    return limits;
  }

  private whitelist(list: number): IpWhitelist | undefined {
    if (list < 0) return undefined;
    let whitelist = this.whitelists.get(list);
    if (whitelist === undefined) {
      const { listOffsets } = this.table;
      const entries = this.listText
        .toString('latin1', listOffsets[list] ?? 0, listOffsets[list + 1] ?? 0)
        .split(',');
      whitelist = IpWhitelist.parse(entries);
      this.whitelists.set(list, whitelist);
    }
    return whitelist;
  }
}
