import type { KeyDirectory, KeyRecord, KeyStore } from '../model/key-record';
import { PackedKeyRing } from './packed-key-ring';
import type { PackedTable } from './packed-table';

/**
 * The keys another thread loaded, served from its table (in shared memory: `sharedTable()`, so
 * every thread of a host reads the same bytes). `swap()` puts a new table in force in one
 * assignment: a lookup sees the old ring or the new one, never a mix.
 */
export class TableKeyStore implements KeyStore, Required<KeyDirectory> {
  private ring: PackedKeyRing;

  constructor(table: PackedTable) {
    this.ring = new PackedKeyRing(table);
  }

  /** Puts `table` in force; returns the number of keys it holds. */
  swap(table: PackedTable): number {
    this.ring = new PackedKeyRing(table);
    return table.keyCount;
  }

  /** Keys in force. */
  get size(): number {
    return this.ring.size;
  }

  keyRecords(): Iterable<KeyRecord> {
    return this.ring.records();
  }

  recordsOfAccount(accountId: string): Iterable<KeyRecord> {
    return this.ring.recordsOfAccount(accountId);
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
