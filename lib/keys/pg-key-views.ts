import type { Role } from '../model/roles';
import type { AccountLimits } from '../model/key-record';

/** The shapes the database key store's write API takes and returns (no database types here). */

export { MAX_GRACE_SECONDS } from './key-roll';

export interface AccountView {
  readonly id: string;
  /** Canonical entries; `null`: not restricted. */
  readonly ipWhitelist: readonly string[] | null;
  /** Its limit overrides; `null`: every scope at its default. */
  readonly limits: AccountLimits | null;
  /** `null`: not recorded (a keys file holds no such times). */
  readonly createdAt: Date | null;
  readonly updatedAt: Date | null;
}

export interface KeyView {
  readonly id: string;
  readonly accountId: string;
  readonly role: Role;
  readonly publishableKey: string;
  /** `null`: not recorded (a keys file holds no such times). */
  readonly createdAt: Date | null;
  readonly expiresAt: Date | null;
  readonly revoked: boolean;
  /** When it was revoked; `null` when it is not, or when that is not recorded (a keys file). */
  readonly revokedAt: Date | null;
  readonly lastUsedAt: Date | null;
  /** What it may do, in the vocabulary's order; `null`: all its role allows. */
  readonly permissions: readonly string[] | null;
}

/** A key pair just made: the only time its secret is known. */
export interface NewKey extends KeyView {
  readonly secretKey: string;
}

export interface AccountWithKeys extends AccountView {
  readonly keys: readonly KeyView[];
}

export interface CreateKeyOptions {
  readonly role?: Role;
  /** The key's id; a fresh `key_…` one when absent. */
  readonly id?: string;
  /**
   * Its deadline: a `Date` or ms since the epoch, in the future and within the range of
   * key-rules.ts (`EXPIRY_MIN_MS` to `EXPIRY_MAX_MS`); `null` or absent: none.
   */
  readonly expiresAt?: Date | number | null;
  /** A list of permissions; `null` or absent: not restricted. */
  readonly permissions?: readonly string[] | null;
}

/** A change of a key: its role, its permissions (`null` lifts them), or both. */
export interface KeyChanges {
  readonly role?: Role;
  readonly permissions?: readonly string[] | null;
}

export interface RollOptions {
  /** The new key's id; a fresh one when absent. */
  readonly id?: string;
}

/** A keys document (`{"accounts": [...]}`), as the keys file holds it. */
export interface KeysDocument {
  accounts: {
    id: string;
    ipWhitelist?: string[];
    limits?: Record<string, number>;
    keys: {
      id: string;
      publishableKey: string;
      secretKeySha256: string;
      role: Role;
      revoked?: true;
      expiresAt?: string;
      permissions?: string[];
    }[];
  }[];
}

export interface RollResult {
  /** The new key pair, same account and role. */
  readonly key: NewKey;
  /** The old key, with its `expiresAt` now at most the end of the grace. */
  readonly previous: KeyView;
}

/** The schema version this build reads and writes: a database at another version is refused. */
export const SCHEMA_VERSION = 2;

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

export interface MigrationResult {
  readonly from: number;
  readonly to: number;
  readonly applied: readonly Migration[];
}

/** The channel the database key store listens on for changes (`NOTIFY tollgate_keys`). */
export const NOTIFY_CHANNEL = 'tollgate_keys';

/** More changed keys than this in one sync: a new ring is built in the worker instead. */
export const FULL_LOAD_ROWS = 5000;

/** The database key store's state, for readiness and metrics. */
export interface PgKeyStoreState {
  /** `ready`: in step with the database; `stale`: the last keys loaded are in force. */
  readonly status: 'ready' | 'stale';
  /** Why the store is stale. */
  readonly reason: string | undefined;
  /** When the ring was last known to match the database (ms since the epoch). */
  readonly lastSyncAt: number;
  /** The change version the ring is at. */
  readonly version: string;
  readonly keys: number;
}
