import fc from 'fast-check';
import { IpWhitelist } from '../../lib/model/ip-whitelist';
import { ROLES, type Role } from '../../lib/model/roles';
import { sha256 } from '../../lib/keys/key-digest';
import type { KeyRecord } from '../../lib/model/key-record';
import { PackedTableBuilder } from '../../lib/keys/packed-builder';
import { PackedKeyRing } from '../../lib/keys/packed-key-ring';
import { permissionMask, permissionNames } from '../../lib/model/permissions';
import { MessageChannel } from 'node:worker_threads';
import { type PackedTable, transferList } from '../../lib/keys/packed-table';

/**
 * The packed ring against a plain `Map` of records as the oracle: whatever accounts and keys go
 * in, every lookup answers what the map answers, and the listing is the keys in order.
 */

const LISTS = [undefined, ['127.0.0.1'], ['10.0.0.0/8', '2001:db8::/32'], 'blocked'] as const;

interface AccountSpec {
  readonly id: string;
  readonly list: (typeof LISTS)[number];
  readonly keys: readonly {
    readonly id: string;
    readonly publishableKey: string;
    readonly secret: string;
    readonly role: Role;
    readonly revoked: boolean;
    readonly expiresAt: number | undefined;
  }[];
}

const idArb = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,9}$/);
const keyArb = fc.record({
  id: idArb,
  publishableKey: fc.stringMatching(/^pk_[!-~]{17,40}$/),
  secret: fc.string({ minLength: 1, maxLength: 30 }),
  role: fc.constantFrom(...ROLES),
  revoked: fc.boolean(),
  expiresAt: fc.option(fc.integer({ min: 0, max: 4_000_000_000_000 }), { nil: undefined }),
});
const accountsArb = fc
  .array(
    fc.record({
      id: idArb,
      list: fc.constantFrom(...LISTS),
      keys: fc.array(keyArb, { minLength: 1, maxLength: 4 }),
    }),
    { maxLength: 12 },
  )
  .map((accounts) => unique(accounts));

/** Drops accounts and keys whose id, publishable key or secret was already used. */
function unique(accounts: AccountSpec[]): AccountSpec[] {
  const seen = new Set<string>();
  const fresh = (value: string): boolean => !seen.has(value) && Boolean(seen.add(value));
  return accounts
    .filter((account) => fresh(`a:${account.id}`))
    .map((account) => ({
      ...account,
      keys: account.keys.filter(
        (key) =>
          fresh(`k:${key.id}`) && fresh(`p:${key.publishableKey}`) && fresh(`s:${key.secret}`),
      ),
    }))
    .filter((account) => account.keys.length > 0);
}

function build(accounts: readonly AccountSpec[]): {
  ring: PackedKeyRing;
  oracle: Map<string, KeyRecord>;
} {
  const builder = new PackedTableBuilder();
  const oracle = new Map<string, KeyRecord>();
  for (const account of accounts) {
    const index = builder.addAccount(account.id, account.list);
    const whitelist =
      account.list === undefined || account.list === 'blocked'
        ? undefined
        : IpWhitelist.parse(account.list);
    for (const key of account.keys) {
      const digest = sha256(key.secret);
      builder.addKey(index, { ...key, secretKeySha256: digest });
      oracle.set(key.id, {
        id: key.id,
        accountId: account.id,
        role: key.role,
        publishableKey: key.publishableKey,
        secretKeySha256: digest,
        revoked: key.revoked || account.list === 'blocked',
        expiresAt: key.expiresAt,
        ipWhitelist: whitelist,
      });
    }
  }
  return { ring: new PackedKeyRing(builder.build()), oracle };
}

/** A record as plain data: whitelists by their entries. */
function plain(record: KeyRecord | undefined): unknown {
  if (record === undefined) return undefined;
  return {
    ...record,
    secretKeySha256: Buffer.from(record.secretKeySha256).toString('hex'),
    ipWhitelist: record.ipWhitelist?.entries(),
    expiresAt: record.expiresAt,
  };
}

