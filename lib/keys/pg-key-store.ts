import {
  checkOptions,
  isNonEmptyString,
  LOGGER,
  oneOf,
  type OptionChecks,
  required,
  wholeNumber,
} from '../options';
import { KEY_STORE_LIMIT_OPTION_CHECKS } from './key-store';
import type { Pool } from 'pg';
import { requireOptional } from '../optional-module';
import type { Logger } from '../model/logger';
import type { KeyEnvironment } from '../model/key-format';
import type {
  KeyDirectory,
  KeyReadiness,
  KeyRecord,
  KeyStore,
  LimitScopes,
} from '../model/key-record';
import { permissionNames } from '../model/permissions';
import * as admin from './pg-key-admin';
import type { KeyAdmin } from './key-admin';
import type { Role } from '../model/roles';
import type {
  AccountView,
  AccountWithKeys,
  CreateKeyOptions,
  KeyChanges,
  KeyView,
  KeysDocument,
  NewKey,
  RollOptions,
  RollResult,
  MigrationResult,
  PgKeyStoreState,
} from './pg-key-views';
import { migrate } from './pg-schema';
import { PgKeySync } from './pg-key-sync';
import type { RingFeed } from './pg-changes';
import { assertMigrated } from './pg-schema';

/**
 * Keys in PostgreSQL, shared by every instance. Each instance holds the whole ring
 * in memory: a request never waits on the database. The first load happens in `open()`; after it
 * the store asks only for rows whose version is above the last one it applied:
 *
 * - at once when a NOTIFY on `tollgate_keys` announces a change (a dedicated LISTEN connection,
 *   reconnected with backoff when it drops);
 * - every `pollIntervalMs` (500 ms) as a backstop, which compares `max(version)` first.
 *
 * A batch of changed rows is applied in one synchronous step, entry by entry (live-key-ring.ts).
 * A whole ring is built only off the request path, in a worker thread that reads every row in one
 * snapshot and packs them (ring-sources.ts): for the first load, when more than
 * `FULL_LOAD_ROWS` keys changed since the last sync (a bulk import, a backstop after a long
 * outage), and when the layer of changes over the packed base has grown past a sixteenth of the
 * keys. While it is built the ring in force keeps taking the changes made after the build began,
 * so a revocation is not held up by it; the rows changed after the build's snapshot are applied to
 * the new ring before it is swapped in, in one assignment. While the database is unreachable
 * the last keys stay in force and `state()` says `stale`, with the reason and the time of the last
 * successful sync. Use of a key is remembered in memory, with the time of its last use, and
 * written as `last_used_at` in one UPDATE every `lastUsedFlushMs` (30 s), never on the request path:
 * the time written is when the key was last used, not when the flush ran, so a key used and then
 * revoked shows its last use before its revocation. A lookup made about a key rather than with it
 * (`peekBySecretKey`) is not a use.
 */

export { FULL_LOAD_ROWS, NOTIFY_CHANNEL, type PgKeyStoreState } from './pg-key-views';

export interface PgKeyStoreOptions {
  /** `postgres://…` */
  readonly connectionString: string;
  readonly logger?: Logger;
  /** The version backstop's period. */
  readonly pollIntervalMs?: number;
  /** How often `last_used_at` is written. */
  readonly lastUsedFlushMs?: number;
  /** Connections of the query pool (the LISTEN connection is one more). */
  readonly poolSize?: number;
  /** Keys made by `createKey`: `pk_test_…` or `pk_live_…` (a roll keeps the old key's). Defaults to `test`. */
  readonly keyEnvironment?: KeyEnvironment;
  /**
   * A query, or a connection attempt, that takes longer fails (and the store goes stale); a
   * statement is cancelled by PostgreSQL at this time, so it has not run. Defaults to 5000.
   */
  readonly queryTimeoutMs?: number;
  /**
   * The gate's limit scopes, name to what each counts per: an account's `limits` may override the
   * `'account'` ones (see `KeyStoreLimitOptions`); the write API refuses anything else (400), and a
   * stored value it would refuse (written by hand) blocks the account, logged. Defaults to none.
   */
  readonly limitScopes?: LimitScopes;
  /**
   * Permission names a key may hold besides the seven built-in ones (see `KeyStoreLimitOptions`);
   * the write API refuses any other (400), and a stored name it would refuse (written by hand)
   * holds that key as revoked, logged as `keys.key_blocked`. Defaults to none.
   */
  readonly permissions?: readonly string[];
}

