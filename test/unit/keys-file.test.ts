import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigurationError } from '../../lib/errors';
import { generateKey } from '../../lib/model/key-format';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import { parseKeysDocument } from '../../lib/keys/keys-file';
import { PackedKeyRing } from '../../lib/keys/packed-key-ring';
import { buildRingHere } from '../../lib/keys/ring-sources';

const SOURCE = '/etc/tollgate/keys.json';

interface KeyEntry {
  id: string;
  publishableKey: string;
  secretKeySha256: string;
  role?: unknown;
  revoked?: unknown;
  [field: string]: unknown;
}
interface AccountEntry {
  id: string;
  ipWhitelist?: unknown;
  keys: KeyEntry[];
  [field: string]: unknown;
}
interface Document {
  accounts: AccountEntry[];
}

function keyEntry(id: string, role?: string): KeyEntry {
  return {
    id,
    publishableKey: generateKey('publishable'),
    secretKeySha256: sha256(generateKey('secret')).toString('hex'),
    ...(role === undefined ? {} : { role }),
  };
}

/** The documented example keys file plus a second account with two keys. */
function validDocument(): Document {
  return {
    accounts: [
      {
        id: 'acct_demo',
        ipWhitelist: ['203.0.113.0/24', '2001:db8::/32', '127.0.0.1'],
        keys: [keyEntry('key_owner', 'administrator')],
      },
      { id: 'acct_other', keys: [keyEntry('key_a', 'level-1'), keyEntry('key_b', 'level-3')] },
    ],
  };
}

function account(document: Document, index: number): AccountEntry {
  const found = document.accounts[index];
  if (found === undefined) throw new Error(`no account ${index}`);
  return found;
}

function key(document: Document, accountIndex: number, keyIndex: number): KeyEntry {
  const found = account(document, accountIndex).keys[keyIndex];
  if (found === undefined) throw new Error(`no key ${accountIndex}/${keyIndex}`);
  return found;
}

function loadError(document: unknown): ConfigurationError {
  try {
    KeyRing.fromDocument(document, SOURCE);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return error as ConfigurationError;
  }
  throw new Error('the document was accepted');
}

