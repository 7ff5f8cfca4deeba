import fc from 'fast-check';
import { IpWhitelist } from '../../lib/model/ip-whitelist';
import { ROLES } from '../../lib/model/roles';
import { sha256 } from '../../lib/keys/key-digest';
import type { KeyRecord } from '../../lib/model/key-record';
import {
  type AccountRow,
  type KeyRow,
  LiveKeyRing,
  type RingChanges,
} from '../../lib/keys/live-key-ring';
import { PackedTableBuilder } from '../../lib/keys/packed-builder';
import { PackedKeyRing } from '../../lib/keys/packed-key-ring';

/**
 * The live ring (a packed base under a layer of changes) against a model of plain maps: accounts
 * and keys as the database holds them. After any base and any sequence of change batches, every
 * lookup answers what the model says, and the listing, in all and per account, holds exactly the
 * model's keys.
 */

const ACCOUNT_IDS = ['a0', 'a1', 'a2', 'a3'];
const KEY_IDS = ['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7'];
const LISTS: (readonly string[] | 'blocked' | undefined)[] = [
  undefined,
  ['127.0.0.1'],
  ['10.0.0.0/8'],
  'blocked',
];

interface Model {
  readonly accounts: Map<string, AccountRow>;
  readonly keys: Map<string, KeyRow>;
}

function accountRow(id: string, list: (typeof LISTS)[number]): AccountRow {
  return list === 'blocked'
    ? { id, ipWhitelist: undefined, blocked: true }
    : { id, ipWhitelist: list === undefined ? undefined : IpWhitelist.parse(list), blocked: false };
}

/** Key rows: a version number makes each put's publishable key and secret new. */
const keyArb = (version: number): fc.Arbitrary<KeyRow> =>
  fc
    .record({
      id: fc.constantFrom(...KEY_IDS),
      accountId: fc.constantFrom(...ACCOUNT_IDS),
      role: fc.constantFrom(...ROLES),
      revoked: fc.boolean(),
      expiresAt: fc.option(fc.integer({ min: 0, max: 10 ** 12 }), { nil: undefined }),
      reuse: fc.boolean(),
    })
    .map(({ reuse, ...row }) => ({
      ...row,
      // Half the time a key keeps its credentials across changes (a role change, a revocation).
      publishableKey: `pk_test_${row.id}_${reuse ? 0 : version}_padding__`,
      secretKeySha256: sha256(`sk_${row.id}_${reuse ? 0 : version}`),
    }));

const batchArb = (version: number): fc.Arbitrary<RingChanges> =>
  fc.record({
    accounts: fc.array(
      fc
        .tuple(fc.constantFrom(...ACCOUNT_IDS), fc.constantFrom(...LISTS))
        .map(([id, list]) => accountRow(id, list)),
      { maxLength: 2 },
    ),
    keys: fc.array(keyArb(version), { maxLength: 4 }),
    deletedAccounts: fc.array(fc.constantFrom(...ACCOUNT_IDS), { maxLength: 1 }),
    deletedKeys: fc.array(fc.constantFrom(...KEY_IDS), { maxLength: 2 }),
  });

/** What the database would hold after a batch (rows of one batch with one id: the last wins). */
function applyToModel(model: Model, changes: RingChanges): void {
  for (const id of changes.deletedKeys) model.keys.delete(id);
  for (const id of changes.deletedAccounts) {
    for (const [keyId, row] of model.keys) if (row.accountId === id) model.keys.delete(keyId);
    model.accounts.delete(id);
  }
  for (const account of changes.accounts) model.accounts.set(account.id, account);
  for (const row of changes.keys) model.keys.set(row.id, row);
}

/** Batches whose keys keep publishable keys and secrets unique, as the database's constraints do. */
function consistent(model: Model, changes: RingChanges): boolean {
  const after: Model = { accounts: new Map(model.accounts), keys: new Map(model.keys) };
  applyToModel(after, changes);
  const rows = [...after.keys.values()];
  const pks = new Set(rows.map((row) => row.publishableKey));
  const digests = new Set(rows.map((row) => row.secretKeySha256.toString('hex')));
  const ids = new Set(changes.keys.map((row) => row.id));
  return (
    pks.size === rows.length && digests.size === rows.length && ids.size === changes.keys.length
  );
}

function expected(model: Model, row: KeyRow): unknown {
  const account = model.accounts.get(row.accountId);
  return {
    id: row.id,
    accountId: row.accountId,
    role: row.role,
    publishableKey: row.publishableKey,
    secretKeySha256: row.secretKeySha256.toString('hex'),
    revoked: row.revoked || account?.blocked === true,
    expiresAt: row.expiresAt,
    ipWhitelist: account?.ipWhitelist?.entries(),
  };
}

function plain(record: KeyRecord | undefined): unknown {
  if (record === undefined) return undefined;
  return {
    id: record.id,
    accountId: record.accountId,
    role: record.role,
    publishableKey: record.publishableKey,
    secretKeySha256: Buffer.from(record.secretKeySha256).toString('hex'),
    revoked: record.revoked,
    expiresAt: record.expiresAt,
    ipWhitelist: record.ipWhitelist?.entries(),
  };
}

/** The packed base of a model whose keys all belong to accounts it has. */
function baseOf(model: Model): PackedKeyRing {
  const builder = new PackedTableBuilder();
  const indexes = new Map<string, number>();
  for (const account of model.accounts.values()) {
    const list = account.blocked === true ? 'blocked' : account.ipWhitelist?.entries();
    indexes.set(account.id, builder.addAccount(account.id, list));
  }
  for (const row of model.keys.values()) {
    builder.addKey(indexes.get(row.accountId) ?? 0, row);
  }
  return new PackedKeyRing(builder.build());
}

