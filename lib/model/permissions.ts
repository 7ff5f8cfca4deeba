import { ConfigurationError } from '../errors';

/**
 * What a restricted key may do: the seven built-in permissions (`wallets:read`, …), and any a
 * kit user declares besides (`tollgate({ permissions })`, the key stores' `permissions` option).
 * A key with a list may call only the routes whose permission it holds, on top of its role; a key
 * without one may call all its role allows. At most 16 names in all, so a key's list is one
 * 16-bit mask in the packed key ring: bit `i` is `names[i]`.
 */
export const PERMISSIONS = [
  'wallets:read',
  'transactions:read',
  'payments:read',
  'payouts:write',
  'payouts:approve',
  'otp:confirm',
  'chargebacks:write',
] as const;

export type Permission = (typeof PERMISSIONS)[number];

/** The most names a vocabulary may hold: a key's list is a 2-byte mask. */
export const MAX_PERMISSIONS = 16;

/** `resource:action`, each part 1 to 32 of `a-z0-9_-` starting with a letter (the schema's check). */
export const PERMISSION_PATTERN = /^[a-z][a-z0-9_-]{0,31}:[a-z][a-z0-9_-]{0,31}$/;

/**
 * The full vocabulary: the seven built-in permissions, then `extra` in the order given. Throws a
 * `ConfigurationError` naming a malformed or repeated name, or a total over 16.
 */
export function permissionNames(
  extra: readonly string[] | undefined,
  where: string,
): readonly string[] {
  if (extra === undefined) return PERMISSIONS;
  if (!Array.isArray(extra)) {
    throw new ConfigurationError(`${where}: permissions must be a list of names`);
  }
  const names: string[] = [...PERMISSIONS];
  for (const name of extra as unknown[]) {
    if (typeof name !== 'string' || !PERMISSION_PATTERN.test(name)) {
      throw new ConfigurationError(
        `${where}: permission ${JSON.stringify(name)} must be resource:action (lower case, e.g. "reports:read")`,
      );
    }
    if (names.includes(name)) {
      throw new ConfigurationError(`${where}: permission ${JSON.stringify(name)} is listed twice`);
    }
    names.push(name);
  }
  if (names.length > MAX_PERMISSIONS) {
    throw new ConfigurationError(
      `${where}: ${names.length} permissions with the ${PERMISSIONS.length} built-in ones; at most ${MAX_PERMISSIONS}`,
    );
  }
  return Object.freeze(names);
}

/**
 * The extra names of a vocabulary, as the option that declares them (`undefined` when none): what
 * a key store hands its ring worker and what `tollgate()` compares with its store.
 */
export function extraPermissions(names: readonly string[]): readonly string[] | undefined {
  return names.length === PERMISSIONS.length ? undefined : names.slice(PERMISSIONS.length);
}

/** The mask of `permissions` over `names` (every one of them among `names`). */
export function permissionMask(permissions: Iterable<string>, names: readonly string[]): number {
  let mask = 0;
  for (const name of permissions) mask |= 1 << names.indexOf(name);
  return mask;
}

/** The permissions of a mask, in vocabulary order. */
export function permissionsOfMask(mask: number, names: readonly string[]): ReadonlySet<string> {
  const held = new Set<string>();
  names.forEach((name, bit) => {
    if ((mask & (1 << bit)) !== 0) held.add(name);
  });
  return held;
}

/**
 * One set per distinct mask, made the first time a key with that mask is looked up and then
 * shared by every such key: a ring of a million keys holds at most a few dozen sets.
 */
export class PermissionSets {
  private readonly sets = new Map<number, ReadonlySet<string>>();

  constructor(readonly names: readonly string[]) {}

  /** The set of a mask; `undefined` for 0, a key without a list. */
  of(mask: number): ReadonlySet<string> | undefined {
    if (mask === 0) return undefined;
    let set = this.sets.get(mask);
    if (set === undefined) {
      set = permissionsOfMask(mask, this.names);
      this.sets.set(mask, set);
    }
    return set;
  }
}