/**
 * How much longer the client waits for a statement than PostgreSQL lets it run
 * (`statement_timeout`): the server cancels first, so a statement past its time has surely not
 * run. A timeout on the client alone leaves the statement in the server, where a write queued on a
 * lock (a `last_used_at` flush behind a bulk UPDATE) runs later, after the caller was told it
 * failed, and such writes pile up one per flush for as long as the lock is held.
 */
const CLIENT_GRACE_MS = 250;

const PG_KEY_STORE_OPTION_CHECKS: OptionChecks<PgKeyStoreOptions> = {
  ...KEY_STORE_LIMIT_OPTION_CHECKS,
  connectionString: required(isNonEmptyString),
  logger: LOGGER,
  pollIntervalMs: wholeNumber(1),
  lastUsedFlushMs: wholeNumber(1),
  poolSize: wholeNumber(1),
  keyEnvironment: oneOf(['test', 'live']),
  queryTimeoutMs: wholeNumber(1),
};

let openShared: (options: PgKeyStoreOptions, feed: RingFeed) => Promise<PgKeyStore>;
let noteUses: (store: PgKeyStore, uses: Iterable<readonly [string, number]>) => void;

/**
 * `PgKeyStore.open()` for a host whose threads follow one ring: every base it builds is in shared
 * memory, and each base, batch of changes and state is given to `feed` once in force here, for
 * the other threads' `RingFollower`s. This thread alone reads and writes the database.
 */
export function openSharedPgKeyStore(
  options: PgKeyStoreOptions,
  feed: RingFeed,
): Promise<PgKeyStore> {
  checkOptions('openSharedPgKeyStore()', options, PG_KEY_STORE_OPTION_CHECKS);
  return openShared(options, feed);
}

/**
 * Uses of keys made in other threads, each as how many milliseconds ago, for the store's next
 * `last_used_at` write (a later use already noted here wins).
 */
export function noteUsesElsewhere(
  store: PgKeyStore,
  uses: Iterable<readonly [string, number]>,
): void {
  noteUses(store, uses);
}

export class PgKeyStore implements KeyStore, KeyDirectory, KeyReadiness, KeyAdmin {
  private readonly environment: KeyEnvironment;
  /** The scopes an account's `limits` may name. */
  readonly limitScopes: LimitScopes;
  /** The names a key's `permissions` may hold. */
  readonly permissionNames: readonly string[];
  /** The ring in force and how it is kept in step with the database (pg-key-sync.ts). */
  private readonly changes: PgKeySync;
  private readonly flushTimer: NodeJS.Timeout;
  private used = new Map<string, number>();
  private closed = false;

  private constructor(
    private readonly pool: Pool,
    options: PgKeyStoreOptions,
    pg: typeof import('pg'),
    feed: RingFeed | undefined,
  ) {
    this.environment = options.keyEnvironment ?? 'test';
    this.limitScopes = { ...(options.limitScopes ?? {}) };
    this.permissionNames = permissionNames(options.permissions, 'PgKeyStore');
    const timeout = options.queryTimeoutMs ?? 5000;
    this.changes = new PgKeySync(
      pool,
      {
        connectionString: options.connectionString,
        timeoutMs: timeout,
        clientConfig: {
          connectionString: options.connectionString,
          connectionTimeoutMillis: timeout,
          statement_timeout: timeout,
          query_timeout: timeout + CLIENT_GRACE_MS,
          keepAlive: true,
        },
        logger: options.logger,
        limitScopes: this.limitScopes,
        permissionNames: this.permissionNames,
        pollIntervalMs: options.pollIntervalMs ?? 500,
        feed,
      },
      pg,
    );
    this.flushTimer = setInterval(() => {
      void this.flushLastUsed();
    }, options.lastUsedFlushMs ?? 30_000);
    this.flushTimer.unref();
  }

