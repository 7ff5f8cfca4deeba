import { randomInt } from 'node:crypto';
import { PERMISSIONS } from '../model/permissions';
import type { Role } from '../model/roles';
import type { AccountLimits } from '../model/key-record';
import { limitsText } from './key-rules';
import type { UniqueKeyField } from './keys-file';
import {
  BLOCKED,
  bytesEqual,
  digestHash,
  flagsOf,
  hashString,
  NO_LIMITS,
  NO_LIST,
  type PackedTable,
} from './packed-table';

/** One key as the builder takes it (its account was added before and is named by index). */
export interface PackedKeyInput {
  readonly id: string;
  readonly role: Role;
  readonly publishableKey: string;
  readonly secretKeySha256: Uint8Array;
  readonly revoked: boolean;
  readonly expiresAt?: number | undefined;
  /** Its permissions as a mask over the builder's vocabulary; 0 or absent: not restricted. */
  readonly permissionMask?: number | undefined;
}

type NumberArray = Uint8Array | Uint16Array | Uint32Array | Int32Array | Float64Array;

/**
 * Numbers pushed one by one into a typed array that doubles as it fills: outside the JavaScript
 * heap, so a million keys' columns cost the collector nothing while a ring is built. `values`
 * holds them from 0 to `length`; `done()` copies them out at their exact size.
 */
class Column<T extends NumberArray> {
  values: T;
  length = 0;

  constructor(
    private readonly make: (length: number) => T,
    initial = 1024,
  ) {
    this.values = make(initial);
  }

  /** Makes room for `more` values after `length`. */
  reserve(more: number): void {
    if (this.length + more <= this.values.length) return;
    let size = this.values.length * 2;
    while (size < this.length + more) size *= 2;
    const grown = this.make(size);
    grown.set(this.values.subarray(0, this.length));
    this.values = grown;
  }

  push(value: number): void {
    this.reserve(1);
    this.values[this.length++] = value;
  }

  at(index: number): number {
    return this.values[index] ?? 0;
  }

  done(): T {
    const exact = this.make(this.length);
    exact.set(this.values.subarray(0, this.length));
    return exact;
  }
}

/** Bytes appended a string or a digest at a time. */
class Bytes extends Column<Uint8Array> {
  constructor() {
    super((length) => new Uint8Array(length), 1 << 16);
  }

  /** Appends an ASCII string (the validation rules admit nothing else); returns its offset. */
  ascii(value: string): number {
    this.reserve(value.length);
    const start = this.length;
    for (let i = 0; i < value.length; i++) this.values[start + i] = value.charCodeAt(i) & 0xff;
    this.length += value.length;
    return start;
  }

  raw(value: Uint8Array): number {
    this.reserve(value.length);
    const start = this.length;
    this.values.set(value, start);
    this.length += value.length;
    return start;
  }
}

/**
 * Distinct texts stored once each, in order of first sight: their ASCII one after another and the
 * offset where each ends. `indexOf()` adds a text not seen before.
 */
class DistinctTexts {
  private readonly indexes = new Map<string, number>();
  readonly text = new Bytes();
  readonly offsets = new Column((length) => new Uint32Array(length));

  constructor() {
    this.offsets.push(0);
  }

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

/**
 * An open-addressing table (linear probing) of index + 1, 0 for an empty slot, doubled whenever
 * it would pass half full: at any time a power of two at least twice its entries, as the
 * `PackedTable`'s tables are. It keeps each entry's hash to place it again when it grows.
 */
class IndexTable {
  slots = new Uint32Array(16);
  private readonly hashes = new Column((length) => new Uint32Array(length));

  /** The index of an entry of this `hash` that `equal` accepts, or -1. */
  find(hash: number, equal: (index: number) => boolean): number {
    const mask = this.slots.length - 1;
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      const entry = this.slots[slot] ?? 0;
      if (entry === 0) return -1;
      if (this.hashes.at(entry - 1) === hash && equal(entry - 1)) return entry - 1;
    }
  }

  /** Places the next entry (its index is the number placed so far). */
  add(hash: number): void {
    const index = this.hashes.length;
    this.hashes.push(hash);
    if (this.hashes.length * 2 > this.slots.length) {
      this.slots = new Uint32Array(this.slots.length * 2);
      for (let i = 0; i < index; i++) this.place(this.hashes.at(i), i);
    }
    this.place(hash, index);
  }

  private place(hash: number, index: number): void {
    const mask = this.slots.length - 1;
    let slot = hash & mask;
    while (this.slots[slot] !== 0) slot = (slot + 1) & mask;
    this.slots[slot] = index + 1;
  }
}

/**
 * Builds a `PackedTable` from accounts and keys added in order. It checks no rule: callers add what
 * the keys-file rules or the database already validated. It does keep what must be unique unique:
 * an account id, or a key id, publishable key or secret, that was added before is refused and
 * named (the keys-file checker reports it; the database's constraints forbid it). Equal
 * whitelists, and equal limit sets, are stored once.
 */