describe('PackedKeyRing against a Map', () => {
  it('answers every lookup as the map does, and lists the keys in order', () => {
    fc.assert(
      fc.property(accountsArb, fc.string({ maxLength: 30 }), (accounts, stranger) => {
        const { ring, oracle } = build(accounts);
        expect(ring.size).toBe(oracle.size);
        expect([...ring.records()].map(plain)).toEqual([...oracle.values()].map(plain));
        const secrets = accounts.flatMap((account) => account.keys.map((key) => key.secret));
        for (const account of accounts) {
          for (const key of account.keys) {
            const expected = plain(oracle.get(key.id));
            expect(plain(ring.findBySecretKey(key.secret))).toEqual(expected);
            expect(plain(ring.findById(key.id))).toEqual(expected);
            expect(plain(ring.findByPublishableKey(key.publishableKey))).toEqual(expected);
            expect(plain(ring.findByKeyPair(key.publishableKey, key.secret))).toEqual(expected);
            const other = secrets.find((secret) => secret !== key.secret);
            if (other !== undefined) {
              expect(ring.findByKeyPair(key.publishableKey, other)).toBeUndefined();
            }
            expect(ring.findByKeyPair(`${key.publishableKey}x`, key.secret)).toBeUndefined();
          }
          expect(ring.indexOfAccount(account.id)).toBeGreaterThanOrEqual(0);
        }
        if (!secrets.includes(stranger)) expect(ring.findBySecretKey(stranger)).toBeUndefined();
        if (!oracle.has(stranger)) expect(ring.findById(stranger)).toBeUndefined();
        expect(ring.findByPublishableKey(stranger)).toEqual(
          [...oracle.values()].find((record) => record.publishableKey === stranger) === undefined
            ? undefined
            : expect.anything(),
        );
      }),
      { numRuns: 200 },
    );
  });

  it('lists the keys of each account', () => {
    fc.assert(
      fc.property(accountsArb, (accounts) => {
        const { ring } = build(accounts);
        for (const account of accounts) {
          const keys = ring.keysOfAccount(ring.indexOfAccount(account.id));
          expect([...keys].map((k) => ring.idAt(k))).toEqual(account.keys.map((key) => key.id));
        }
      }),
      { numRuns: 100 },
    );
  });
});

describe('PackedKeyRing', () => {
  const { ring } = build([
    {
      id: 'acct_a',
      list: ['10.0.0.0/8', '2001:db8::/32'],
      keys: [
        {
          id: 'key_a',
          publishableKey: 'pk_test_aaaaaaaaaaaaaaaaaaaa',
          secret: 'sk_a',
          role: 'level-1',
          revoked: false,
          expiresAt: undefined,
        },
      ],
    },
    {
      id: 'acct_b',
      list: ['10.0.0.0/8', '2001:db8::/32'],
      keys: [
        {
          id: 'key_b',
          publishableKey: 'pk_test_bbbbbbbbbbbbbbbbbbbb',
          secret: 'sk_b',
          role: 'administrator',
          revoked: false,
          expiresAt: undefined,
        },
      ],
    },
    {
      id: 'acct_blocked',
      list: 'blocked',
      keys: [
        {
          id: 'key_c',
          publishableKey: 'pk_test_cccccccccccccccccccc',
          secret: 'sk_c',
          role: 'administrator',
          revoked: false,
          expiresAt: 1_000,
        },
      ],
    },
  ]);

  it('parses a whitelist once and shares it between accounts whose lists are equal', () => {
    const a = ring.findById('key_a')?.ipWhitelist;
    expect(a).toBeInstanceOf(IpWhitelist);
    expect(ring.findById('key_b')?.ipWhitelist).toBe(a);
    expect(ring.findBySecretKey('sk_a')?.ipWhitelist).toBe(a);
  });

  it('stores each distinct whitelist once', () => {
    expect(ring.table.listOffsets).toHaveLength(2);
    expect(ring.table.accountList[1]).toBe(ring.table.accountList[0]);
  });

  it('holds the keys of an account with an invalid stored whitelist as revoked, unrestricted', () => {
    expect(ring.findById('key_c')).toMatchObject({
      revoked: true,
      ipWhitelist: undefined,
      expiresAt: 1_000,
    });
  });

  it('answers nothing from the empty ring', () => {
    expect(PackedKeyRing.EMPTY.size).toBe(0);
    expect(PackedKeyRing.EMPTY.findBySecretKey('sk_a')).toBeUndefined();
    expect(
      PackedKeyRing.EMPTY.findByKeyPair('pk_test_aaaaaaaaaaaaaaaaaaaa', 'sk_a'),
    ).toBeUndefined();
    expect([...PackedKeyRing.EMPTY.records()]).toEqual([]);
  });

  it('moves to another thread by transfer, not copy, and answers the same there', async () => {
    const { ring: moving } = build([
      {
        id: 'acct_m',
        list: ['127.0.0.1'],
        keys: [
          {
            id: 'key_m',
            publishableKey: 'pk_test_mmmmmmmmmmmmmmmmmmmm',
            secret: 'sk_m',
            role: 'level-3',
            revoked: false,
            expiresAt: undefined,
          },
        ],
      },
    ]);
    const before = plain(moving.findBySecretKey('sk_m'));
    const { port1, port2 } = new MessageChannel();
    const received = new Promise<PackedTable>((resolve) => {
      port2.once('message', resolve);
    });
    port1.postMessage(moving.table, transferList(moving.table));
    const table = await received;
    port1.close();
    expect(moving.table.digests.byteLength).toBe(0); // detached: it was moved
    expect(plain(new PackedKeyRing(table).findBySecretKey('sk_m'))).toEqual(before);
  });
});

