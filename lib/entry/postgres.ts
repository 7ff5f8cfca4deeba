/**
 * `tollgate/postgres`: the PostgreSQL key store (`PgKeyStore`), its options and state, the schema
 * version its migrations bring, the channel it listens on, and the views its key-administration
 * methods answer with. Needs the optional peer `pg`.
 */
export {
  PgKeyStore,
  NOTIFY_CHANNEL,
  type PgKeyStoreOptions,
  type PgKeyStoreState,
} from '../keys/pg-key-store';
export type { KeyAdmin } from '../keys/key-admin';
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
} from '../keys/pg-key-views';