describe('KeyRing.fromDocument', () => {
  it('accepts the documented example shape', () => {
    const document = validDocument();
    const ring = KeyRing.fromDocument(document, SOURCE);
    expect(ring.records).toHaveLength(3);
    const owner = ring.findById('key_owner');
    expect(owner).toMatchObject({
      id: 'key_owner',
      accountId: 'acct_demo',
      role: 'administrator',
      publishableKey: key(document, 0, 0).publishableKey,
      revoked: false,
    });
    expect(owner?.secretKeySha256.toString('hex')).toBe(key(document, 0, 0).secretKeySha256);
    expect(owner?.ipWhitelist?.entries()).toEqual([
      '203.0.113.0/24',
      '2001:db8::/32',
      '127.0.0.1/32',
    ]);
    expect(ring.findById('key_a')).toMatchObject({
      accountId: 'acct_other',
      role: 'level-1',
      ipWhitelist: undefined,
    });
  });

  it('gives a key without a role the owner role, administrator', () => {
    const document = validDocument();
    delete key(document, 1, 0).role;
    expect(KeyRing.fromDocument(document, SOURCE).findById('key_a')?.role).toBe('administrator');
  });

  it.each([
    ['revoked: true', true, true],
    ['revoked: false', false, false],
  ])('reads %s', (_what, value, expected) => {
    const document = validDocument();
    key(document, 1, 1).revoked = value;
    expect(KeyRing.fromDocument(document, SOURCE).findById('key_b')?.revoked).toBe(expected);
  });

  it('accepts keys of other tools (opaque shape)', () => {
    const document = validDocument();
    key(document, 1, 0).publishableKey = 'legacy-publishable-0123456789';
    expect(
      KeyRing.fromDocument(document, SOURCE).findByPublishableKey('legacy-publishable-0123456789')
        ?.id,
    ).toBe('key_a');
  });

  type Case = [string, (document: Document) => void, string];
  const faults: Case[] = [
    [
      'a duplicate key id (across accounts)',
      (d) => {
        key(d, 1, 1).id = 'key_owner';
      },
      'accounts[1].keys[1].id: duplicate key id "key_owner"',
    ],
    [
      'a duplicate publishable key',
      (d) => {
        key(d, 1, 1).publishableKey = key(d, 0, 0).publishableKey;
      },
      'accounts[1].keys[1].publishableKey: duplicate publishable key',
    ],
    [
      'a duplicate secret digest',
      (d) => {
        key(d, 1, 0).secretKeySha256 = key(d, 0, 0).secretKeySha256;
      },
      'accounts[1].keys[0].secretKeySha256: duplicate secret key',
    ],
    [
      'a duplicate account id',
      (d) => {
        account(d, 1).id = 'acct_demo';
      },
      'accounts[1].id: duplicate account id "acct_demo"',
    ],
    [
      'an unknown role',
      (d) => {
        key(d, 1, 1).role = 'superuser';
      },
      'accounts[1].keys[1].role: unknown role "superuser"; expected one of level-1, level-2, level-3, administrator',
    ],
    [
      'a role in the wrong case',
      (d) => {
        key(d, 1, 1).role = 'Administrator';
      },
      'accounts[1].keys[1].role: unknown role "Administrator"',
    ],
    [
      'an empty ipWhitelist',
      (d) => {
        account(d, 0).ipWhitelist = [];
      },
      'accounts[0].ipWhitelist: is empty',
    ],
    [
      'an ipWhitelist that is not a list',
      (d) => {
        account(d, 0).ipWhitelist = '10.0.0.0/8';
      },
      'accounts[0].ipWhitelist: must be an array',
    ],
    [
      'an invalid whitelist entry',
      (d) => {
        account(d, 0).ipWhitelist = ['203.0.113.0/24', '10.0.0.0/33'];
      },
      'accounts[0].ipWhitelist[1] "10.0.0.0/33" has an invalid prefix length',
    ],
    [
      'a whitelist entry with host bits',
      (d) => {
        account(d, 0).ipWhitelist = ['203.0.113.1/24'];
      },
      'accounts[0].ipWhitelist[0] "203.0.113.1/24" has host bits set; did you mean 203.0.113.0/24?',
    ],
    [
      'an upper-case digest',
      (d) => {
        key(d, 0, 0).secretKeySha256 = key(d, 0, 0).secretKeySha256.toUpperCase();
      },
      'accounts[0].keys[0].secretKeySha256: must be 64 lowercase hexadecimal characters',
    ],
    [
      'a digest of 63 characters',
      (d) => {
        key(d, 0, 0).secretKeySha256 = key(d, 0, 0).secretKeySha256.slice(1);
      },
      'accounts[0].keys[0].secretKeySha256: must be 64 lowercase hexadecimal characters',
    ],
    [
      'a missing digest',
      (d) => {
        delete (key(d, 0, 0) as Partial<KeyEntry>).secretKeySha256;
      },
      'accounts[0].keys[0].secretKeySha256: must be 64 lowercase hexadecimal characters',
    ],
    [
      'a misspelt ipWhitelist ("ipWhiteList")',
      (d) => {
        account(d, 1).ipWhiteList = ['10.0.0.0/8'];
      },
      'accounts[1]: unknown field "ipWhiteList"',
    ],
    [
      'an unknown key field',
      (d) => {
        key(d, 1, 0).secretKey = 'sk_plain_text_secret_0000';
      },
      'accounts[1].keys[0]: unknown field "secretKey"',
    ],
    [
      'an unknown top-level field',
      (d) => {
        (d as unknown as Record<string, unknown>).version = 2;
      },
      'the document: unknown field "version"',
    ],
    [
      'revoked that is not a boolean',
      (d) => {
        key(d, 0, 0).revoked = 'yes';
      },
      'accounts[0].keys[0].revoked: must be true or false',
    ],
    [
      'a publishable key that is an sk_ key',
      (d) => {
        key(d, 0, 0).publishableKey = generateKey('secret');
      },
      'accounts[0].keys[0].publishableKey: is a secret key (sk_ prefix)',
    ],
    [
      'a typed publishable key with a wrong checksum',
      (d) => {
        const pk = key(d, 0, 0).publishableKey;
        key(d, 0, 0).publishableKey = pk.slice(0, -1) + (pk.endsWith('0') ? '1' : '0');
      },
      'accounts[0].keys[0].publishableKey: has a wrong checksum',
    ],
    [
      'a publishable key that is too short',
      (d) => {
        key(d, 0, 0).publishableKey = 'pk_short';
      },
      'accounts[0].keys[0].publishableKey: must be 20 to 200 printable ASCII characters',
    ],
    [
      'a publishable key that is not a string',
      (d) => {
        key(d, 0, 0).publishableKey = 42 as unknown as string;
      },
      'accounts[0].keys[0].publishableKey: must be a string',
    ],
    [
      'a key id with a space',
      (d) => {
        key(d, 0, 0).id = 'key owner';
      },
      'accounts[0].keys[0].id: must be 1 to 64 characters',
    ],
    [
      'an account without keys',
      (d) => {
        account(d, 1).keys = [];
      },
      'accounts[1].keys: must be a non-empty array',
    ],
    [
      'a key that is not an object',
      (d) => {
        account(d, 1).keys = ['key_a' as unknown as KeyEntry];
      },
      'accounts[1].keys[0]: must be an object',
    ],
    [
      'no accounts',
      (d) => {
        d.accounts = [];
      },
      'accounts: must be a non-empty array',
    ],
  ];

  it.each(faults)('refuses %s, naming the file and the path', (_what, mutate, expected) => {
    const document = validDocument();
    mutate(document);
    const message = loadError(document).message;
    expect(message.startsWith(`${SOURCE}: ${expected}`)).toBe(true);
  });

  it.each([[null], [[]], ['{}'], [42]])('refuses a document that is %p', (document) => {
    expect(loadError(document).message).toBe(`${SOURCE}: the document: must be an object`);
  });

  describe('read from a file, one account at a time', () => {
    let directory: string;
    beforeAll(async () => {
      directory = await mkdtemp(join(tmpdir(), 'tollgate-keys-file-'));
    });
    afterAll(async () => {
      await rm(directory, { recursive: true, force: true });
    });

    const VALID_ACCOUNT = JSON.stringify(validDocument().accounts[1]);

    /** The message the streamed file build refuses `text` with (the ring worker's own path). */
    async function fileError(text: string): Promise<string> {
      const path = join(directory, 'keys.json');
      await writeFile(path, text);
      try {
        await buildRingHere({ kind: 'file', path });
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigurationError);
        const message = (error as Error).message;
        return message.replace(message.startsWith('keys') ? `keys file ${path}` : path, 'FILE');
      }
      throw new Error('the file was accepted');
    }

    it.each(faults)('refuses %s, as the document rules do', async (_what, mutate, expected) => {
      const document = validDocument();
      mutate(document);
      expect(
        (await fileError(JSON.stringify(document, null, 2))).startsWith(`FILE: ${expected}`),
      ).toBe(true);
    });

    it.each([
      ['null', 'the document: must be an object'],
      ['[]', 'the document: must be an object'],
      ['"{}"', 'the document: must be an object'],
      ['42', 'the document: must be an object'],
      ['{}', 'accounts: must be a non-empty array'],
      ['{"accounts": []}', 'accounts: must be a non-empty array'],
      ['{"accounts": {}}', 'accounts: must be a non-empty array'],
      ['{"accounts": null}', 'accounts: must be a non-empty array'],
      ['{"accounts": [1]}', 'accounts[0]: must be an object'],
      ['{"acounts": [1]}', 'the document: unknown field "acounts" (expected accounts)'],
      [
        `{"accounts": [${VALID_ACCOUNT}], "accounts": [${VALID_ACCOUNT}]}`,
        'the document: duplicate field "accounts"',
      ],
      ['', 'is not valid JSON'],
      ['{"accounts": [', 'is not valid JSON'],
      [`{"accounts": [${VALID_ACCOUNT},]}`, 'is not valid JSON'],
      [`{"accounts": [${VALID_ACCOUNT}] x`, 'is not valid JSON'],
      [`{"accounts": [${VALID_ACCOUNT}]`, 'is not valid JSON'],
      [`{"accounts": [${VALID_ACCOUNT} ${VALID_ACCOUNT}]}`, 'is not valid JSON'],
      ['\ufeff{"accounts": []}', 'is not valid JSON'],
    ])('refuses %j: %s', async (text, expected) => {
      expect(await fileError(text)).toBe(`FILE: ${expected}`);
    });

    it('builds the same keys as the document gives, whatever the layout', async () => {
      const document = validDocument();
      const records = parseKeysDocument(document, SOURCE);
      for (const layout of [JSON.stringify(document), JSON.stringify(document, null, '\t')]) {
        const path = join(directory, 'layout.json');
        await writeFile(path, layout);
        const ring = new PackedKeyRing((await buildRingHere({ kind: 'file', path })).table);
        for (const record of records) expect(ring.findById(record.id)).toEqual(record);
        expect(ring.size).toBe(records.length);
      }
    });
  });

  it('never puts a digest of another key into the message', () => {
    const document = validDocument();
    key(document, 1, 0).secretKeySha256 = key(document, 0, 0).secretKeySha256;
    expect(loadError(document).message).not.toContain(key(document, 0, 0).secretKeySha256);
  });

  it('parseKeysDocument returns one record per key, in file order', () => {
    expect(parseKeysDocument(validDocument(), SOURCE).map((record) => record.id)).toEqual([
      'key_owner',
      'key_a',
      'key_b',
    ]);
  });
});

