import { mkdtemp, rm } from 'node:fs/promises';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ConflictError,
  InvalidRequestError,
  KeyAlreadyRolledError,
  KeyNotRollableError,
  TollgateError,
} from '../../lib/errors';
import { sha256 } from '../../lib/keys/key-store';
import { parseKeysDocument } from '../../lib/keys/keys-file';
import { FileKeyAdmin } from '../../lib/keys/file-key-admin';
import type { KeyRecord } from '../../lib/model/key-record';
import { OWNER_ROLE } from '../../lib/model/roles';

const SCOPES = { payments: 'account' } as const;

let directory: string;
let file: string;

beforeEach(async () => {
  directory = await mkdtemp(join(tmpdir(), 'file-key-admin-'));
  file = join(directory, 'keys.json');
});

afterEach(async () => {
  await rm(directory, { recursive: true, force: true });
});

/** The file as the gateway's loader reads it. */
function loaded(): KeyRecord[] {
  return parseKeysDocument(JSON.parse(readFileSync(file, 'utf8')), file, SCOPES);
}

function record(id: string): KeyRecord {
  const found = loaded().find((candidate) => candidate.id === id);
  if (found === undefined) throw new Error(`no key ${id} in the file`);
  return found;
}

async function refusal(write: Promise<unknown>): Promise<Error> {
  try {
    await write;
  } catch (error) {
    return error as Error;
  }
  throw new Error('the write was not refused');
}

