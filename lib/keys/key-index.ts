import { timingSafeEqual } from 'node:crypto';
import type { KeyRecord } from '../model/key-record';
import { ABSENT_DIGEST, sha256 } from './key-digest';

/**
 * The lookups of every key ring, written once: by secret (its SHA-256 found by map, then compared
 * in constant time), by key pair (the same time whether the publishable key exists or not), by
 * publishable key and by id. `KeyRing` fills one at construction; `LiveKeyRing` adds and removes
 * records as changes arrive.
 */
export class KeyIndex {
  private readonly byId = new Map<string, KeyRecord>();
  private readonly bySecretDigest = new Map<string, KeyRecord>();
  private readonly byPublishableKey = new Map<string, KeyRecord>();

  get size(): number {
    return this.byId.size;
  }

  /** The records, in the order they were added. */
  records(): IterableIterator<KeyRecord> {
    return this.byId.values();
  }

  add(record: KeyRecord): void {
    this.byId.set(record.id, record);
    this.bySecretDigest.set(record.secretKeySha256.toString('hex'), record);
    this.byPublishableKey.set(record.publishableKey, record);
  }

  /** Removes the record with this id; its digest and publishable key only while they are its own. */
  remove(id: string): KeyRecord | undefined {
    const record = this.byId.get(id);
    if (record === undefined) return undefined;
    this.byId.delete(id);
    const digest = record.secretKeySha256.toString('hex');
    if (this.bySecretDigest.get(digest) === record) this.bySecretDigest.delete(digest);
    if (this.byPublishableKey.get(record.publishableKey) === record) {
      this.byPublishableKey.delete(record.publishableKey);
    }
    return record;
  }

  findBySecretKey(secretKey: string): KeyRecord | undefined {
    return this.findByDigest(sha256(secretKey));
  }

  /** The key whose secret has this SHA-256, compared in constant time. */
  findByDigest(digest: Buffer): KeyRecord | undefined {
    const record = this.bySecretDigest.get(digest.toString('hex'));
    return record !== undefined && timingSafeEqual(digest, record.secretKeySha256)
      ? record
      : undefined;
  }

  findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined {
    const record = this.byPublishableKey.get(publishableKey);
    const matches = timingSafeEqual(sha256(secretKey), record?.secretKeySha256 ?? ABSENT_DIGEST);
    return matches ? record : undefined;
  }

  findByPublishableKey(publishableKey: string): KeyRecord | undefined {
    return this.byPublishableKey.get(publishableKey);
  }

  findById(keyId: string): KeyRecord | undefined {
    return this.byId.get(keyId);
  }
}
