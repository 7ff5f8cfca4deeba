import {
  authFailuresWith,
  check,
  checkOptions,
  isStringList,
  listOf,
  type OptionChecks,
} from '../options';
import type { RequestHandler } from 'express';
import { IpWhitelist } from '../model/ip-whitelist';
import { parseRole, roleRank, type Role } from '../model/roles';
import { InsufficientRoleError, IpNotWhitelistedError, MisconfigurationError } from '../errors';
import type { AuthFailureLimiter } from '../rate-limit/auth-failures';
import { CREDENTIAL_KINDS, type CredentialKind } from '../types';

/**
 * The access checks as single Express middlewares, for apps that compose their own chain: the IP
 * whitelist and the role minimum. Each runs after `authenticate()`; `tollgate().protect()` runs
 * them in the decision core, in an order no caller can get wrong.
 */

export interface IpWhitelistOptions {
  /**
   * A fixed whitelist for every request. Defaults to the authenticated account's own whitelist
   * (`req.auth.ipWhitelist`); a request whose account has none is not restricted.
   */
  whitelist?: IpWhitelist | readonly string[];
  /**
   * Which credentials are restricted. Defaults to `['secret', 'token']`: publishable keys are made
   * for browsers, which call from any address.
   */
  credentials?: readonly CredentialKind[];
  /**
   * The failed-authentication budget: a refusal here counts against the client IP's, wherever
   * `recordFailure` is mounted. Defaults to none.
   */
  authFailures?: Pick<AuthFailureLimiter, 'record'>;
}

const IP_WHITELIST_OPTION_CHECKS: OptionChecks<IpWhitelistOptions> = {
  whitelist: check(
    'a list of addresses and CIDR ranges, or an IpWhitelist',
    (value) => value instanceof IpWhitelist || isStringList.test(value),
  ),
  credentials: listOf(CREDENTIAL_KINDS),
  authFailures: authFailuresWith('record'),
};

/**
 * Refuses with 403 `ip_not_whitelisted` a request from an address outside the whitelist.
 * Mount it after `clientIp()` and `authenticate()`: without a fixed `whitelist`, a request that
 * `authenticate()` has not seen fails closed (`500`, a logged misconfiguration), never open.
 */
export function requireWhitelistedIp(options: IpWhitelistOptions = {}): RequestHandler {
  checkOptions('requireWhitelistedIp()', options, IP_WHITELIST_OPTION_CHECKS);
  const fixed =
    options.whitelist === undefined || options.whitelist instanceof IpWhitelist
      ? options.whitelist
      : IpWhitelist.parse(options.whitelist, 'requireWhitelistedIp({ whitelist })');
  const restricted = new Set<CredentialKind>(options.credentials ?? ['secret', 'token']);
  const { authFailures } = options;
  return function requireWhitelistedIpMiddleware(req, _res, next) {
    const auth = req.auth;
    if (auth === undefined && fixed === undefined) {
      next(
        new MisconfigurationError(
          'requireWhitelistedIp_before_authenticate',
          'requireWhitelistedIp() ran before authenticate(): it needs the account to know its whitelist',
        ),
      );
      return;
    }
    if (auth !== undefined && !restricted.has(auth.credential)) {
      next();
      return;
    }
    const whitelist = fixed ?? auth?.ipWhitelist;
    if (whitelist === undefined || whitelist.allows(req.clientIp)) {
      next();
      return;
    }
    const refusal = new IpNotWhitelistedError();
    authFailures?.record(req, refusal);
    next(refusal);
  };
}

/**
 * Refuses, with 403 `insufficient_role`, a request whose authenticated role is below `minimum`.
 * Mount it after `authenticate()`: a request that `authenticate()` has not seen fails closed
 * (`500`, a logged misconfiguration).
 */
export function requireRole(minimum: Role): RequestHandler {
  const required = parseRole(minimum, 'requireRole()');
  const requiredRank = roleRank(required);
  return function requireRoleMiddleware(req, _res, next) {
    const auth = req.auth;
    if (auth === undefined) {
      next(
        new MisconfigurationError(
          'requireRole_before_authenticate',
          'requireRole() ran before authenticate(): there is no role to check',
        ),
      );
      return;
    }
    if (roleRank(auth.role) < requiredRank) {
      next(new InsufficientRoleError(required));
      return;
    }
    next();
  };
}