describe('FileKeyAdmin', () => {
  it('writes each change to the file, which the loader reads back, mode 0600', async () => {
    const admin = FileKeyAdmin.open(file, { limitScopes: SCOPES });
    expect(existsSync(file)).toBe(false);

    const account = await admin.createAccount('acct_1', ['10.0.0.0/8'], { payments: 60 });
    expect(account).toEqual({
      id: 'acct_1',
      ipWhitelist: ['10.0.0.0/8'],
      limits: { payments: 60 },
      createdAt: null,
      updatedAt: null,
    });

    const key = await admin.createKey('acct_1', { id: 'key_a', role: 'level-2' });
    expect(key).toMatchObject({
      id: 'key_a',
      accountId: 'acct_1',
      role: 'level-2',
      createdAt: null,
      expiresAt: null,
      revoked: false,
      revokedAt: null,
      lastUsedAt: null,
      permissions: null,
    });
    expect(key.publishableKey).toMatch(/^pk_test_/);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(record('key_a')).toMatchObject({ accountId: 'acct_1', role: 'level-2', revoked: false });
    expect(record('key_a').secretKeySha256.toString('hex')).toBe(
      sha256(key.secretKey).toString('hex'),
    );
    expect(readFileSync(file, 'utf8')).not.toContain(key.secretKey);

    const owner = await admin.createKey('acct_1', { id: 'key_b', permissions: ['wallets:read'] });
    expect(owner.role).toBe(OWNER_ROLE);
    expect(owner.permissions).toEqual(['wallets:read']);
    expect(record('key_b').permissions).toBeDefined();

    const updated = await admin.updateKey('key_b', { role: 'level-1', permissions: null });
    expect(updated).toMatchObject({ role: 'level-1', permissions: null });
    expect(record('key_b').role).toBe('level-1');
    expect(record('key_b').permissions).toBeUndefined();

    await admin.setLimits('acct_1', null);
    expect(record('key_a').limits).toBeUndefined();
    await admin.setIpWhitelist('acct_1', null);
    expect(JSON.parse(readFileSync(file, 'utf8'))).not.toHaveProperty('accounts.0.ipWhitelist');

    const before = Date.now();
    const rolled = await admin.roll('key_a', 60, { id: 'key_c' });
    expect(rolled.key).toMatchObject({ id: 'key_c', accountId: 'acct_1', role: 'level-2' });
    const deadline = rolled.previous.expiresAt?.getTime() ?? 0;
    expect(deadline).toBeGreaterThanOrEqual(before + 60_000);
    expect(deadline).toBeLessThanOrEqual(Date.now() + 60_000);
    expect(record('key_a').expiresAt).toBe(deadline);
    expect(record('key_c').role).toBe('level-2');

    const revoked = await admin.revoke('key_b');
    expect(revoked).toMatchObject({ id: 'key_b', revoked: true });
    expect(record('key_b').revoked).toBe(true);

    const exported = await admin.export();
    expect(exported.accounts.map((each) => each.keys.map((k) => k.id))).toEqual([
      ['key_a', 'key_b', 'key_c'],
    ]);
    // A second admin on the same file sees every write.
    expect(await FileKeyAdmin.open(file, { limitScopes: SCOPES }).export()).toEqual(exported);
  });

  it('imports a document whole, and refuses one naming an account the file holds', async () => {
    const admin = FileKeyAdmin.open(file);
    await admin.createAccount('acct_1');
    await admin.createKey('acct_1', { id: 'key_a' });
    const other = FileKeyAdmin.open(join(directory, 'other.json'));
    await other.createAccount('acct_2');
    await other.createKey('acct_2', { id: 'key_b' });
    await other.createKey('acct_2', { id: 'key_c' });

    expect(await admin.import(await other.export())).toEqual({ accounts: 1, keys: 2 });
    expect(loaded().map((each) => each.id)).toEqual(['key_a', 'key_b', 'key_c']);

    const before = readFileSync(file, 'utf8');
    const again = await refusal(admin.import(await other.export()));
    expect(again).toBeInstanceOf(ConflictError);
    expect(await refusal(admin.import({ accounts: 'no' }))).toBeInstanceOf(InvalidRequestError);
    expect(readFileSync(file, 'utf8')).toBe(before);
  });

  it('refuses what PgKeyStore refuses, with the same errors, and leaves the file untouched', async () => {
    const admin = FileKeyAdmin.open(file, { limitScopes: SCOPES });
    await admin.createAccount('acct_1');
    await admin.createKey('acct_1', { id: 'key_a' });
    await admin.createKey('acct_1', { id: 'key_gone' });
    await admin.revoke('key_gone');
    const before = readFileSync(file, 'utf8');

    const noAccount = await refusal(admin.createKey('acct_nope'));
    expect(noAccount).toBeInstanceOf(TollgateError);
    expect(noAccount).toMatchObject({ status: 404, code: 'not_found' });
    expect(noAccount.message).toBe('No account with id "acct_nope"');
    const noKey = await refusal(admin.revoke('key_nope'));
    expect(noKey).toMatchObject({ status: 404, message: 'No key with id "key_nope"' });

    const duplicateAccount = await refusal(admin.createAccount('acct_1'));
    expect(duplicateAccount).toBeInstanceOf(ConflictError);
    expect(duplicateAccount.message).toBe('The account id is already in use');
    const duplicateKey = await refusal(admin.createKey('acct_1', { id: 'key_a' }));
    expect(duplicateKey).toBeInstanceOf(ConflictError);
    expect(duplicateKey.message).toBe('The key id is already in use');

    const revokedRoll = await refusal(admin.roll('key_gone', 60));
    expect(revokedRoll).toBeInstanceOf(KeyNotRollableError);
    expect(revokedRoll).toMatchObject({ status: 409, code: 'conflict', reason: 'revoked' });
    expect(revokedRoll.message).toBe('Key "key_gone" is revoked: roll refused');

    const outOfRange = await refusal(
      admin.createKey('acct_1', { expiresAt: Date.UTC(10_000, 0, 1) }),
    );
    expect(outOfRange).toBeInstanceOf(InvalidRequestError);
    expect(outOfRange.message).toBe(
      'expiresAt: must be a time from 1970-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z',
    );
    const past = await refusal(admin.createKey('acct_1', { expiresAt: new Date(1000) }));
    expect(past.message).toBe('expiresAt: must be in the future');

    const grace = await refusal(admin.roll('key_a', 604_801));
    expect(grace).toBeInstanceOf(InvalidRequestError);
    expect(grace.message).toBe('graceSeconds: must be a whole number from 0 to 604800');

    const whitelist = await refusal(admin.setIpWhitelist('acct_1', ['10.0.0.1/33']));
    expect(whitelist).toBeInstanceOf(InvalidRequestError);
    expect(whitelist.message).toContain('ipWhitelist[0] "10.0.0.1/33"');

    const limits = await refusal(admin.setLimits('acct_1', { nope: 5 }));
    expect(limits).toBeInstanceOf(InvalidRequestError);
    expect(limits.message).toMatch(/^limits/);
    expect(limits.message).toContain('nope');

    const permissions = await refusal(admin.updateKey('key_a', { permissions: ['nope:nope'] }));
    expect(permissions).toBeInstanceOf(InvalidRequestError);
    expect(permissions.message).toMatch(/^permissions/);

    expect(readFileSync(file, 'utf8')).toBe(before);
    expect(await admin.export()).toEqual(JSON.parse(before));
  });

  it('rolls a key once: a second roll is refused, as is a roll of an expired key', async () => {
    const admin = FileKeyAdmin.open(file);
    await admin.createAccount('acct_1');
    await admin.createKey('acct_1', { id: 'key_a' });
    await admin.roll('key_a', 300);
    const before = readFileSync(file, 'utf8');

    const twice = await refusal(admin.roll('key_a', 300));
    expect(twice).toBeInstanceOf(KeyAlreadyRolledError);
    expect(twice.message).toBe('Key "key_a" is already rolled: roll refused');
    expect(readFileSync(file, 'utf8')).toBe(before);

    const document = JSON.parse(before) as { accounts: { keys: { expiresAt?: string }[] }[] };
    const first = document.accounts[0]?.keys[0];
    if (first === undefined) throw new Error('no key');
    first.expiresAt = '2000-01-01T00:00:00Z';
    writeFileSync(file, JSON.stringify(document));
    const expired = await refusal(FileKeyAdmin.open(file).roll('key_a', 0));
    expect(expired).toBeInstanceOf(KeyNotRollableError);
    expect(expired).toMatchObject({ status: 409, code: 'conflict', reason: 'expired' });
    expect(expired.message).toBe('Key "key_a" has expired: roll refused');
  });

  it('refuses a document the loader refuses, before any write', () => {
    expect(() => new FileKeyAdmin({ accounts: [{ id: 'a', keys: 'x' }] }, file)).toThrow(
      /keys\.json/,
    );
    writeFileSync(file, '{"accounts": [{"id": "acct_1", "keys": []}], "extra": 1}');
    const before = readFileSync(file, 'utf8');
    expect(() => FileKeyAdmin.open(file)).toThrow();
    expect(readFileSync(file, 'utf8')).toBe(before);
  });

  it('makes keys in the environment it is given, and rolls a key into its own', async () => {
    const admin = FileKeyAdmin.open(file, { keyEnvironment: 'live' });
    await admin.createAccount('acct_1');
    const live = await admin.createKey('acct_1');
    expect(live.publishableKey).toMatch(/^pk_live_/);
    expect(live.secretKey).toMatch(/^sk_live_/);
    const rolled = await FileKeyAdmin.open(file).roll(live.id, 0);
    expect(rolled.key.publishableKey).toMatch(/^pk_live_/);
  });
});