  /**
   * Connects, checks that the database is migrated (a `ConfigurationError` otherwise), loads every
   * key, and starts listening for changes. Rejects when the database cannot be read.
   */
  static async open(options: PgKeyStoreOptions): Promise<PgKeyStore> {
    checkOptions('PgKeyStore.open()', options, PG_KEY_STORE_OPTION_CHECKS);
    return PgKeyStore.openWith(options, undefined);
  }

  static {
    openShared = (options, feed) => PgKeyStore.openWith(options, feed);
    noteUses = (store, uses) => {
      const now = performance.now();
      for (const [id, ageMs] of uses) {
        const at = now - ageMs;
        if ((store.used.get(id) ?? Number.NEGATIVE_INFINITY) < at) store.used.set(id, at);
      }
    };
  }

  private static async openWith(
    options: PgKeyStoreOptions,
    feed: RingFeed | undefined,
  ): Promise<PgKeyStore> {
    const pg = requireOptional('pg', 'TOLLGATE_DATABASE_URL (the PostgreSQL key store)');
    const timeout = options.queryTimeoutMs ?? 5000;
    const pool = new pg.Pool({
      connectionString: options.connectionString,
      max: options.poolSize ?? 4,
      connectionTimeoutMillis: timeout,
      statement_timeout: timeout,
      query_timeout: timeout + CLIENT_GRACE_MS,
      idleTimeoutMillis: 10_000,
      keepAlive: true,
    });
    pool.on('error', () => undefined); // an idle connection lost: the next query reconnects
    let store: PgKeyStore | undefined;
    try {
      await assertMigrated(pool);
      store = new PgKeyStore(pool, options, pg, feed);
      await store.sync();
      if (store.changes.syncFault !== undefined) throw new Error(store.changes.syncFault);
      await store.changes.listen();
      return store;
    } catch (error) {
      if (store === undefined) await pool.end();
      else await store.close();
      throw error;
    }
  }

  /**
   * Applies the SQL migrations (`migrations/NNN_name.sql`) the database lacks, in order, one
   * transaction each, under an advisory lock: two instances migrating at once is safe.
   */
  static async migrate(connectionString: string): Promise<MigrationResult> {
    const pg = requireOptional('pg', 'the PostgreSQL key store');
    const pool = new pg.Pool({ connectionString, max: 1, connectionTimeoutMillis: 10_000 });
    pool.on('error', () => undefined);
    try {
      return await migrate(pool);
    } finally {
      await pool.end();
    }
  }

  /** True once the first ring is in (it stays in force while the database is unreachable). */
  get ready(): boolean {
    return this.changes.loaded;
  }

  /** Keys in force. */
  get size(): number {
    return this.changes.ring.size;
  }

  state(): PgKeyStoreState {
    return this.changes.state();
  }

  /**
   * Brings the ring up to the database's latest version (pg-key-sync.ts). Never rejects: a failure
   * leaves the keys in force and the store stale.
   */
  sync(): Promise<void> {
    if (this.closed) return Promise.resolve();
    return this.changes.sync();
  }

  /**
   * Writes `last_used_at` for the keys used since the last flush, in one UPDATE: each key's time of
   * last use, never an earlier one over a later one another instance wrote. The time is sent as
   * how long ago the use was, and placed on the database's clock, the one `revoked_at` is read
   * from: a gateway whose clock is off cannot put a use after a revocation that followed it.
   */
  async flushLastUsed(): Promise<number> {
    if (this.used.size === 0) return 0;
    const used = this.used;
    this.used = new Map();
    const now = performance.now();
    const ids = [...used.keys()];
    const ages = [...used.values()].map((at) => Math.max(0, now - at) / 1000);
    try {
      await this.pool.query(
        `UPDATE keys SET last_used_at = greatest(keys.last_used_at, now() - make_interval(secs => used.age))
         FROM unnest($1::text[], $2::float8[]) AS used(id, age) WHERE keys.id = used.id`,
        [ids, ages],
      );
      return ids.length;
    } catch {
      // Next time, each with the later of its two times of use.
      for (const [id, at] of used) {
        if ((this.used.get(id) ?? Number.NEGATIVE_INFINITY) <= at) this.used.set(id, at);
      }
      return 0;
    }
  }

