/**
 * Tollgate's public entry point: what protecting the routes of an Express app needs. The factory
 * `tollgate()` and its options, the key stores an app constructs, the token service, the error
 * class and its codes, and the type of `req.auth`. A refusal is told apart by its `code` (one of
 * `ERROR_CODES`), not by a class. The rest sits behind entries named by purpose, each name in one
 * entry only:
 *
 * - `tollgate/express`: the single middlewares, for apps that compose their own chain;
 * - `tollgate/redis`: the Redis connection that shares limit counters across instances;
 * - `tollgate/postgres`: the PostgreSQL key store, its schema, views and key-administration types;
 * - `tollgate/forward-auth`: the forward-authentication door and its proxy dialects;
 * - `tollgate/core`: the framework-free decision core, for doors of other frameworks.
 */

// The identity `req.auth` carries (its `Express.Request` augmentation comes with it), and logging.
export type { AuthContext, CredentialKind, Logger } from './types';
export { CREDENTIAL_KINDS } from './types';
export { ROLES, type Role } from './model/roles';
export { PERMISSIONS, type Permission } from './model/permissions';
export type { IpWhitelist } from './model/ip-whitelist';

// The error every refusal is, its codes, and the body the kit answers it with.
export {
  ERROR_CODES,
  type ErrorCode,
  TollgateError,
  errorBody,
  ConfigurationError,
} from './errors';

// What the worker threads of one process share, so that their gates count as one.
export { ThreadShare, type ThreadLink, type ThreadShareOptions } from './host/thread-share';

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
  Scopes,
  ShadowOptions,
  ShadowFinding,
  DecisionEvent,
} from './core/gate';
export type { IdempotencyEvent, IdempotencyMode, IdempotencyOutcome } from './core/idempotency';
export type { IdempotencyStoreState } from './idempotency/store';
export type { ScopeDefinition } from './core/limits';
export type { ScopeKey } from './model/key-record';
export type { SecurityEvent } from './core/credentials';
export type { RateLimitState } from './rate-limit/redis-health';

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

// Tokens.
export {
  TokenService,
  type TokenServiceOptions,
  type TokenClaims,
  type IssuedToken,
} from './tokens/tokens';
