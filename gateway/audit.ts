import type { ErrorRequestHandler, Request, RequestHandler } from 'express';
import { GatewayError } from '../lib/errors';
import type { Logger } from '../lib/types';

/**
 * The audit trail: one structured event per authentication or authorisation decision, allowed or
 * denied, with why, who (key id, account), from where (client IP), on which route, and the request
 * id. Never a credential: key ids identify keys, secrets are never in hand here.
 */

const AUDITED_CODES: ReadonlySet<string> = new Set([
  'missing_credentials',
  'invalid_api_key',
  'invalid_credentials',
  'invalid_token',
  'expired_token',
  'credential_not_allowed',
  'insufficient_role',
  'ip_not_whitelisted',
  'rate_limited',
]);

function fields(req: Request, routePath: string): Record<string, unknown> {
  return {
    event: 'auth.decision',
    request_id: req.requestId,
    route: `${req.method} ${routePath}`,
    client_ip: req.clientIp,
    key_id: req.auth?.keyId,
    account_id: req.auth?.accountId,
    credential: req.auth?.credential,
  };
}

/** Logs an `allowed` decision; mount after every check, just before the handler. */
export function auditAllowed(logger: Logger, routePath: string): RequestHandler {
  return function auditAllowedMiddleware(req, _res, next) {
    if (logger.isLevelEnabled?.('info') !== false) {
      logger.info({ ...fields(req, routePath), outcome: 'allowed', role: req.auth?.role });
    }
    next();
  };
}

/** Logs a `denied` decision for authentication, authorisation and rate-limit refusals. */
export function auditDenied(logger: Logger, routePath: string): ErrorRequestHandler {
  return function auditDeniedMiddleware(error: unknown, req, _res, next) {
    if (error instanceof GatewayError && AUDITED_CODES.has(error.code)) {
      logger.info({
        ...fields(req, routePath),
        outcome: 'denied',
        reason: error.code,
        status: error.status,
      });
    }
    next(error);
  };
}