function check(ring: LiveKeyRing, model: Model): void {
  expect(ring.size).toBe(model.keys.size);
  const listed = [...ring.keyRecords()].map(plain);
  const wanted = [...model.keys.values()].map((row) => expected(model, row));
  const byId = (a: unknown, b: unknown): number =>
    (a as { id: string }).id.localeCompare((b as { id: string }).id);
  expect(listed.sort(byId)).toEqual(wanted.sort(byId));
  // Per account, found by the account's index: exactly the model's keys of that account.
  for (const accountId of ACCOUNT_IDS) {
    const ofAccount = [...ring.recordsOfAccount(accountId)].map(plain);
    const wantedOfAccount = [...model.keys.values()]
      .filter((row) => row.accountId === accountId)
      .map((row) => expected(model, row));
    expect(ofAccount.sort(byId)).toEqual(wantedOfAccount.sort(byId));
  }
  for (const id of KEY_IDS) {
    const row = model.keys.get(id);
    const want = row === undefined ? undefined : expected(model, row);
    expect(plain(ring.findById(id))).toEqual(want);
    for (const version of [0, 1, 2, 3, 4, 5, 6]) {
      const pk = `pk_test_${id}_${version}_padding__`;
      const secret = `sk_${id}_${version}`;
      const holder = [...model.keys.values()].find((r) => r.publishableKey === pk);
      const owner = [...model.keys.values()].find((r) => r.secretKeySha256.equals(sha256(secret)));
      expect(plain(ring.findByPublishableKey(pk))).toEqual(
        holder === undefined ? undefined : expected(model, holder),
      );
      expect(plain(ring.findBySecretKey(secret))).toEqual(
        owner === undefined ? undefined : expected(model, owner),
      );
      expect(plain(ring.findByKeyPair(pk, secret))).toEqual(
        holder !== undefined && holder === owner ? expected(model, holder) : undefined,
      );
    }
  }
}

describe('LiveKeyRing against a model of the database', () => {
  it('answers as the model after any base and any sequence of batches', () => {
    const scenario = fc
      .tuple(
        fc.array(
          fc
            .tuple(fc.constantFrom(...ACCOUNT_IDS), fc.constantFrom(...LISTS))
            .map(([id, list]) => accountRow(id, list)),
          { maxLength: 4 },
        ),
        fc.array(keyArb(0), { maxLength: 6 }),
        fc.tuple(batchArb(1), batchArb(2), batchArb(3), batchArb(4), batchArb(5), batchArb(6)),
      )
      .map(([accounts, keys, batches]) => ({ accounts, keys, batches }));
    fc.assert(
      fc.property(scenario, ({ accounts, keys, batches }) => {
        const model: Model = { accounts: new Map(), keys: new Map() };
        for (const account of accounts) model.accounts.set(account.id, account);
        for (const row of keys) {
          const clash = [...model.keys.values()].some(
            (other) => other.publishableKey === row.publishableKey && other.id !== row.id,
          );
          if (model.accounts.has(row.accountId) && !clash) model.keys.set(row.id, row);
        }
        const ring = new LiveKeyRing(baseOf(model));
        check(ring, model);
        for (const batch of batches) {
          if (!consistent(model, batch)) continue;
          ring.apply(batch);
          applyToModel(model, batch);
          check(ring, model);
        }
      }),
      { numRuns: 100 },
    );
  });

  it('counts the layer of changes over its base', () => {
    const ring = new LiveKeyRing();
    expect(ring.changes).toBe(0);
    ring.apply({
      accounts: [accountRow('a0', undefined)],
      keys: [
        {
          id: 'k0',
          accountId: 'a0',
          role: 'level-1',
          publishableKey: 'pk_test_k0_0_padding__',
          secretKeySha256: sha256('sk_k0_0'),
          revoked: false,
        },
      ],
      deletedAccounts: [],
      deletedKeys: [],
    });
    expect(ring.changes).toBe(2);
    expect(ring.size).toBe(1);
  });
});

describe('LiveKeyRing and account limits', () => {
  const keyRow = (id: string, accountId: string): KeyRow => ({
    id,
    accountId,
    role: 'administrator',
    publishableKey: `pk_test_${id}_padding_0123456789`,
    secretKeySha256: sha256(`sk_${id}`),
    revoked: false,
  });

  it("gives base keys and layer keys their account's new limits in the batch that changes them", () => {
    const builder = new PackedTableBuilder();
    const account = builder.addAccount('acct_a', undefined, { payments: 3 });
    builder.addKey(account, keyRow('key_base', 'acct_a'));
    const ring = new LiveKeyRing(new PackedKeyRing(builder.build()));
    ring.apply({
      accounts: [],
      keys: [keyRow('key_layer', 'acct_a')],
      deletedAccounts: [],
      deletedKeys: [],
    });
    expect(ring.findById('key_base')?.limits).toEqual({ payments: 3 });
    expect(ring.findById('key_layer')?.limits).toEqual({ payments: 3 });

    const raised = Object.freeze({ payments: 6000 });
    ring.apply({
      accounts: [{ id: 'acct_a', ipWhitelist: undefined, limits: raised }],
      keys: [],
      deletedAccounts: [],
      deletedKeys: [],
    });
    expect(ring.findBySecretKey('sk_key_base')?.limits).toBe(raised);
    expect(ring.findById('key_layer')?.limits).toBe(raised);

    ring.apply({
      accounts: [{ id: 'acct_a', ipWhitelist: undefined }],
      keys: [],
      deletedAccounts: [],
      deletedKeys: [],
    });
    expect(ring.findById('key_base')?.limits).toBeUndefined();
    expect(ring.findById('key_layer')?.limits).toBeUndefined();
  });
});
