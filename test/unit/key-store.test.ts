import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigurationError } from '../../lib/errors';
import { generateKey } from '../../lib/model/key-format';
import { FileKeyStore, KeyRing, sha256 } from '../../lib/keys/key-store';
import { createFixtures } from '../helpers/fixtures';

describe('KeyRing lookups', () => {
  const { keys, ring } = createFixtures();

  it('finds a key by its secret', () => {
    expect(ring.findBySecretKey(keys.level2.secretKey)).toMatchObject({
      id: 'key_l2',
      role: 'level-2',
    });
    expect(ring.findBySecretKey(keys.foreign.secretKey)?.id).toBe('key_foreign');
  });

  it.each([
    ['an unknown secret', () => generateKey('secret')],
    ['a publishable key', () => keys.level2.publishableKey],
    ['the SHA-256 hex of a secret', () => sha256(keys.level2.secretKey).toString('hex')],
    ['a secret with one more character', () => `${keys.level2.secretKey}x`],
    ['nothing', () => ''],
  ])('finds nothing by %s', (_what, value) => {
    expect(ring.findBySecretKey(value())).toBeUndefined();
  });

  it('finds a key pair only when the secret belongs to the publishable key', () => {
    expect(ring.findByKeyPair(keys.level3.publishableKey, keys.level3.secretKey)?.id).toBe(
      'key_l3',
    );
    expect(ring.findByKeyPair(keys.foreign.publishableKey, keys.foreign.secretKey)?.id).toBe(
      'key_foreign',
    );
  });

  it.each([
    ['a wrong secret', () => [keys.level3.publishableKey, generateKey('secret')]],
    ["another key's secret", () => [keys.level3.publishableKey, keys.admin.secretKey]],
    ['an unknown publishable key', () => [generateKey('publishable'), keys.level3.secretKey]],
    ['the pair swapped', () => [keys.level3.secretKey, keys.level3.publishableKey]],
  ] as [string, () => [string, string]][])('finds no pair for %s', (_what, pair) => {
    const [publishableKey, secretKey] = pair();
    expect(ring.findByKeyPair(publishableKey, secretKey)).toBeUndefined();
  });

  it('finds keys by id and by publishable key', () => {
    expect(ring.findById('key_walled')).toMatchObject({
      accountId: 'acct_walled',
      role: 'administrator',
    });
    expect(ring.findById('key_nope')).toBeUndefined();
    expect(ring.findByPublishableKey(keys.level1.publishableKey)?.id).toBe('key_l1');
    expect(ring.findByPublishableKey(keys.level1.secretKey)).toBeUndefined();
  });

  it('returns revoked keys with revoked: true, for callers to refuse', () => {
    const { revoked } = keys;
    expect(ring.findBySecretKey(revoked.secretKey)).toMatchObject({
      id: 'key_revoked',
      revoked: true,
    });
    expect(ring.findByKeyPair(revoked.publishableKey, revoked.secretKey)?.revoked).toBe(true);
    expect(ring.findById('key_revoked')?.revoked).toBe(true);
    expect(ring.findById('key_admin')?.revoked).toBe(false);
  });
});

