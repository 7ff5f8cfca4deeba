import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { types } from 'node:util';
import { MessageChannel } from 'node:worker_threads';
import { loadSharedFileKeyStore } from '../../lib/keys/key-store';
import { PackedKeyRing } from '../../lib/keys/packed-key-ring';
import { type PackedTable, sharedTable } from '../../lib/keys/packed-table';
import { buildRingHere } from '../../lib/keys/ring-sources';
import { TableKeyStore } from '../../lib/keys/table-key-store';
import { createFixtures } from '../helpers/fixtures';

/**
 * One keys file ring for every thread of a host: built once in shared memory, posted to the other
 * threads as the same memory, served there as it is, and swapped whole on a reload.
 */

describe('a keys file ring in shared memory', () => {
  const fixtures = createFixtures();
  let directory: string;
  let file: string;

  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'tollgate-table-key-store-'));
    file = join(directory, 'keys.json');
    await writeFile(file, JSON.stringify(fixtures.document));
  });

  afterAll(async () => {
    await rm(directory, { recursive: true, force: true });
  });

  /** Every array of the table, by name. */
  const arraysOf = (table: PackedTable): [string, ArrayBufferView][] =>
    Object.entries(table).filter((entry): entry is [string, ArrayBufferView] =>
      ArrayBuffer.isView(entry[1]),
    );

  it('holds every array in one shared buffer, with the same contents', async () => {
    const { table } = await buildRingHere({ kind: 'file', path: file });
    const shared = sharedTable(table);
    const buffers = new Set(arraysOf(shared).map(([, array]) => array.buffer));
    expect(buffers.size).toBe(1);
    expect(types.isSharedArrayBuffer([...buffers][0])).toBe(true);
    for (const [name, array] of arraysOf(table)) {
      const copy = shared[name as keyof PackedTable] as ArrayBufferView;
      expect(copy.constructor).toBe(array.constructor);
      expect(Buffer.from(copy.buffer, copy.byteOffset, copy.byteLength)).toEqual(
        Buffer.from(array.buffer, array.byteOffset, array.byteLength),
      );
      // Each array starts where its element type may start.
      expect(copy.byteOffset % 8).toBe(0);
    }
  });

  it('answers every lookup as the ring it was copied from', async () => {
    const { table } = await buildRingHere({ kind: 'file', path: file });
    const own = new PackedKeyRing(table);
    const store = new TableKeyStore(sharedTable(table));
    for (const key of Object.values(fixtures.keys)) {
      expect(store.findBySecretKey(key.secretKey)).toEqual(own.findBySecretKey(key.secretKey));
      expect(store.findByKeyPair(key.publishableKey, key.secretKey)).toEqual(
        own.findByKeyPair(key.publishableKey, key.secretKey),
      );
      expect(store.findById(key.id)).toEqual(own.findById(key.id));
    }
    expect(store.findBySecretKey(fixtures.keys.level1.secretKey)?.id).toBe('key_l1');
    expect(store.findBySecretKey('sk_test_not_a_key_at_all_000000000000')).toBeUndefined();
    expect([...store.recordsOfAccount('acct_walled')].map((record) => record.id)).toEqual([
      'key_walled',
    ]);
    expect(store.size).toBe(table.keyCount);
  });

  it('reaches another thread as the same memory, not a copy', async () => {
    const { table } = await buildRingHere({ kind: 'file', path: file });
    const shared = sharedTable(table);
    const { port1, port2 } = new MessageChannel();
    const received = new Promise<PackedTable>((resolve) => {
      port2.once('message', resolve);
    });
    port1.postMessage(shared);
    const there = await received;
    port1.close();
    there.keyFlags[0] = 0xff;
    expect(shared.keyFlags[0]).toBe(0xff);
  });

  it('is handed out on the first load and on each reload, and swapped whole where served', async () => {
    const handed: PackedTable[] = [];
    const store = await loadSharedFileKeyStore(file, {}, (table) => handed.push(table));
    expect(handed).toHaveLength(1);
    const [first] = handed as [PackedTable];
    expect(types.isSharedArrayBuffer(first.digests.buffer)).toBe(true);
    const served = new TableKeyStore(first);
    const { level1 } = fixtures.keys;
    expect(served.findBySecretKey(level1.secretKey)?.revoked).toBe(false);

    const document = structuredClone(fixtures.document);
    for (const account of document.accounts) {
      for (const key of account.keys)
        if (key.id === level1.id) Object.assign(key, { revoked: true });
    }
    await writeFile(file, JSON.stringify(document));
    await store.reload();
    expect(handed).toHaveLength(2);
    expect(store.findBySecretKey(level1.secretKey)?.revoked).toBe(true);
    // Served where it was handed, only once swapped in.
    expect(served.findBySecretKey(level1.secretKey)?.revoked).toBe(false);
    const [, second] = handed;
    expect(second).toBeDefined();
    if (second !== undefined) expect(served.swap(second)).toBe(first.keyCount);
    expect(served.findBySecretKey(level1.secretKey)?.revoked).toBe(true);
  });
});
