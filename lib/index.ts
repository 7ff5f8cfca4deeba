/**
 * Tollgate's public entry point. The layers, from the inside out:
 *
 * - the decision core (`createGate`, no Express) and its pieces: credentials, roles, whitelists,
 *   key-pair checks, credential scans;
 * - keys, tokens and rate-limit stores, which the core reads;
 * - the Express door: `tollgate()` with `protect()`, and the single middlewares for apps that
 *   compose their own chain.
 */

// Shared types and errors.
export type { AuthContext, CredentialKind, Logger } from './types';
export { CREDENTIAL_KINDS } from './types';
export * from './errors';

// The decision core.
export {
  createGate,
  type Gate,
  type GateOptions,
  type RoutePolicy,
  type CompiledPolicy,
  type Decision,
  type DecisionEvent,
  type Scopes,
  type ShadowFinding,
  type ShadowOptions,
} from './core/gate';
export type { RequestFacts } from './core/facts';
export { IDENTITY_HEADERS, identityHeaders, type IdentityHeader } from './core/identity';
export {
  RouteTable,
  DEFAULT_PARAMETER_PATTERN,
  type ParameterMatcher,
  type RouteLookup,
  type RouteTableEntry,
} from './core/route-table';
export {
  allowAnswer,
  refusalAnswer,
  originalRequest,
  FORWARD_AUTH_DIALECTS,
  type AuthzAnswer,
  type ForwardAuthDialect,
  type OriginalRequest,
} from './forward-auth/dialects';
export {
  forwardAuthDoor,
  type ForwardAuthOptions,
  type ForwardAuthRoute,
} from './express/forward-auth';
export {
  accountKey,
  admitAll,
  readUsage,
  ScopeCounter,
  limitScopesOf,
  type ScopeUsage,
  type LimitFinding,
  type LimitUse,
  type ScopeDefinition,
  type ScopeKey,
  type HeaderPair,
} from './core/limits';
export {
  AdmissionStore,
  ADMIT_SCRIPT,
  READ_SCRIPT,
  LocalCounters,
  type AdmissionOutcome,
  type AdmissionStoreOptions,
  type CounterRequest,
} from './rate-limit/admission-store';
export {
  presentedCredential,
  credentialResolver,
  refuseCredentialsInQuery,
  hasBrowserSignals,
  QUERY_CREDENTIAL_PARAMS,
  DEFAULT_PUBLIC_KEY_HEADER,
  HEADER_NAME_PATTERN,
  type AuthenticateOptions,
  type SecurityEvent,
  type PresentedCredential,
} from './core/credentials';
export { keyPairResolver, type KeyPairResolverOptions } from './core/key-pair';
export {
  ROLES,
  OWNER_ROLE,
  type Role,
  isRole,
  parseRole,
  roleRank,
  roleSatisfies,
} from './core/roles';
export {
  PERMISSIONS,
  MAX_PERMISSIONS,
  PERMISSION_PATTERN,
  type Permission,
  permissionNames,
} from './core/permissions';
export { canonicalClientIp, parseCidrEntry, type CidrRange } from './core/ip-address';
export { IpWhitelist } from './core/ip-whitelist';
export {
  createPathRedactor,
  containsSecretOrToken,
  containsTokenLike,
  isKnownKey,
  REDACTED,
  type PathRedactorOptions,
} from './core/credential-scan';

// Keys and tokens.
export {
  generateKey,
  isPlausibleKey,
  keyShape,
  keyPrefixType,
  type KeyShape,
  type KeyType,
  type KeyEnvironment,
} from './keys/key-format';
export {
  KeyRing,
  FileKeyStore,
  sha256,
  type KeyDirectory,
  type KeyReadiness,
  type KeyRecord,
  type KeyStore,
  type KeyStoreLimitOptions,
} from './keys/key-store';
export { MAX_ACCOUNT_LIMIT } from './keys/key-rules';
export type { AccountLimits, LimitScopes } from './keys/key-record';
export {
  PgKeyStore,
  NOTIFY_CHANNEL,
  FULL_LOAD_ROWS,
  type PgKeyStoreOptions,
  type PgKeyStoreState,
} from './keys/pg-key-store';
export {
  MAX_GRACE_SECONDS,
  SCHEMA_VERSION,
  type Migration,
  type MigrationResult,
  type AccountView,
  type AccountWithKeys,
  type CreateKeyOptions,
  type KeyChanges,
  type KeysDocument,
  type KeyView,
  type NewKey,
  type RollOptions,
  type RollResult,
} from './keys/pg-key-views';

export {
  TokenService,
  DEFAULT_TOKEN_TTL_SECONDS,
  MIN_TOKEN_SECRET_BYTES,
  type TokenServiceOptions,
  type TokenClaims,
  type IssuedToken,
} from './tokens/tokens';

// Limits: windows, the failure budget, stores and the Redis connection.
export {
  DEFAULT_WINDOW_MS,
  DEFAULT_PREFIX,
  retryAfterSeconds,
  type LimiterRedis,
} from './rate-limit/window';
export {
  createAuthFailureLimiter,
  DEFAULT_AUTH_FAILURE_LIMIT,
  type AuthFailureLimiter,
  type AuthFailureLimiterOptions,
  type BudgetClient,
} from './rate-limit/auth-failures';
export { TollgateStore, type TollgateStoreOptions } from './rate-limit/tollgate-store';
export {
  RedisHealth,
  type SharedStoreState,
  type RateLimitState,
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
  parseHostPort,
  type LimiterRedisOptions,
  type LimiterRedisConnection,
} from './rate-limit/redis-client';
export { CommandBatch, RedisTimeoutError } from './rate-limit/command-batch';

// The Express door.
export {
  tollgate,
  type Tollgate,
  type TollgateOptions,
  type ProtectOptions,
  type TokenExchangeOptions,
  type BrowserCorsOptions,
} from './express/tollgate';
export {
  authenticate,
  refuseQueryCredentials,
  type QueryCredentialOptions,
} from './express/authenticate';
export {
  authenticateKeyPair,
  issueToken,
  type KeyPairOptions,
  type IssueTokenOptions,
} from './express/token-exchange';
export { requireWhitelistedIp, requireRole, type IpWhitelistOptions } from './express/access';
export { requestId, clientIp } from './express/request-context';
export { series } from './express/series';
export {
  expressServerOptions,
  type ExpressPrototypes,
  type ExpressServerOptions,
} from './express/server-options';
export { refuseMalformedRequests, headersTruncated } from './express/request-shape';
export {
  jsonBody,
  parseJsonObject,
  DEFAULT_BODY_LIMIT,
  type JsonBodyOptions,
} from './express/json-body';
export {
  errorHandler,
  toTollgateError,
  // eslint-disable-next-line @typescript-eslint/no-deprecated -- kept for existing users
  toGatewayError,
  notFound,
  methodNotAllowed,
  clientErrorHandler,
  type ErrorHandlerOptions,
} from './express/error-handler';
export {
  createRateLimiter,
  type RateLimiter,
  type RateLimiterOptions,
  type LimitKey,
} from './express/limiter';