export class PackedTableBuilder {
  private readonly seed = randomInt(0, 2 ** 31);
  private readonly text = new Bytes();
  private readonly digests = new Bytes();
  private readonly keyText = new Column((length) => new Uint32Array(length));
  private readonly keyLengths = new Column((length) => new Uint8Array(length));
  private readonly keyFlags = new Column((length) => new Uint8Array(length));
  private readonly keyExpires = new Column((length) => new Float64Array(length));
  private readonly keyAccount = new Column((length) => new Uint32Array(length));
  private readonly keyPermissions = new Column((length) => new Uint16Array(length));
  private readonly accountText = new Column((length) => new Uint32Array(length));
  private readonly accountLengths = new Column((length) => new Uint8Array(length));
  private readonly accountList = new Column((length) => new Int32Array(length));
  private readonly accountLimits = new Column((length) => new Int32Array(length));
  /** Each distinct whitelist, its entries joined by commas. */
  private readonly lists = new DistinctTexts();
  /** Each distinct set of limit overrides, as `limitsText()` writes it. */
  private readonly limitSets = new DistinctTexts();
  private readonly bySecret = new IndexTable();
  private readonly byPublishable = new IndexTable();
  private readonly byId = new IndexTable();
  private readonly byAccount = new IndexTable();

  /** `permissionNames`: the vocabulary the keys' masks are over (bit `i`: name `i`). */
  constructor(private readonly permissionNames: readonly string[] = PERMISSIONS) {}

  /** The number of keys added so far. */
  get keys(): number {
    return this.keyText.length;
  }

  /**
   * Adds an account and returns its index, or `-1` when an account with this id was added before
   * (nothing is added then); `list`: its canonical whitelist entries, `undefined` or `'blocked'`;
   * `limits`: its validated limit overrides.
   */
  addAccount(
    id: string,
    list: readonly string[] | undefined | 'blocked',
    limits?: AccountLimits,
  ): number {
    const hash = hashString(id, this.seed);
    const equal = (a: number): boolean =>
      bytesEqual(this.text.values, this.accountText.at(a), this.accountLengths.at(a), id);
    if (this.byAccount.find(hash, equal) >= 0) return -1;
    this.byAccount.add(hash);
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

  /**
   * Adds a key of the account at index `account`, or names the first of its unique fields an
   * earlier key has (nothing is added then).
   */
  addKey(account: number, key: PackedKeyInput): UniqueKeyField | undefined {
    const { text, digests } = this;
    const idHash = hashString(key.id, this.seed);
    const publishableHash = hashString(key.publishableKey, this.seed);
    const secretHash = digestHash(key.secretKeySha256);
    const idAt = (k: number): number => this.keyText.at(k);
    const idLength = (k: number): number => this.keyLengths.at(2 * k);
    if (this.byId.find(idHash, (k) => bytesEqual(text.values, idAt(k), idLength(k), key.id)) >= 0) {
      return 'id';
    }
    const samePublishable = (k: number): boolean =>
      bytesEqual(
        text.values,
        idAt(k) + idLength(k),
        this.keyLengths.at(2 * k + 1),
        key.publishableKey,
      );
    if (this.byPublishable.find(publishableHash, samePublishable) >= 0) return 'publishableKey';
    const sameSecret = (k: number): boolean =>
      sameBytes(digests.values, k * 32, key.secretKeySha256);
    if (this.bySecret.find(secretHash, sameSecret) >= 0) return 'secretKeySha256';

    this.byId.add(idHash);
    this.byPublishable.add(publishableHash);
    this.bySecret.add(secretHash);
    this.keyText.push(text.ascii(key.id));
    text.ascii(key.publishableKey);
    this.keyLengths.push(key.id.length);
    this.keyLengths.push(key.publishableKey.length);
    this.keyFlags.push(flagsOf(key.role, key.revoked));
    this.keyExpires.push(key.expiresAt ?? Number.NaN);
    this.keyAccount.push(account);
    this.keyPermissions.push(key.permissionMask ?? 0);
    digests.raw(key.secretKeySha256);
    return undefined;
  }

  build(): PackedTable {
    const keyCount = this.keyText.length;
    const accountCount = this.accountText.length;
    const keyAccount = this.keyAccount.done();

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

    return {
      keyCount,
      accountCount,
      seed: this.seed,
      digests: this.digests.done(),
      text: this.text.done(),
      keyText: this.keyText.done(),
      keyLengths: this.keyLengths.done(),
      keyFlags: this.keyFlags.done(),
      keyExpires: this.keyExpires.done(),
      keyAccount,
      keyPermissions: this.keyPermissions.done(),
      permissionText: new TextEncoder().encode(this.permissionNames.join(',')),
      accountText: this.accountText.done(),
      accountLengths: this.accountLengths.done(),
      accountList: this.accountList.done(),
      accountKeyStart,
      accountKeys,
      listText: this.lists.text.done(),
      listOffsets: this.lists.offsets.done(),
      accountLimits: this.accountLimits.done(),
      limitText: this.limitSets.text.done(),
      limitOffsets: this.limitSets.offsets.done(),
      bySecret: this.bySecret.slots,
      byPublishable: this.byPublishable.slots,
      byId: this.byId.slots,
      byAccount: this.byAccount.slots,
    };
  }
}

/** True when the 32 bytes at `offset` of `bytes` equal `digest`. */
function sameBytes(bytes: Uint8Array, offset: number, digest: Uint8Array): boolean {
  for (let i = 0; i < digest.length; i++) {
    if (bytes[offset + i] !== digest[i]) return false;
  }
  return true;
}
