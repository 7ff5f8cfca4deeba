import { OWNER_ROLE, ROLES, type Role } from '../model/roles';

/**
 * A key ring as a handful of flat arrays, built once and never changed: about 150 bytes a key
 * instead of some 2 KB of objects and maps. It is made of typed arrays only, so a worker thread
 * can build it and hand it over without a copy (`transferList(table)`), and the thread that
 * receives it has no per-key work to do: the tables below are the index.
 *
 * - `digests`: the SHA-256 of every secret, 32 bytes a key, in key order.
 * - `text`: every id and publishable key as ASCII bytes (the rules allow nothing else): a key's
 *   id then its publishable key at `keyText[k]`, `keyLengths[2k]` and `keyLengths[2k + 1]` long;
 *   an account's id at `accountText[a]`, `accountLengths[a]` long.
 * - `keyFlags[k]`: the role's rank (bits 0-1) and revoked (bit 2); `keyExpires[k]`: the deadline
 *   in ms since the epoch, NaN for none; `keyAccount[k]`: the account's index.
 * - `keyPermissions[k]`: the key's permissions as a mask over the vocabulary, bit `i`
 *   for name `i`, 0 for a key without a list (an empty list is never valid); the vocabulary's names,
 *   joined by ",", are `permissionText`, so the table says what its masks mean.
 * - `accountList[a]`: the index of the account's whitelist among the distinct lists (accounts with
 *   equal lists share one), `NO_LIST`, or `BLOCKED` (an invalid stored list: its keys are refused);
 *   list `l`'s canonical entries, joined by ",", are `listText[listOffsets[l] .. listOffsets[l+1]]`.
 * - `accountLimits[a]`: the index of the account's limit overrides among the distinct sets
 *   (accounts with equal sets share one), or `NO_LIMITS`; set `s` is its `limitsText()`
 *   (`authenticated=300,payments=6000`) at `limitText[limitOffsets[s] .. limitOffsets[s+1]]`.
 * - `accountKeys[accountKeyStart[a] .. accountKeyStart[a + 1]]`: the keys of account `a`.
 * - `bySecret`, `byPublishable`, `byId`, `byAccount`: open-addressing hash tables (linear probing,
 *   a power of two at least twice the entries) holding index + 1, 0 for an empty slot. Secrets
 *   are placed by the first four bytes of their digest, strings by FNV-1a seeded with `seed`.
 */
export interface PackedTable {
  readonly keyCount: number;
  readonly accountCount: number;
  readonly seed: number;
  readonly digests: Uint8Array;
  readonly text: Uint8Array;
  readonly keyText: Uint32Array;
  readonly keyLengths: Uint8Array;
  readonly keyFlags: Uint8Array;
  readonly keyExpires: Float64Array;
  readonly keyAccount: Uint32Array;
  readonly keyPermissions: Uint16Array;
  readonly permissionText: Uint8Array;
  readonly accountText: Uint32Array;
  readonly accountLengths: Uint8Array;
  readonly accountList: Int32Array;
  readonly accountKeyStart: Uint32Array;
  readonly accountKeys: Uint32Array;
  readonly listText: Uint8Array;
  readonly listOffsets: Uint32Array;
  readonly accountLimits: Int32Array;
  readonly limitText: Uint8Array;
  readonly limitOffsets: Uint32Array;
  readonly bySecret: Uint32Array;
  readonly byPublishable: Uint32Array;
  readonly byId: Uint32Array;
  readonly byAccount: Uint32Array;
}

export const NO_LIST = -1;
export const BLOCKED = -2;
export const NO_LIMITS = -1;
const REVOKED_FLAG = 4;

/**
 * The buffers of a table, for `postMessage(table, transferList(table))`; none of a shared table,
 * whose memory is posted as it is.
 */
export function transferList(table: PackedTable): ArrayBuffer[] {
  const buffers = new Set<ArrayBuffer>();
  for (const value of Object.values(table)) {
    if (ArrayBuffer.isView(value) && value.buffer instanceof ArrayBuffer) buffers.add(value.buffer);
  }
  return [...buffers];
}

/** The typed arrays a table is made of. */
type TableArray = Uint8Array | Uint16Array | Int32Array | Uint32Array | Float64Array;

/**
 * `table` with every array copied into one `SharedArrayBuffer`: posted to other threads, it is
 * the same memory in each, not a copy, so a host's threads serve one ring. Each array starts on an
 * 8-byte boundary, as its element type needs.
 */
export function sharedTable(table: PackedTable): PackedTable {
  const arrays = Object.entries(table).filter((entry): entry is [string, TableArray] =>
    ArrayBuffer.isView(entry[1]),
  );
  const aligned = (bytes: number): number => Math.ceil(bytes / 8) * 8;
  const total = arrays.reduce((sum, [, array]) => sum + aligned(array.byteLength), 0);
  const memory = new SharedArrayBuffer(total);
  const shared: Record<string, unknown> = { ...table };
  let offset = 0;
  for (const [name, array] of arrays) {
    const Kind = array.constructor as new (
      buffer: SharedArrayBuffer,
      byteOffset: number,
      length: number,
    ) => TableArray;
    const copy = new Kind(memory, offset, array.length);
    copy.set(array);
    shared[name] = copy;
    offset += aligned(array.byteLength);
  }
  return shared as unknown as PackedTable;
}

/** FNV-1a over the UTF-16 code units of `value`, seeded. */
export function hashString(value: string, seed: number): number {
  let hash = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < value.length; i++) {
    hash = Math.imul(hash ^ value.charCodeAt(i), 0x01000193);
  }
  return hash >>> 0;
}

/** Where a secret's digest is placed: its first four bytes. */
export function digestHash(digest: Uint8Array, offset = 0): number {
  return (
    ((digest[offset] ?? 0) |
      ((digest[offset + 1] ?? 0) << 8) |
      ((digest[offset + 2] ?? 0) << 16) |
      ((digest[offset + 3] ?? 0) << 24)) >>>
    0
  );
}

/** True when the ASCII bytes at `start` spell exactly `value`. */
export function bytesEqual(
  bytes: Uint8Array,
  start: number,
  length: number,
  value: string,
): boolean {
  if (value.length !== length) return false;
  for (let i = 0; i < length; i++) {
    if (bytes[start + i] !== value.charCodeAt(i)) return false;
  }
  return true;
}

export function roleOf(flags: number): Role {
  return ROLES[flags & 3] ?? OWNER_ROLE;
}

export function isRevokedFlag(flags: number): boolean {
  return (flags & REVOKED_FLAG) !== 0;
}

export function flagsOf(role: Role, revoked: boolean): number {
  return ROLES.indexOf(role) | (revoked ? REVOKED_FLAG : 0);
}
