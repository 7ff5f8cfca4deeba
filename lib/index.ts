export type { AuthContext, CredentialKind, Logger } from './types';
export type { RequestFacts } from './core/facts';
export { CREDENTIAL_KINDS } from './types';
export * from './errors';
export {
  ROLES,
  OWNER_ROLE,
  type Role,
  isRole,
  roleRank,
  roleSatisfies,
  requireRole,
} from './roles';
export { canonicalClientIp, parseCidrEntry, type CidrRange } from './ip-address';
export { IpWhitelist, requireWhitelistedIp, type IpWhitelistOptions } from './ip-whitelist';
export {
  generateKey,
  isPlausibleKey,
  keyShape,
  keyPrefixType,
  type KeyShape,
  type KeyType,
  type KeyEnvironment,
} from './key-format';
export { KeyRing, FileKeyStore, sha256, type KeyRecord, type KeyStore } from './key-store';
export {
  TokenService,
  DEFAULT_TOKEN_TTL_SECONDS,
  MIN_TOKEN_SECRET_BYTES,
  type TokenServiceOptions,
  type TokenClaims,
  type IssuedToken,
} from './tokens';
export {
  authenticate,
  presentedCredential,
  refuseQueryCredentials,
  hasBrowserSignals,
  QUERY_CREDENTIAL_PARAMS,
  type QueryCredentialOptions,
  DEFAULT_PUBLIC_KEY_HEADER,
  type AuthenticateOptions,
  type SecurityEvent,
  type PresentedCredential,
} from './credentials';
export {
  authenticateKeyPair,
  issueToken,
  type KeyPairOptions,
  type IssueTokenOptions,
} from './token-exchange';
export { requestId, clientIp } from './request-context';
export { refuseMalformedRequests, headersTruncated } from './request-shape';
export {
  createPathRedactor,
  containsSecretOrToken,
  containsTokenLike,
  isKnownKey,
  REDACTED,
  type PathRedactorOptions,
} from './credential-scan';
export { jsonBody, parseJsonObject, DEFAULT_BODY_LIMIT, type JsonBodyOptions } from './json-body';
export {
  errorHandler,
  toGatewayError,
  notFound,
  methodNotAllowed,
  clientErrorHandler,
  type ErrorHandlerOptions,
} from './error-handler';
export {
  createRateLimiter,
  retryAfterSeconds,
  DEFAULT_WINDOW_MS,
  DEFAULT_PREFIX,
  type RateLimiter,
  type RateLimiterOptions,
  type LimitKey,
  type LimiterRedis,
} from './rate-limit/limiter';
export {
  createAuthFailureLimiter,
  DEFAULT_AUTH_FAILURE_LIMIT,
  type AuthFailureLimiter,
  type AuthFailureLimiterOptions,
} from './rate-limit/auth-failures';
export { ResilientStore, type ResilientStoreOptions } from './rate-limit/resilient-store';
export {
  RedisHealth,
  type SharedStoreState,
  type RedisHealthOptions,
} from './rate-limit/redis-health';
export {
  redisCommandFn,
  RedisUnavailableError,
  scriptSha1,
  type RedisCommandFn,
  type RedisCommandClient,
} from './rate-limit/redis-commands';
export {
  createLimiterRedis,
  RedisTimeoutError,
  type LimiterRedisOptions,
  type LimiterRedisConnection,
} from './rate-limit/redis-client';
export {
  createGate,
  type Gate,
  type GateOptions,
  type RoutePolicy,
  type CompiledPolicy,
  type Decision,
  type DecisionEvent,
  type Scopes,
} from './core/gate';
export { ScopeCounter, type ScopeDefinition, type ScopeKey, type HeaderPair } from './core/limits';
export {
  tollgate,
  type Tollgate,
  type TollgateOptions,
  type ProtectOptions,
  type TokenExchangeOptions,
  type BrowserCorsOptions,
} from './express/tollgate';
