import { readFile } from 'node:fs/promises';
import { ConfigurationError } from '../errors';
import type { KeyDirectory, KeyRecord, KeyStore } from './key-record';
import { KeyIndex } from './key-index';
import { parseKeysDocument } from './keys-file';

export type { KeyDirectory, KeyRecord, KeyStore } from './key-record';

export { sha256 } from './key-digest';

/** An immutable, indexed set of key records. */
export class KeyRing implements KeyStore, KeyDirectory {
  private readonly index = new KeyIndex();

  constructor(readonly records: readonly KeyRecord[]) {
    for (const record of records) this.index.add(record);
  }

  /** Parses a keys document (the JSON of the keys file); throws `ConfigurationError` on any fault. */
  static fromDocument(document: unknown, source = 'keys file'): KeyRing {
    return new KeyRing(parseKeysDocument(document, source));
  }

  keyRecords(): readonly KeyRecord[] {
    return this.records;
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

/**
 * The keys file (see the README): loaded at start, swapped whole on `reload()`. A file that fails
 * to load leaves the keys in force unchanged, so a bad edit never locks everyone out.
 */
export class FileKeyStore implements KeyStore, KeyDirectory {
  /** The last reload scheduled, settled (never rejects): the next one starts after it. */
  private tail: Promise<unknown> = Promise.resolve();
  /** The reload scheduled and not yet reading the file, which calls until it starts share. */
  private waiting: Promise<number> | undefined;

  private constructor(
    readonly path: string,
    private ring: KeyRing,
  ) {}

  /** Reads and validates the file; rejects with a `ConfigurationError` naming the bad entry. */
  static async load(path: string): Promise<FileKeyStore> {
    return new FileKeyStore(path, await readKeyRing(path));
  }

  /**
   * Re-reads the file and resolves with the number of keys now in force. Reloads are serialised
   * and coalesced (contract 14.2): one chain of reads, one after the other; a call while a read
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
        return readKeyRing(this.path);
      })
      .then((ring) => {
        this.ring = ring;
        return ring.records.length;
      });
    this.tail = read.catch(() => undefined);
    return read;
  }

  keyRecords(): readonly KeyRecord[] {
    return this.ring.records;
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

async function readKeyRing(path: string): Promise<KeyRing> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'read error';
    throw new ConfigurationError(`keys file ${path}: cannot be read (${code})`);
  }
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    throw new ConfigurationError(`keys file ${path}: is not valid JSON`);
  }
  return KeyRing.fromDocument(document, path);
}