  /** Stops listening and polling, writes the last uses, and closes the connections. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.flushTimer);
    await this.changes.close();
    await this.flushLastUsed();
    await this.pool.end();
  }

  // The write API (see pg-key-admin.ts). Each resolves once the change is in this instance's ring.

  createAccount(
    id: string,
    ipWhitelist?: readonly string[] | null,
    limits?: Readonly<Record<string, number>> | null,
  ): Promise<AccountView> {
    return this.written(admin.createAccount(this.pool, id, ipWhitelist, limits, this.limitScopes));
  }

  /** Sets an account's limit overrides; `null` puts every scope back at its default. */
  setLimits(
    accountId: string,
    limits: Readonly<Record<string, number>> | null,
  ): Promise<AccountView> {
    return this.written(admin.setLimits(this.pool, accountId, limits, this.limitScopes));
  }

  setIpWhitelist(accountId: string, entries: readonly string[] | null): Promise<AccountView> {
    return this.written(admin.setIpWhitelist(this.pool, accountId, entries));
  }

  createKey(accountId: string, options: CreateKeyOptions = {}): Promise<NewKey> {
    return this.written(
      admin.createKey(this.pool, accountId, options, this.environment, this.permissionNames),
    );
  }

  setRole(keyId: string, role: Role): Promise<KeyView> {
    return this.written(admin.setRole(this.pool, keyId, role));
  }

  /** Sets a key's permissions; `null` lifts the restriction. */
  setPermissions(keyId: string, permissions: readonly string[] | null): Promise<KeyView> {
    return this.updateKey(keyId, { permissions });
  }

  /** Changes a key's role, its permissions, or both, in one write. */
  updateKey(keyId: string, changes: KeyChanges): Promise<KeyView> {
    return this.written(admin.updateKey(this.pool, keyId, changes, this.permissionNames));
  }

  roll(keyId: string, graceSeconds: number, options: RollOptions = {}): Promise<RollResult> {
    return this.written(admin.roll(this.pool, keyId, graceSeconds, options, this.environment));
  }

  revoke(keyId: string): Promise<KeyView> {
    return this.written(admin.revoke(this.pool, keyId));
  }

  import(document: unknown): Promise<{ accounts: number; keys: number }> {
    return this.written(
      admin.importDocument(this.pool, document, this.limitScopes, this.permissionNames),
    );
  }

  export(): Promise<KeysDocument> {
    return admin.exportDocument(this.pool);
  }

  /** One account as the database holds it, read by its id; `undefined` when there is none. */
  findAccount(accountId: string): Promise<AccountView | undefined> {
    return admin.findAccount(this.pool, accountId);
  }

  /** Every account and key as the database holds them, `last_used_at` included. */
  listAccounts(): Promise<AccountWithKeys[]> {
    return admin.listAccounts(this.pool);
  }

  private async written<T>(write: Promise<T>): Promise<T> {
    const result = await write;
    await this.sync();
    return result;
  }

  // Lookups: from memory only.

  keyRecords(): Iterable<KeyRecord> {
    return this.changes.ring.keyRecords();
  }

  recordsOfAccount(accountId: string): Iterable<KeyRecord> {
    return this.changes.ring.recordsOfAccount(accountId);
  }

  findBySecretKey(secretKey: string): KeyRecord | undefined {
    return this.noteUse(this.changes.ring.findBySecretKey(secretKey));
  }

  findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined {
    return this.noteUse(this.changes.ring.findByKeyPair(publishableKey, secretKey));
  }

  findByPublishableKey(publishableKey: string): KeyRecord | undefined {
    return this.changes.ring.findByPublishableKey(publishableKey);
  }

  /**
   * The key whose secret has this value, as `findBySecretKey` finds it, without counting as a use
   * of the key: for a lookup made about a key (a report that it was found in public), not with it.
   */
  peekBySecretKey(secretKey: string): KeyRecord | undefined {
    return this.changes.ring.findBySecretKey(secretKey);
  }

  findById(keyId: string): KeyRecord | undefined {
    return this.noteUse(this.changes.ring.findById(keyId));
  }

  private noteUse(record: KeyRecord | undefined): KeyRecord | undefined {
    if (record !== undefined && !record.revoked) this.used.set(record.id, performance.now());
    return record;
  }
}