describe('expiresAt on a key', () => {
  it.each([
    ['2026-12-31T23:59:59Z', Date.UTC(2026, 11, 31, 23, 59, 59)],
    ['2026-12-31T23:59:59.250Z', Date.UTC(2026, 11, 31, 23, 59, 59, 250)],
    ['2027-01-01T01:59:59+02:00', Date.UTC(2026, 11, 31, 23, 59, 59)],
    ['2028-02-29t00:00:00z', Date.UTC(2028, 1, 29)],
  ])('reads %s as an instant', (text, expected) => {
    const document = validDocument();
    key(document, 0, 0).expiresAt = text;
    expect(parseKeysDocument(document, SOURCE)[0]?.expiresAt).toBe(expected);
  });

  it('leaves a key without expiresAt without a deadline', () => {
    expect(parseKeysDocument(validDocument(), SOURCE)[0]?.expiresAt).toBeUndefined();
  });

  it.each([
    ['no zone', '2026-12-31T23:59:59'],
    ['a date only', '2026-12-31'],
    ['a day the month does not have', '2026-02-30T00:00:00Z'],
    ['April 31', '2026-04-31T00:00:00Z'],
    ['hour 24', '2026-12-31T24:00:00Z'],
    ['a number', 1798761599000],
    ['spaces', ' 2026-12-31T23:59:59Z'],
    ['a word', 'tomorrow'],
  ])('refuses %s, naming the entry', (_what, value) => {
    const document = validDocument();
    key(document, 1, 1).expiresAt = value;
    expect(loadError(document).message).toBe(
      `${SOURCE}: accounts[1].keys[1].expiresAt: must be an RFC 3339 time with a zone, e.g. "2026-12-31T23:59:59Z"`,
    );
  });
});
