import { generateKey } from '../../lib/model/key-format';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import type { Role } from '../../lib/model/roles';

/**
 * Test accounts and keys, made fresh for each test file. Secrets exist only here: the key ring
 * holds their digests, as the keys file would.
 *
 * - `acct_open`: no whitelist, one key per role, plus a revoked key and a key of another tool's shape;
 * - `acct_walled`: whitelist 127.0.0.2, 127.0.10.0/24 and 2001:db8::/32 (loopback clients can bind
 *   127.0.0.2 / 127.0.10.x as their source address, so whitelists are tested with real addresses).
 */

export interface TestKey {
  readonly id: string;
  readonly accountId: string;
  readonly role: Role;
  readonly publishableKey: string;
  readonly secretKey: string;
  readonly revoked?: boolean;
}

function typedKey(
  id: string,
  accountId: string,
  role: Role,
  extra: Partial<TestKey> = {},
): TestKey {
  return {
    id,
    accountId,
    role,
    publishableKey: generateKey('publishable', 'test'),
    secretKey: generateKey('secret', 'test'),
    ...extra,
  };
}

/** A key's entry in the keys file: the secret's digest, never the secret. */
function entry(key: TestKey, withRole = true) {
  return {
    id: key.id,
    publishableKey: key.publishableKey,
    secretKeySha256: sha256(key.secretKey).toString('hex'),
    ...(withRole ? { role: key.role } : {}),
    ...(key.revoked === true ? { revoked: true } : {}),
  };
}

export function createFixtures() {
  const keys = {
    level1: typedKey('key_l1', 'acct_open', 'level-1'),
    level2: typedKey('key_l2', 'acct_open', 'level-2'),
    level3: typedKey('key_l3', 'acct_open', 'level-3'),
    admin: typedKey('key_admin', 'acct_open', 'administrator'),
    revoked: typedKey('key_revoked', 'acct_open', 'administrator', { revoked: true }),
    foreign: {
      id: 'key_foreign',
      accountId: 'acct_open',
      role: 'level-2',
      publishableKey: 'legacy-publishable-0123456789',
      secretKey: 'legacy.secret/0123456789+ABCDEF=',
    },
    walled: typedKey('key_walled', 'acct_walled', 'administrator'),
  } satisfies Record<string, TestKey>;

  const document = {
    accounts: [
      {
        id: 'acct_open',
        keys: [keys.level1, keys.level2, keys.level3, keys.admin, keys.revoked, keys.foreign].map(
          (key) => entry(key),
        ),
      },
      {
        id: 'acct_walled',
        ipWhitelist: ['127.0.0.2', '127.0.10.0/24', '2001:db8::/32'],
        keys: [entry(keys.walled, false)],
      },
    ],
  };
  return { keys, document, ring: KeyRing.fromDocument(document, 'test fixtures') };
}

export type Fixtures = ReturnType<typeof createFixtures>;

/**
 * `fixtures` with one more key in its account (`key.accountId`, which must exist), in a new ring:
 * for keys of a shape the fixtures do not hold. `keys` and `allSecrets()` do not list it.
 */
export function withExtraKey(fixtures: Fixtures, key: TestKey): Fixtures {
  if (!fixtures.document.accounts.some((account) => account.id === key.accountId)) {
    throw new Error(`withExtraKey: no account ${key.accountId} in the fixtures`);
  }
  const document = {
    accounts: fixtures.document.accounts.map((account) =>
      account.id === key.accountId ? { ...account, keys: [...account.keys, entry(key)] } : account,
    ),
  };
  return { ...fixtures, document, ring: KeyRing.fromDocument(document, 'test fixtures') };
}

/** Every secret of the fixtures, to assert none ever appears in a response or a log line. */
export function allSecrets(fixtures: Fixtures): string[] {
  return Object.values(fixtures.keys).map((key) => key.secretKey);
}

export const TOKEN_SECRET = 'test-token-secret-0123456789-abcdefghijklmnop';

/** `key` with its last character changed: never the key itself, whatever that character is. */
export function withLastCharacterChanged(key: string): string {
  return `${key.slice(0, -1)}${key.endsWith('x') ? 'y' : 'x'}`;
}
