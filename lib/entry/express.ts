/**
 * `tollgate/express`: the single middlewares, for an app that composes its own chain instead of
 * `gate.protect()`. Each one that depends on an earlier one (`clientIp()` before
 * `requireWhitelistedIp()`, `authenticate()` before `requireRole()`, ...) fails closed with
 * `500 internal_error` and a logged misconfiguration when that one is missing.
 */
export {
  authenticate,
  refuseQueryCredentials,
  type QueryCredentialOptions,
} from '../express/authenticate';
export type { AuthenticateOptions } from '../core/credentials';
export {
  authenticateKeyPair,
  issueToken,
  type KeyPairOptions,
  type IssueTokenOptions,
} from '../express/token-exchange';
export { requireWhitelistedIp, requireRole, type IpWhitelistOptions } from '../express/access';
export { requestId, clientIp } from '../express/request-context';
export { series } from '../express/series';
export { refuseMalformedRequests } from '../express/request-shape';
export { jsonBody, type JsonBodyOptions } from '../express/json-body';
export {
  errorHandler,
  toTollgateError,
  methodNotAllowed,
  type ErrorHandlerOptions,
} from '../express/error-handler';
export {
  createRateLimiter,
  type RateLimiter,
  type RateLimiterOptions,
  type LimitKey,
} from '../express/limiter';
export { TollgateStore, type TollgateStoreOptions } from '../rate-limit/tollgate-store';
export {
  createAuthFailureLimiter,
  type AuthFailureLimiter,
  type AuthFailureLimiterOptions,
  type BudgetClient,
  type BudgetMiddleware,
  type BudgetErrorHandler,
  type BudgetNext,
  type AttemptCallback,
} from '../rate-limit/auth-failures';
