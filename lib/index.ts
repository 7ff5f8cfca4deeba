/**
 * Tollgate's public entry point: what protecting the routes of an Express app needs. The factory
 * `tollgate()` and its options, the key stores an app constructs, the token service, the errors
 * and their codes, and the type of `req.auth`. The rest sits behind entries named by purpose:
 *
 * - `tollgate/express`: the single middlewares, for apps that compose their own chain;
 * - `tollgate/redis`: the Redis connection that shares limit counters across instances;
 * - `tollgate/postgres`: the PostgreSQL key store's schema, views and key-administration types;
 * - `tollgate/forward-auth`: the forward-authentication door and its proxy dialects;
 * - `tollgate/core`: the framework-free decision core, for doors of other frameworks.
 */

// The identity `req.auth` carries (its `Express.Request` augmentation comes with it), and logging.
export type { AuthContext, CredentialKind, Logger } from './types';
export { CREDENTIAL_KINDS } from './types';
export { ROLES, type Role } from './model/roles';
export { PERMISSIONS, type Permission } from './model/permissions';
export type { IpWhitelist } from './model/ip-whitelist';

// Errors and their codes.
export {
  ERROR_CODES,
  type ErrorCode,
  TollgateError,
  errorBody,
  InvalidRequestError,
  AuthenticationError,
  IpNotWhitelistedError,
  InsufficientRoleError,
  InsufficientPermissionError,
  NotFoundError,
  MethodNotAllowedError,
  ForbiddenOriginError,
  ConflictError,
  KeyAlreadyRolledError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyRequiredError,
  IdempotencyKeyInUseError,
  IdempotencyKeyReusedError,
  IdempotencyUnavailableError,
  PayloadTooLargeError,
  HeadersTooLargeError,
  UnsupportedMediaTypeError,
  RateLimitedError,
  UpstreamError,
  InternalError,
  MisconfigurationError,
  ConfigurationError,
  NotReadyError,
} from './errors';

// The factory and its options.
export {
  tollgate,
  type Tollgate,
  type TollgateOptions,
  type ProtectOptions,
  type TokenExchangeOptions,
  type BrowserCorsOptions,
} from './express/tollgate';
export type {
  GateOptions,
  IdempotencyOptions,
  RoutePolicy,
  Scopes,
  ShadowOptions,
  ShadowFinding,
  Decision,
  DecisionEvent,
} from './core/gate';
export type { RequestFacts } from './core/facts';
export type { IdempotencyEvent, IdempotencyMode, IdempotencyOutcome } from './core/idempotency';
export type { IdempotencyStoreState } from './idempotency/store';
export type { ScopeDefinition, ScopeUsage, HeaderPair } from './core/limits';
export type { ScopeKey } from './model/key-record';
export type { SecurityEvent } from './core/credentials';
export type { ForwardAuthOptions, ForwardAuthRoute } from './express/forward-auth';
export type { JsonBodyOptions } from './express/json-body';
export type { LimiterRedis } from './rate-limit/window';
export type { RateLimitState, SharedStoreState } from './rate-limit/redis-health';

// Serving an app: the kit's JSON body for what Express and Node answer before any route.
export { notFound, clientErrorHandler } from './express/error-handler';
export {
  expressServerOptions,
  type ExpressPrototypes,
  type ExpressServerOptions,
} from './express/server-options';

// The key stores an app constructs, and the keys they hold.
export { limitScopesOf } from './core/limits';
export { generateKey, type KeyEnvironment, type KeyType } from './model/key-format';
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
export type { AccountLimits, LimitScopes } from './model/key-record';
export { FileKeyAdmin, type FileKeyAdminOptions } from './keys/file-key-admin';
export { PgKeyStore, type PgKeyStoreOptions, type PgKeyStoreState } from './keys/pg-key-store';

// Tokens.
export {
  TokenService,
  type TokenServiceOptions,
  type TokenClaims,
  type IssuedToken,
} from './tokens/tokens';
