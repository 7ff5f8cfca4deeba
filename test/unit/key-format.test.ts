import {
  generateKey,
  KEY_MAX_LENGTH,
  KEY_MIN_LENGTH,
  type KeyEnvironment,
  keyPrefixType,
  keyShape,
  type KeyType,
} from '../../lib/model/key-format';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const CHECKSUM_LENGTH = 6;

/** Replaces the character at `index` with another base62 character, keeping the typed shape. */
function flip(value: string, index: number): string {
  const current = value.charAt(index);
  const replacement = BASE62.charAt((BASE62.indexOf(current) + 1) % BASE62.length);
  return value.slice(0, index) + replacement + value.slice(index + 1);
}

describe('generateKey', () => {
  it.each([
    ['secret', 'test', /^sk_test_[0-9A-Za-z]{32}_[0-9A-Za-z]{6}$/],
    ['secret', 'live', /^sk_live_[0-9A-Za-z]{32}_[0-9A-Za-z]{6}$/],
    ['publishable', 'test', /^pk_test_[0-9A-Za-z]{32}_[0-9A-Za-z]{6}$/],
    ['publishable', 'live', /^pk_live_[0-9A-Za-z]{32}_[0-9A-Za-z]{6}$/],
  ] as [KeyType, KeyEnvironment, RegExp][])(
    'makes a %s %s key of the typed shape',
    (type, environment, pattern) => {
      const key = generateKey(type, environment);
      expect(key).toMatch(pattern);
      expect(keyShape(key)).toBe('typed');
      expect(keyPrefixType(key)).toBe(type);
    },
  );

  it('makes test keys by default', () => {
    expect(generateKey('secret')).toMatch(/^sk_test_/);
  });

  it('never repeats a key in 1000 draws', () => {
    const keys = Array.from({ length: 1000 }, (_, i) =>
      generateKey(i % 2 === 0 ? 'secret' : 'publishable'),
    );
    expect(new Set(keys).size).toBe(1000);
    const bodies = keys.map((key) => key.slice(8, 40));
    expect(new Set(bodies).size).toBe(1000);
  });
});

describe('keyShape', () => {
  const key = generateKey('secret', 'live');
  const checksumStart = key.length - CHECKSUM_LENGTH;

  it.each([
    ['the first checksum character', checksumStart],
    ['the last checksum character', key.length - 1],
    ['the first body character', 'sk_live_'.length],
    ['the last body character', checksumStart - 2],
  ])('calls a typed key with %s changed corrupt', (_what, index) => {
    const changed = flip(key, index);
    expect(changed).not.toBe(key);
    expect(changed).toHaveLength(key.length);
    expect(keyShape(changed)).toBe('corrupt');
  });

  it('calls a typed key with its environment changed corrupt (the checksum covers the prefix)', () => {
    expect(keyShape(key.replace('sk_live_', 'sk_test_'))).toBe('corrupt');
  });

  it.each([
    ['legacy-publishable-0123456789'],
    ['legacy.secret/0123456789+ABCDEF='],
    ['x'.repeat(KEY_MIN_LENGTH)],
    ['~'.repeat(KEY_MAX_LENGTH)],
    [`${key}x`],
    [`sk_prod_${key.slice(8)}`],
    [key.replace(/_([0-9A-Za-z]{6})$/, '-$1')],
  ])('calls %p, well-formed but not of the typed shape, opaque', (value) => {
    expect(keyShape(value)).toBe('opaque');
  });

  it.each([
    ['19 characters', 'x'.repeat(KEY_MIN_LENGTH - 1)],
    ['201 characters', 'x'.repeat(KEY_MAX_LENGTH + 1)],
    ['a space', `${'x'.repeat(15)} ${'x'.repeat(15)}`],
    ['a tab', `${'x'.repeat(15)}\t${'x'.repeat(15)}`],
    ['a non-ASCII character', `${'x'.repeat(15)}é${'x'.repeat(15)}`],
    ['a control character', `${'x'.repeat(15)}\u0000${'x'.repeat(15)}`],
    ['nothing', ''],
    ['a typed key with a trailing newline', `${key}\n`],
  ])('calls a value with %s malformed', (_what, value) => {
    expect(keyShape(value)).toBe('malformed');
  });
});

describe('keyPrefixType', () => {
  it.each([
    ['sk_anything', 'secret'],
    ['pk_anything', 'publishable'],
    ['SK_anything', undefined],
    ['rk_anything', undefined],
    ['legacy-publishable-0123456789', undefined],
    ['', undefined],
  ])('reads %p as %p', (value, expected) => {
    expect(keyPrefixType(value)).toBe(expected);
  });
});
