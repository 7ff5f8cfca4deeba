import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  ConfigurationError,
  FileKeyStore,
  generateKey,
  KeyRing,
  PERMISSIONS,
  sha256,
  tollgate,
} from '../../lib';
import { permissionNames } from '../../lib/model/permissions';

/**
 * Restricted keys: the vocabulary, a key's `permissions` in a keys document, and the
 * options that declare more names. The decisions themselves are tested through every door in
 * test/integration/permissions*.test.ts.
 */

const SOURCE = 'keys.json';

function documentWith(permissions: unknown, present = true): unknown {
  return {
    accounts: [
      {
        id: 'acct_p',
        keys: [
          { id: 'key_open', ...entry() },
          { id: 'key_p', ...entry(), ...(present ? { permissions } : {}) },
        ],
      },
    ],
  };
}

function entry(): { publishableKey: string; secretKeySha256: string } {
  return {
    publishableKey: generateKey('publishable'),
    secretKeySha256: sha256(generateKey('secret')).toString('hex'),
  };
}

function loadError(document: unknown, permissions?: readonly string[]): string {
  try {
    KeyRing.fromDocument(document, SOURCE, permissions === undefined ? {} : { permissions });
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return (error as Error).message;
  }
  throw new Error('the document was accepted');
}

describe('the permission vocabulary', () => {
  it('holds the seven built-in names', () => {
    expect(PERMISSIONS).toEqual([
      'wallets:read',
      'transactions:read',
      'payments:read',
      'payouts:write',
      'payouts:approve',
      'otp:confirm',
      'chargebacks:write',
    ]);
    expect(permissionNames(undefined, 'x')).toBe(PERMISSIONS);
  });

  it('takes extra names after the seven, in the order given', () => {
    expect(permissionNames(['reports:read', 'refunds:write'], 'x').slice(7)).toEqual([
      'reports:read',
      'refunds:write',
    ]);
  });

  it.each([
    [['Reports:read'], /permission "Reports:read" must be resource:action/],
    [['reports'], /permission "reports" must be resource:action/],
    [[42], /permission 42 must be resource:action/],
    [['wallets:read'], /permission "wallets:read" is listed twice/],
    [['a:b', 'a:b'], /permission "a:b" is listed twice/],
    [
      ['a:a', 'a:b', 'a:c', 'a:d', 'a:e', 'a:f', 'a:g', 'a:h', 'a:i', 'a:j'],
      /17 permissions with the 7 built-in ones; at most 16/,
    ],
  ])('refuses %j, naming the fault', (extra, message) => {
    expect(() => permissionNames(extra as string[], 'tollgate()')).toThrow(message);
  });

  it('takes exactly 16 names in all', () => {
    const nine = ['a:a', 'a:b', 'a:c', 'a:d', 'a:e', 'a:f', 'a:g', 'a:h', 'a:i'];
    expect(permissionNames(nine, 'x')).toHaveLength(16);
  });
});

describe('permissions on a key in a keys document', () => {
  it('reads a list as a set, and null or no field as no restriction', () => {
    const ring = KeyRing.fromDocument(documentWith(['payouts:write', 'wallets:read']), SOURCE);
    expect([...(ring.findById('key_p')?.permissions ?? [])].sort()).toEqual([
      'payouts:write',
      'wallets:read',
    ]);
    expect(ring.findById('key_open')?.permissions).toBeUndefined();
    expect(
      KeyRing.fromDocument(documentWith(null), SOURCE).findById('key_p')?.permissions,
    ).toBeUndefined();
    expect(
      KeyRing.fromDocument(documentWith(undefined, false), SOURCE).findById('key_p')?.permissions,
    ).toBeUndefined();
  });

  it.each([
    [
      ['wallets:read', 'payouts:send'],
      'keys.json: accounts[0].keys[1].permissions[1]: key "key_p": unknown permission "payouts:send"; expected one of wallets:read, transactions:read, payments:read, payouts:write, payouts:approve, otp:confirm, chargebacks:write',
    ],
    [
      'wallets:read',
      'keys.json: accounts[0].keys[1].permissions: key "key_p": must be a list of permission names, or null for no restriction',
    ],
    [
      { 'wallets:read': true },
      'keys.json: accounts[0].keys[1].permissions: key "key_p": must be a list of permission names, or null for no restriction',
    ],
    [
      ['wallets:read', 'wallets:read'],
      'keys.json: accounts[0].keys[1].permissions[1]: key "key_p": permission "wallets:read" is listed twice',
    ],
    [
      [],
      'keys.json: accounts[0].keys[1].permissions: key "key_p": an empty list would allow nothing; revoke the key instead, or null for no restriction',
    ],
    [
      [7],
      'keys.json: accounts[0].keys[1].permissions[0]: key "key_p": unknown permission 7; expected one of',
    ],
  ])('refuses %j with a load error naming the key and the name', (permissions, message) => {
    expect(loadError(documentWith(permissions))).toContain(message);
  });

  it('takes the names a permissions option declares, and only those', () => {
    const ring = KeyRing.fromDocument(documentWith(['reports:read']), SOURCE, {
      permissions: ['reports:read'],
    });
    expect([...(ring.findById('key_p')?.permissions ?? [])]).toEqual(['reports:read']);
    expect(loadError(documentWith(['reports:read']))).toContain(
      'unknown permission "reports:read"',
    );
  });

  it('loads the same through the ring worker of a FileKeyStore, extra names included', async () => {
    const folder = mkdtempSync(path.join(tmpdir(), 'tollgate-permissions-'));
    try {
      const file = path.join(folder, 'keys.json');
      writeFileSync(file, JSON.stringify(documentWith(['reports:read', 'wallets:read'])));
      const store = await FileKeyStore.load(file, { permissions: ['reports:read'] });
      expect([...(store.findById('key_p')?.permissions ?? [])]).toEqual([
        'wallets:read',
        'reports:read',
      ]);
      await expect(FileKeyStore.load(file)).rejects.toThrow(
        /accounts\[0\]\.keys\[1\]\.permissions\[0\]: key "key_p": unknown permission "reports:read"/,
      );
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
});

describe('the permission of a route', () => {
  const keyStore = KeyRing.fromDocument(documentWith(null), SOURCE);
  const scopes = { orders: { limit: 10 } };

  it('must be a declared permission', () => {
    const gate = tollgate({ keyStore, scopes });
    try {
      expect(() =>
        gate.protect({ accept: ['secret'], limit: 'orders', permission: 'orders:read' }),
      ).toThrow(
        'protect("orders") permission: unknown permission "orders:read"; declared: wallets:read',
      );
      expect(() =>
        gate.protect({ accept: ['secret'], limit: 'orders', permission: 'wallets:read' }),
      ).not.toThrow();
    } finally {
      gate.close();
    }
  });

  it('may be one the permissions option declares, when the key store knows it too', () => {
    const store = KeyRing.fromDocument(documentWith(null), SOURCE, {
      permissions: ['orders:read'],
    });
    const gate = tollgate({ keyStore: store, scopes, permissions: ['orders:read'] });
    try {
      expect(() =>
        gate.protect({ accept: ['secret'], limit: 'orders', permission: 'orders:read' }),
      ).not.toThrow();
    } finally {
      gate.close();
    }
    expect(() => tollgate({ keyStore, scopes, permissions: ['orders:read'] })).toThrow(
      'tollgate: keyStore permissions: the store does not know "orders:read"; give it the same permissions option as tollgate()',
    );
  });
});
