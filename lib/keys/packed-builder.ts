import { randomInt } from 'node:crypto';
import { PERMISSIONS } from '../core/permissions';
import type { Role } from '../core/roles';
import type { AccountLimits } from './key-record';
import { limitsText } from './key-rules';
import {
  BLOCKED,
  digestHash,
  flagsOf,
  hashBytes,
  NO_LIMITS,
  NO_LIST,
  type PackedTable,
  slotsFor,
} from './packed-table';

/** One key as the builder takes it; its account was added before and is named by index. */
export interface PackedKeyInput {
  readonly id: string;
  readonly account: number;
  readonly role: Role;
  readonly publishableKey: string;
  readonly secretKeySha256: Uint8Array;
  readonly revoked: boolean;
  readonly expiresAt?: number | undefined;
  /** Its permissions as a mask over the builder's vocabulary; 0 or absent: not restricted. */
  readonly permissionMask?: number | undefined;
}

/** A byte array that doubles as it fills. */
class Bytes {
  bytes = new Uint8Array(1 << 16);
  length = 0;

  reserve(more: number): void {
    if (this.length + more <= this.bytes.length) return;
    let size = this.bytes.length * 2;
    while (size < this.length + more) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.bytes.subarray(0, this.length));
    this.bytes = grown;
  }

  /** Appends an ASCII string (the validation rules admit nothing else); returns its offset. */
  ascii(value: string): number {
    this.reserve(value.length);
    const start = this.length;
    for (let i = 0; i < value.length; i++) this.bytes[start + i] = value.charCodeAt(i) & 0xff;
    this.length += value.length;
    return start;
  }

  raw(value: Uint8Array): number {
    this.reserve(value.length);
    const start = this.length;
    this.bytes.set(value, start);
    this.length += value.length;
    return start;
  }

  done(): Uint8Array {
    return this.bytes.slice(0, this.length);
  }
}

/** Numbers pushed one by one, then copied into one typed array. */
/**
 * Distinct texts stored once each, in order of first sight: their ASCII one after another and the
 * offset where each ends. `indexOf()` adds a text not seen before.
 */
class DistinctTexts {
  private readonly indexes = new Map<string, number>();
  readonly text = new Bytes();
  readonly offsets = [0];

  indexOf(value: string): number {
    let index = this.indexes.get(value);
    if (index === undefined) {
      index = this.indexes.size;
      this.indexes.set(value, index);
      this.text.ascii(value);
      this.offsets.push(this.text.length);
    }
    return index;
  }
}

function numbers(): number[] {
  return [];
}

/**
 * Builds a `PackedTable` from accounts and keys added in order. It checks nothing: callers add
 * what the keys-file rules or the database already validated. Equal whitelists, and equal limit
 * sets, are stored once.
 */
export class PackedTableBuilder {
  private readonly text = new Bytes();
  private readonly digests = new Bytes();
  private readonly keyText = numbers();
  private readonly keyLengths = numbers();
  private readonly keyFlags = numbers();
  private readonly keyExpires = numbers();
  private readonly keyAccount = numbers();
  private readonly accountText = numbers();
  private readonly accountLengths = numbers();
  private readonly accountList = numbers();
  /** Each distinct whitelist, its entries joined by commas. */
  private readonly lists = new DistinctTexts();
  private readonly accountLimits = numbers();
  /** Each distinct set of limit overrides, as `limitsText()` writes it. */
  private readonly limitSets = new DistinctTexts();
  private readonly keyPermissions = numbers();

  /** `permissionNames`: the vocabulary the keys' masks are over (bit `i`: name `i`). */
  constructor(private readonly permissionNames: readonly string[] = PERMISSIONS) {}

  /** The number of keys added so far. */
  get keys(): number {
    return this.keyText.length;
  }

