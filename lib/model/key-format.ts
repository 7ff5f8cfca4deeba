import { randomBytes } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * The shape of API keys. Any opaque string of 20 to 200 printable ASCII characters without spaces
 * is a key; keys made by `generateKey()` also carry a typed prefix and a checksum:
 *
 *     sk_live_<32 base62 characters>_<6 base62 characters of CRC-32>
 *
 * A value of that exact shape whose checksum is wrong is a typo or a forgery, refused before any
 * lookup. Keys of other shapes (made by other tools) are looked up as they are.
 */

export type KeyType = 'secret' | 'publishable';
export type KeyEnvironment = 'live' | 'test';

export const KEY_MIN_LENGTH = 20;
export const KEY_MAX_LENGTH = 200;

const KEY_PATTERN = /^[\x21-\x7e]{20,200}$/;
const TYPED_KEY_PATTERN = /^(sk|pk)_(live|test)_([0-9A-Za-z]{32})_([0-9A-Za-z]{6})$/;
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

export type KeyShape =
  /** Not a key at all: wrong length or characters. */
  | 'malformed'
  /** Made by `generateKey()` and intact. */
  | 'typed'
  /** Has the typed shape but a wrong checksum. */
  | 'corrupt'
  /** Any other well-formed key. */
  | 'opaque';

export function keyShape(value: string): KeyShape {
  if (!KEY_PATTERN.test(value)) return 'malformed';
  const typed = TYPED_KEY_PATTERN.exec(value);
  if (typed === null) return 'opaque';
  const body = value.slice(0, value.length - 7);
  return typed[4] === checksum(body) ? 'typed' : 'corrupt';
}

/** True when `value` can be a key at all: well-formed, and intact if it has the typed shape. */
export function isPlausibleKey(value: string): boolean {
  const shape = keyShape(value);
  return shape === 'typed' || shape === 'opaque';
}

/** The type a key's prefix announces, when it has one (`sk_…`, `pk_…`). */
export function keyPrefixType(value: string): KeyType | undefined {
  if (value.startsWith('sk_')) return 'secret';
  if (value.startsWith('pk_')) return 'publishable';
  return undefined;
}

export function generateKey(type: KeyType, environment: KeyEnvironment = 'test'): string {
  const prefix = `${type === 'secret' ? 'sk' : 'pk'}_${environment}_`;
  const body = prefix + randomBase62(32);
  return `${body}_${checksum(body)}`;
}

function checksum(body: string): string {
  return toBase62(crc32(body), 6);
}

function toBase62(value: number, width: number): string {
  let rest = value;
  let out = '';
  for (let i = 0; i < width; i++) {
    out = BASE62.charAt(rest % 62) + out;
    rest = Math.floor(rest / 62);
  }
  return out;
}

/** Uniform base62 by rejection sampling (bytes >= 248 are dropped, so no character is favoured). */
function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248 && out.length < length) out += BASE62.charAt(byte % 62);
    }
  }
  return out;
}
