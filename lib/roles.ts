import type { RequestHandler } from 'express';
import { ConfigurationError, InsufficientRoleError } from './errors';

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

/**
 * Refuses, with 403 `insufficient_role`, a request whose authenticated role is below `minimum`.
 * Mount it after `authenticate()`; a request without `req.auth` is refused as well.
 */
export function requireRole(minimum: Role): RequestHandler {
  const required = parseRole(minimum, 'requireRole()');
  const requiredRank = roleRank(required);
  return function requireRoleMiddleware(req, _res, next) {
    const auth = req.auth;
    if (auth === undefined || roleRank(auth.role) < requiredRank) {
      next(new InsufficientRoleError(required));
      return;
    }
    next();
  };
}