  /**
   * Adds an account; `list`: its canonical whitelist entries, `undefined` or `'blocked'`;
   * `limits`: its validated limit overrides.
   */
  addAccount(
    id: string,
    list: readonly string[] | undefined | 'blocked',
    limits?: AccountLimits,
  ): number {
    this.accountLimits.push(
      limits === undefined ? NO_LIMITS : this.limitSets.indexOf(limitsText(limits)),
    );
    this.accountText.push(this.text.ascii(id));
    this.accountLengths.push(id.length);
    if (list === undefined) this.accountList.push(NO_LIST);
    else if (list === 'blocked') this.accountList.push(BLOCKED);
    else this.accountList.push(this.lists.indexOf(list.join(',')));
    return this.accountText.length - 1;
  }

  addKey(key: PackedKeyInput): void {
    this.keyText.push(this.text.ascii(key.id));
    this.text.ascii(key.publishableKey);
    this.keyLengths.push(key.id.length, key.publishableKey.length);
    this.keyFlags.push(flagsOf(key.role, key.revoked));
    this.keyExpires.push(key.expiresAt ?? Number.NaN);
    this.keyAccount.push(key.account);
    this.keyPermissions.push(key.permissionMask ?? 0);
    this.digests.raw(key.secretKeySha256);
  }

  build(): PackedTable {
    const keyCount = this.keyText.length;
    const accountCount = this.accountText.length;
    const seed = randomInt(0, 2 ** 31);
    const text = this.text.done();
    const digests = this.digests.done();
    const keyText = Uint32Array.from(this.keyText);
    const keyLengths = Uint8Array.from(this.keyLengths);
    const accountText = Uint32Array.from(this.accountText);
    const accountLengths = Uint8Array.from(this.accountLengths);
    const keyAccount = Uint32Array.from(this.keyAccount);

    // The keys of each account, grouped by a counting sort.
    const accountKeyStart = new Uint32Array(accountCount + 1);
    for (const account of keyAccount)
      accountKeyStart[account + 1] = (accountKeyStart[account + 1] ?? 0) + 1;
    for (let a = 0; a < accountCount; a++) {
      accountKeyStart[a + 1] = (accountKeyStart[a + 1] ?? 0) + (accountKeyStart[a] ?? 0);
    }
    const filled = accountKeyStart.slice(0, accountCount);
    const accountKeys = new Uint32Array(keyCount);
    keyAccount.forEach((account, k) => {
      const at = filled[account] ?? 0;
      accountKeys[at] = k;
      filled[account] = at + 1;
    });

    const place = (slots: Uint32Array, hash: number, index: number): void => {
      const mask = slots.length - 1;
      let slot = hash & mask;
      while (slots[slot] !== 0) slot = (slot + 1) & mask;
      slots[slot] = index + 1;
    };
    const bySecret = new Uint32Array(slotsFor(keyCount));
    const byPublishable = new Uint32Array(slotsFor(keyCount));
    const byId = new Uint32Array(slotsFor(keyCount));
    keyText.forEach((start, k) => {
      const idEnd = start + (keyLengths[2 * k] ?? 0);
      place(bySecret, digestHash(digests, k * 32), k);
      place(byId, hashBytes(text, start, idEnd, seed), k);
      place(byPublishable, hashBytes(text, idEnd, idEnd + (keyLengths[2 * k + 1] ?? 0), seed), k);
    });
    const byAccount = new Uint32Array(slotsFor(accountCount));
    accountText.forEach((start, a) => {
      place(byAccount, hashBytes(text, start, start + (accountLengths[a] ?? 0), seed), a);
    });
    return {
      keyCount,
      accountCount,
      seed,
      digests,
      text,
      keyText,
      keyLengths,
      keyFlags: Uint8Array.from(this.keyFlags),
      keyExpires: Float64Array.from(this.keyExpires),
      keyAccount,
      keyPermissions: Uint16Array.from(this.keyPermissions),
      permissionText: new TextEncoder().encode(this.permissionNames.join(',')),
      accountText,
      accountLengths,
      accountList: Int32Array.from(this.accountList),
      accountKeyStart,
      accountKeys,
      listText: this.lists.text.done(),
      listOffsets: Uint32Array.from(this.lists.offsets),
      accountLimits: Int32Array.from(this.accountLimits),
      limitText: this.limitSets.text.done(),
      limitOffsets: Uint32Array.from(this.limitSets.offsets),
      bySecret,
      byPublishable,
      byId,
      byAccount,
    };
  }
}