describe('FileKeyStore', () => {
  let directory: string;
  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'tollgate-keys-'));
  });
  afterAll(async () => {
    await rm(directory, { recursive: true, force: true });
  });

  async function writeJson(name: string, value: unknown): Promise<string> {
    const path = join(directory, name);
    await writeFile(path, JSON.stringify(value));
    return path;
  }

  async function loadError(path: string): Promise<ConfigurationError> {
    const error: unknown = await FileKeyStore.load(path).then(
      () => new Error('the file was accepted'),
      (thrown: unknown) => thrown,
    );
    expect(error).toBeInstanceOf(ConfigurationError);
    return error as ConfigurationError;
  }

  it('loads a keys file and answers lookups from it', async () => {
    const { keys, document } = createFixtures();
    const store = await FileKeyStore.load(await writeJson('load.json', document));
    expect(store.findBySecretKey(keys.admin.secretKey)?.id).toBe('key_admin');
    expect(store.findByKeyPair(keys.walled.publishableKey, keys.walled.secretKey)?.accountId).toBe(
      'acct_walled',
    );
    expect(store.findByPublishableKey(keys.level1.publishableKey)?.id).toBe('key_l1');
    expect(store.findById('key_l3')?.role).toBe('level-3');
  });

  it('opens at once, finds nothing and is not ready until its first ring is in', async () => {
    const { keys, document } = createFixtures();
    const store = FileKeyStore.open(await writeJson('open.json', document));
    expect(store.ready).toBe(false);
    expect(store.findBySecretKey(keys.admin.secretKey)).toBeUndefined();
    await store.firstLoad;
    expect(store.ready).toBe(true);
    expect(store.findBySecretKey(keys.admin.secretKey)?.id).toBe('key_admin');
  });

  it('stays not ready when its first read fails, and says why', async () => {
    const store = FileKeyStore.open(join(directory, 'never-there.json'));
    await expect(store.firstLoad).rejects.toThrow(/cannot be read \(ENOENT\)/);
    expect(store.ready).toBe(false);
  });

  it('lists every key of the file, record by record', async () => {
    const { document } = createFixtures();
    const store = await FileKeyStore.load(await writeJson('list.json', document));
    const listed = [...store.keyRecords()].map((record) => record.id);
    expect(listed).toEqual(KeyRing.fromDocument(document).records.map((record) => record.id));
  });

  it('keeps the previous keys in force when a reload fails', async () => {
    const first = createFixtures();
    const path = await writeJson('broken-reload.json', first.document);
    const store = await FileKeyStore.load(path);

    await writeFile(path, '{"accounts": [');
    await expect(store.reload()).rejects.toThrow(
      new ConfigurationError(`keys file ${path}: is not valid JSON`),
    );
    expect(store.findBySecretKey(first.keys.admin.secretKey)?.id).toBe('key_admin');

    const invalid = structuredClone(first.document);
    invalid.accounts[1]!.ipWhitelist = [];
    await writeJson('broken-reload.json', invalid);
    await expect(store.reload()).rejects.toThrow(/accounts\[1\]\.ipWhitelist: is empty/);
    expect(
      store.findByKeyPair(first.keys.level2.publishableKey, first.keys.level2.secretKey)?.id,
    ).toBe('key_l2');
  });

  it('swaps every key when a reload succeeds', async () => {
    const first = createFixtures();
    const second = createFixtures();
    const path = await writeJson('swap.json', first.document);
    const store = await FileKeyStore.load(path);

    await writeJson('swap.json', second.document);
    await expect(store.reload()).resolves.toBe(second.ring.records.length);
    expect(store.findBySecretKey(first.keys.admin.secretKey)).toBeUndefined();
    expect(store.findBySecretKey(second.keys.admin.secretKey)?.id).toBe('key_admin');
    expect(store.findByPublishableKey(first.keys.level1.publishableKey)).toBeUndefined();
  });

  it('refuses a path that cannot be read, naming the file', async () => {
    const path = join(directory, 'missing.json');
    expect((await loadError(path)).message).toBe(`keys file ${path}: cannot be read (ENOENT)`);
  });

  it('refuses a directory, naming it', async () => {
    expect((await loadError(directory)).message).toBe(
      `keys file ${directory}: cannot be read (EISDIR)`,
    );
  });

  it('refuses invalid JSON, naming the file', async () => {
    const path = join(directory, 'invalid.json');
    await writeFile(path, '{ accounts: [] }');
    expect((await loadError(path)).message).toBe(`keys file ${path}: is not valid JSON`);
  });

  it('refuses an invalid document, naming the file and the entry', async () => {
    const document = structuredClone(createFixtures().document);
    (document.accounts[0]!.keys[1] as { role: string }).role = 'boss';
    const path = await writeJson('bad-role.json', document);
    expect((await loadError(path)).message).toMatch(
      new RegExp(
        `^${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: accounts\\[0\\]\\.keys\\[1\\]\\.role: unknown role "boss"`,
      ),
    );
  });

  it('is a KeyRing underneath: the same records as the document', async () => {
    const { document } = createFixtures();
    const store = await FileKeyStore.load(await writeJson('same.json', document));
    const ring = KeyRing.fromDocument(document);
    for (const record of ring.records) expect(store.findById(record.id)).toEqual(record);
  });
});
