import { ConfigurationError } from '../errors';

/** Team roles, lowest first. An API key without a role acts as the account owner. */
export const ROLES = ['level-1', 'level-2', 'level-3', 'administrator'] as const;
export type Role = (typeof ROLES)[number];

/** The role of an API key that names none: the account owner. */
export const OWNER_ROLE: Role = 'administrator';

export function isRole(value: unknown): value is Role {
  return typeof value === 'string' && (ROLES as readonly string[]).includes(value);
}

export function roleRank(role: Role): number {
  return ROLES.indexOf(role);
}

/** True when `actual` is `required` or a higher role. */
export function roleSatisfies(actual: Role, required: Role): boolean {
  return roleRank(actual) >= roleRank(required);
}

export function parseRole(value: unknown, where: string): Role {
  if (isRole(value)) return value;
  throw new ConfigurationError(
    `${where}: unknown role ${JSON.stringify(value)}; expected one of ${ROLES.join(', ')}`,
  );
}