describe('PackedKeyRing with limit overrides', () => {
  const key = (id: string) => ({
    id,
    role: 'administrator' as const,
    publishableKey: `pk_test_${id}_padding_0123456789`,
    secretKeySha256: sha256(`sk_${id}`),
    revoked: false,
  });
  const builder = new PackedTableBuilder();
  const sets: (Readonly<Record<string, number>> | undefined)[] = [
    { payments: 6000, authenticated: 300 },
    { authenticated: 300, payments: 6000 }, // the same set, written in another order
    { payments: 3 },
    undefined,
  ];
  sets.forEach((limits, a) => {
    const account = builder.addAccount(`acct_${a}`, undefined, limits);
    builder.addKey(account, key(`key_${a}_x`));
    builder.addKey(account, key(`key_${a}_y`));
  });
  const ring = new PackedKeyRing(builder.build());

  it("gives each key its account's limits", () => {
    expect(ring.findById('key_0_x')?.limits).toEqual({ authenticated: 300, payments: 6000 });
    expect(ring.findBySecretKey('sk_key_2_y')?.limits).toEqual({ payments: 3 });
    expect(ring.findById('key_3_x')?.limits).toBeUndefined();
    expect(ring.accountAt(ring.indexOfAccount('acct_2')).limits).toEqual({ payments: 3 });
  });

  it('stores each distinct set once, shared by the accounts that have it', () => {
    expect(ring.table.limitOffsets).toHaveLength(3);
    expect(ring.table.accountLimits[1]).toBe(ring.table.accountLimits[0]);
    expect([...ring.table.accountLimits]).toEqual([0, 0, 1, -1]);
  });

  it('makes one frozen object per set, once, never one per lookup', () => {
    const first = ring.findById('key_0_x')?.limits;
    expect(Object.isFrozen(first)).toBe(true);
    expect(ring.findById('key_0_y')?.limits).toBe(first);
    expect(ring.findBySecretKey('sk_key_1_x')?.limits).toBe(first);
    expect(ring.findByPublishableKey(key('key_1_y').publishableKey)?.limits).toBe(first);
    expect(ring.findById('key_2_x')?.limits).toBe(ring.findById('key_2_y')?.limits);
  });

  it('carries the limits when moved to another thread', async () => {
    const { port1, port2 } = new MessageChannel();
    const received = new Promise<PackedTable>((resolve) => {
      port2.once('message', resolve);
    });
    const copy = new PackedTableBuilder();
    copy.addAccount('acct_m', undefined, { payments: 42 });
    copy.addKey(0, key('key_m'));
    const table = copy.build();
    port1.postMessage(table, transferList(table));
    const moved = await received;
    port1.close();
    expect(table.limitText.byteLength).toBe(0); // detached: it was moved
    expect(new PackedKeyRing(moved).findById('key_m')?.limits).toEqual({ payments: 42 });
  });

  it('stays compact: 200,000 keys over 100,000 accounts, every account overridden, well under 600 B a key', () => {
    const many = new PackedTableBuilder();
    const digest = Buffer.alloc(32);
    for (let a = 0; a < 100_000; a++) {
      const account = many.addAccount(`acct_${a}`, undefined, { payments: 1000 + (a % 50) });
      for (let k = 0; k < 2; k++) {
        digest.writeUInt32BE(a * 2 + k, 0);
        many.addKey(account, {
          id: `key_${a}_${k}`,
          role: 'level-2',
          publishableKey: `pk_test_${a}_${k}_0123456789abcdef`,
          secretKeySha256: digest,
          revoked: false,
        });
      }
    }
    const table = many.build();
    const bytes = transferList(table).reduce((sum, buffer) => sum + buffer.byteLength, 0);
    const perKey = bytes / table.keyCount;
    process.stdout.write(
      `[packed-key-ring] 200,000 keys, 100,000 accounts with limits (50 distinct sets): ${perKey.toFixed(1)} B/key in the table, limit sets ${table.limitText.byteLength} B\n`,
    );
    expect(perKey).toBeLessThan(600);
    expect(table.limitOffsets).toHaveLength(51);
  });
});

