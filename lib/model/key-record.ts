import type { IpWhitelist } from './ip-whitelist';
import type { Role } from './roles';

/** Per-account limit overrides: scope name to requests per window. */
export type AccountLimits = Readonly<Record<string, number>>;

/** What a limit scope counts: the authenticated account, or the client IP (IPv6 by /56 network). */
export type ScopeKey = 'account' | 'ip';

/** One API key pair as the server knows it. The secret itself is never held, only its SHA-256. */
export interface KeyRecord {
  readonly id: string;
  readonly accountId: string;
  readonly role: Role;
  readonly publishableKey: string;
  readonly secretKeySha256: Buffer;
  readonly revoked: boolean;
  /** When the key stops authenticating, in ms since the epoch; `undefined`: never. */
  readonly expiresAt?: number | undefined;
  /** The account's whitelist, shared by all its keys; `undefined`: not restricted. */
  readonly ipWhitelist: IpWhitelist | undefined;
  /**
   * The account's own limits per scope, shared by all its keys (one object per
   * distinct set); `undefined`: every scope at its default.
   */
  readonly limits?: AccountLimits | undefined;
  /**
   * What a restricted key may do; `undefined`: all that its role allows. Looked up on
   * every request, tokens included, so a change applies at once.
   */
  readonly permissions?: ReadonlySet<string> | undefined;
}

/**
 * The limit scopes a key store knows, scope name to what the scope counts per, as the gate declares
 * them (`tollgate({ scopes })`): an account may override the `'account'` ones only. The `'ip'`
 * ones are named so that a refusal can say why.
 */
export type LimitScopes = Readonly<Record<string, ScopeKey>>;

/**
 * Where keys are looked up: synchronously, in memory. A request never waits on a file or a
 * database, and a credential is compared in the same synchronous step as the failed-authentication
 * budget is checked and counted. A store over a database keeps the whole ring in
 * memory and swaps it when the database says it changed. Revoked and expired keys are returned as
 * they are (`revoked: true`, `expiresAt` past): callers refuse them.
 */
export interface KeyStore {
  /** The key whose secret has this value, compared by SHA-256 digest in constant time. */
  findBySecretKey(secretKey: string): KeyRecord | undefined;
  /** The key pair when `secretKey` belongs to `publishableKey`; the same time whether or not. */
  findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined;
  findByPublishableKey(publishableKey: string): KeyRecord | undefined;
  findById(keyId: string): KeyRecord | undefined;
  /**
   * The limit scopes its accounts' `limits` were checked against, when it checks them (the kit's
   * stores do): `tollgate()` refuses a store whose per-account scopes it does not count per account.
   */
  readonly limitScopes?: LimitScopes | undefined;
  /**
   * The permission names its keys' `permissions` were checked against, when it checks them (the
   * kit's stores do): `tollgate()` refuses a store that does not know a permission it declares.
   */
  readonly permissionNames?: readonly string[] | undefined;
}

/**
 * A store that can list every key it holds (the admin listener reads it). A store
 * with a million keys makes each record as the listing reaches it: iterate, do not index.
 */
export interface KeyDirectory {
  keyRecords(): Iterable<KeyRecord>;
  /**
   * The keys of one account, without a walk of every key (the admin routes ask per account while
   * requests are served). Optional: without it, callers filter `keyRecords()`.
   */
  recordsOfAccount?(accountId: string): Iterable<KeyRecord>;
}

/**
 * Whether a store's first keys are in (`/readyz` answers 503 until then). A store built in the
 * background answers every lookup with nothing while `ready` is false.
 */
export interface KeyReadiness {
  readonly ready: boolean;
}

/** True when `key` is past its `expiresAt` at `now` (ms since the epoch). */
export function isExpired(key: KeyRecord, now: number): boolean {
  return key.expiresAt !== undefined && now >= key.expiresAt;
}