describe('PackedKeyRing with restricted keys', () => {
  const names = permissionNames(['reports:read'], 'test');
  const key = (id: string, permissions: readonly string[] | undefined) => ({
    id,
    role: 'administrator' as const,
    publishableKey: `pk_test_${id}_padding_0123456789`,
    secretKeySha256: sha256(`sk_${id}`),
    revoked: false,
    permissionMask: permissions === undefined ? 0 : permissionMask(permissions, names),
  });
  const builder = new PackedTableBuilder(names);
  const account = builder.addAccount('acct_p', undefined);
  builder.addKey(account, key('key_open', undefined));
  builder.addKey(account, key('key_wallets', ['wallets:read']));
  builder.addKey(account, key('key_wallets_2', ['wallets:read']));
  builder.addKey(account, key('key_extra', ['reports:read', 'payouts:write']));
  const ring = new PackedKeyRing(builder.build());

  it("gives each key its own list, in the vocabulary's order, and none to an unrestricted key", () => {
    expect(ring.findById('key_open')?.permissions).toBeUndefined();
    expect([...(ring.findBySecretKey('sk_key_wallets')?.permissions ?? [])]).toEqual([
      'wallets:read',
    ]);
    expect([...(ring.findById('key_extra')?.permissions ?? [])]).toEqual([
      'payouts:write',
      'reports:read',
    ]);
    expect(ring.permissionNames).toEqual(names);
  });

  it('makes one set per distinct list, shared by the keys that hold it, never one per lookup', () => {
    const first = ring.findById('key_wallets')?.permissions;
    expect(ring.findById('key_wallets')?.permissions).toBe(first);
    expect(ring.findById('key_wallets_2')?.permissions).toBe(first);
    expect(
      ring.findByPublishableKey(key('key_wallets_2', undefined).publishableKey)?.permissions,
    ).toBe(first);
  });

  it('carries the lists and their vocabulary when moved to another thread', async () => {
    const { port1, port2 } = new MessageChannel();
    const received = new Promise<PackedTable>((resolve) => {
      port2.once('message', resolve);
    });
    const table = builder.build();
    port1.postMessage(table, transferList(table));
    const moved = await received;
    port1.close();
    expect([...(new PackedKeyRing(moved).findById('key_extra')?.permissions ?? [])]).toEqual([
      'payouts:write',
      'reports:read',
    ]);
  });

  it('stays compact: 200,000 keys, half of them restricted, the lists cost 2 bytes a key whatever they hold', () => {
    const build = (restricted: boolean): PackedTable => {
      const many = new PackedTableBuilder();
      const digest = Buffer.alloc(32);
      for (let a = 0; a < 100_000; a++) {
        const owner = many.addAccount(`acct_${a}`, undefined);
        for (let k = 0; k < 2; k++) {
          digest.writeUInt32BE(a * 2 + k, 0);
          many.addKey(owner, {
            id: `key_${a}_${k}`,
            role: 'level-2',
            publishableKey: `pk_test_${a}_${k}_0123456789abcdef`,
            secretKeySha256: digest,
            revoked: false,
            permissionMask: restricted && k === 1 ? 1 << (a % 7) : 0,
          });
        }
      }
      return many.build();
    };
    const perKey = (table: PackedTable): number =>
      transferList(table).reduce((sum, buffer) => sum + buffer.byteLength, 0) / table.keyCount;
    const restricted = build(true);
    const open = build(false);
    const sets = new Set(restricted.keyPermissions).size;
    process.stdout.write(
      `[packed-key-ring] 200,000 keys, 100,000 of them restricted (${sets - 1} distinct lists): ${perKey(restricted).toFixed(1)} B/key in the table, of which permissions ${(restricted.keyPermissions.byteLength / restricted.keyCount).toFixed(1)} B/key; the same keys without lists ${perKey(open).toFixed(1)} B/key\n`,
    );
    expect(restricted.keyPermissions.byteLength).toBe(2 * restricted.keyCount);
    expect(perKey(restricted)).toBeCloseTo(perKey(open), 0);
    const ring = new PackedKeyRing(restricted);
    expect(ring.findById('key_3_1')?.permissions).toBe(ring.findById('key_10_1')?.permissions);
  });
});
