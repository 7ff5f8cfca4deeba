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
import type { Client, ClientConfig, Notification, Pool } from 'pg';
import { IpWhitelist } from '../model/ip-whitelist';
import { requireOptional } from '../optional-module';
import type { Logger } from '../model/logger';
import type { KeyEnvironment } from '../model/key-format';
import type {
  AccountLimits,
  KeyDirectory,
  KeyReadiness,
  KeyRecord,
  KeyStore,
  LimitScopes,
} from '../model/key-record';
import { type AccountRow, type KeyRow, LiveKeyRing, type RingChanges } from './live-key-ring';
import { PackedKeyRing } from './packed-key-ring';
import { type BuiltRing, buildRing } from './ring-build';
import {
  type AccountSql as RingAccountSql,
  type KeySql as RingKeySql,
  storedLimits,
  storedPermissions,
} from './ring-sources';
import { permissionNames, PermissionSets } from '../model/permissions';
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
} from './pg-key-views';
import { migrate } from './pg-schema';
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

export const NOTIFY_CHANNEL = 'tollgate_keys';

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

type AccountSql = RingAccountSql & { version: string };
type KeySql = RingKeySql & { version: string };
interface DeletionSql {
  table_name: string;
  id: string;
  version: string;
}
interface ChangedRows {
  accounts: AccountSql[];
  keys: KeySql[];
  deletions: DeletionSql[];
}

const LATEST_VERSION = `SELECT greatest(
  (SELECT coalesce(max(version), 0) FROM accounts),
  (SELECT coalesce(max(version), 0) FROM keys),
  (SELECT coalesce(max(version), 0) FROM deletions))::text AS version`;

/**
 * How much longer the client waits for a statement than PostgreSQL lets it run
 * (`statement_timeout`): the server cancels first, so a statement past its time has surely not
 * run. A timeout on the client alone leaves the statement in the server, where a write queued on a
 * lock (a `last_used_at` flush behind a bulk UPDATE) runs later, after the caller was told it
 * failed, and such writes pile up one per flush for as long as the lock is held.
 */
const CLIENT_GRACE_MS = 250;
/** The listener's state from construction until its first connection succeeds or fails. */
const NOT_LISTENING_YET = 'not connected yet';
const RECONNECT_MIN_MS = 100;
/** More changed keys than this in one sync: a new ring is built in the worker instead. */
export const FULL_LOAD_ROWS = 5000;
const RECONNECT_MAX_MS = 5000;

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

export class PgKeyStore implements KeyStore, KeyDirectory, KeyReadiness, KeyAdmin {
  private ring = new LiveKeyRing();
  private loaded = false;
  private readonly connectionString: string;
  private readonly timeoutMs: number;
  private readonly logger: Logger | undefined;
  private readonly clientConfig: ClientConfig;
  private readonly environment: KeyEnvironment;
  /** The scopes an account's `limits` may name. */
  readonly limitScopes: LimitScopes;
  /** The names a key's `permissions` may hold. */
  readonly permissionNames: readonly string[];
  /** One set per distinct list of the keys changed since the base. */
  private readonly permissionSets: PermissionSets;
  private version = 0n;
  private lastSyncAt = 0;
  private syncFault: string | undefined;
  private listenFault: string | undefined = NOT_LISTENING_YET;
  private listener: Client | undefined;
  private reconnectDelay = RECONNECT_MIN_MS;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private readonly pollTimer: NodeJS.Timeout;
  private readonly flushTimer: NodeJS.Timeout;
  /** The sync running, and whether another was asked for while it ran. */
  private running: Promise<void> | undefined;
  private again = false;
  /** A whole ring being built in the worker while the ring in force takes the later changes. */
  private building: Promise<void> | undefined;
  /** That ring once built, for the next sync to swap in. */
  private built: BuiltRing | undefined;
  /** The version to read from again, after a build failed. */
  private rewindTo: bigint | undefined;
  /** The keys used since the last flush: key id to the time of its last use (`performance.now()`). */
  private used = new Map<string, number>();
  private closed = false;
  private lastStatus: PgKeyStoreState['status'] | undefined;

  private constructor(
    private readonly pool: Pool,
    options: PgKeyStoreOptions,
    private readonly pg: typeof import('pg'),
  ) {
    this.logger = options.logger;
    this.environment = options.keyEnvironment ?? 'test';
    this.limitScopes = { ...(options.limitScopes ?? {}) };
    this.permissionNames = permissionNames(options.permissions, 'PgKeyStore');
    this.permissionSets = new PermissionSets(this.permissionNames);
    const timeout = options.queryTimeoutMs ?? 5000;
    this.connectionString = options.connectionString;
    this.timeoutMs = timeout;
    this.clientConfig = {
      connectionString: options.connectionString,
      connectionTimeoutMillis: timeout,
      statement_timeout: timeout,
      query_timeout: timeout + CLIENT_GRACE_MS,
      keepAlive: true,
    };
    this.pollTimer = setInterval(() => {
      void this.backstop();
    }, options.pollIntervalMs ?? 500);
    this.pollTimer.unref();
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
      store = new PgKeyStore(pool, options, pg);
      await store.sync();
      if (store.syncFault !== undefined) throw new Error(store.syncFault);
      await store.listen();
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
    return this.loaded;
  }

  /** Keys in force. */
  get size(): number {
    return this.ring.size;
  }

  state(): PgKeyStoreState {
    const reason = this.syncFault ?? this.listenFault;
    return {
      status: reason === undefined ? 'ready' : 'stale',
      reason,
      lastSyncAt: this.lastSyncAt,
      version: this.version.toString(),
      keys: this.ring.size,
    };
  }

  /**
   * Brings the ring up to the database's latest version. Calls while one runs share one more
   * run after it, so a storm of notifications costs at most two queries in a row. Never rejects:
   * a failure leaves the keys in force and the store stale.
   */
  sync(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.running !== undefined) {
      this.again = true;
      return this.running;
    }
    const run = async (): Promise<void> => {
      do {
        this.again = false;
        await this.fetchChanges();
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by sync() calls meanwhile
      } while (this.again && !this.closed);
    };
    this.running = run().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async fetchChanges(): Promise<void> {
    try {
      if (this.rewindTo !== undefined) {
        // A build failed: read its changes again (rows are whole states: applying twice is safe).
        if (this.rewindTo < this.version) this.version = this.rewindTo;
        this.rewindTo = undefined;
      }
      const built = this.built ?? (this.loaded ? undefined : await this.buildWhole());
      this.built = undefined;
      if (built !== undefined) {
        const ring = new LiveKeyRing(new PackedKeyRing(built.table));
        const version = this.apply(
          ring,
          BigInt(built.version),
          await this.readSince(built.version),
        );
        // The new ring, with the changes after its snapshot: in force in one assignment.
        this.ring = ring;
        this.version = version;
        this.loaded = true;
      } else {
        if (this.building === undefined && (await this.wantsFullLoad())) await this.startBuild();
        this.version = this.apply(this.ring, this.version, await this.readSince(this.version));
      }
      this.lastSyncAt = Date.now();
      this.setFault('sync', undefined);
    } catch (error) {
      this.setFault('sync', `database unreachable: ${describe(error)}`);
    }
  }

  /** Every row, read and packed in the worker. */
  private async buildWhole(): Promise<BuiltRing> {
    const built = await buildRing({
      kind: 'database',
      connectionString: this.connectionString,
      timeoutMs: this.timeoutMs,
      background: this.loaded,
      limitScopes: this.limitScopes,
      permissions: this.permissionNames,
    });
    for (const { account, reason } of built.blocked) this.logBlocked(account, reason);
    for (const { key, reason } of built.blockedKeys) this.logBlockedKey(key, reason);
    return built;
  }

  /**
   * Starts a whole build in the worker and leaves every change up to the database's latest
   * version to it; the changes after that keep coming to the ring in force, entry by entry, so a
   * revocation made during a long build is in force at once. The next sync swaps the build in.
   */
  private async startBuild(): Promise<void> {
    const before = this.version;
    const top = await this.pool.query<{ version: string }>(LATEST_VERSION);
    this.version = BigInt(top.rows[0]?.version ?? '0');
    this.building = this.buildWhole()
      .then(
        (built) => {
          this.built = built;
        },
        (error: unknown) => {
          this.rewindTo = before;
          this.setFault('sync', `database unreachable: ${describe(error)}`);
        },
      )
      .finally(() => {
        this.building = undefined;
        void this.sync();
      });
  }

  /** The first load; many keys changed since ours; or a layer of changes grown too big. */
  private async wantsFullLoad(): Promise<boolean> {
    if (!this.loaded) return true;
    if (this.ring.changes > Math.max(FULL_LOAD_ROWS, this.ring.size / 16)) return true;
    const result = await this.pool.query<{ changed: string }>(
      `SELECT count(*)::text AS changed
       FROM (SELECT 1 FROM keys WHERE version > $1 LIMIT ${FULL_LOAD_ROWS + 1}) AS changed`,
      [this.version.toString()],
    );
    return Number(result.rows[0]?.changed ?? 0) > FULL_LOAD_ROWS;
  }

  /** The rows changed after `version`, in one snapshot. */
  private async readSince(version: bigint | string): Promise<ChangedRows> {
    const since = version.toString();
    const client = await this.pool.connect();
    try {
      // One snapshot for the three reads: versions commit in order (the schema's lock).
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const accounts = (
        await client.query<AccountSql>(
          'SELECT id, ip_whitelist, limits, version FROM accounts WHERE version > $1',
          [since],
        )
      ).rows;
      const keys = (
        await client.query<KeySql>(
          `SELECT id, account_id, role, publishable_key, secret_sha256, expires_at, revoked_at,
             permissions, version
           FROM keys WHERE version > $1`,
          [since],
        )
      ).rows;
      const deletions = (
        await client.query<DeletionSql>(
          'SELECT table_name, id, version FROM deletions WHERE version > $1',
          [since],
        )
      ).rows;
      await client.query('COMMIT');
      client.release();
      return { accounts, keys, deletions };
    } catch (error) {
      client.release(true);
      throw error;
    }
  }

  /** Applies one fetched batch to `ring` in one synchronous step; the version it is at now. */
  private apply(ring: LiveKeyRing, version: bigint, rows: ChangedRows): bigint {
    const { accounts, keys, deletions } = rows;
    let top = version;
    const bump = (version: string): void => {
      const value = BigInt(version);
      if (value > top) top = value;
    };
    const present = new Set([...accounts.map((a) => `a:${a.id}`), ...keys.map((k) => `k:${k.id}`)]);
    const changes: RingChanges = {
      accounts: accounts.map((row) => {
        bump(row.version);
        return this.accountRow(row);
      }),
      keys: keys.map((row) => {
        bump(row.version);
        return this.keyRow(row);
      }),
      deletedAccounts: [],
      deletedKeys: [],
    };
    for (const row of deletions) {
      bump(row.version);
      const kind = row.table_name === 'accounts' ? 'a' : 'k';
      if (present.has(`${kind}:${row.id}`)) continue; // deleted, then made again
      (kind === 'a'
        ? (changes.deletedAccounts as string[])
        : (changes.deletedKeys as string[])
      ).push(row.id);
    }
    if (top !== version) ring.apply(changes);
    return top;
  }

  private accountRow(row: AccountSql): AccountRow {
    try {
      const limits: AccountLimits | undefined = storedLimits(row, this.limitScopes);
      const ipWhitelist =
        row.ip_whitelist === null ? undefined : IpWhitelist.parse(row.ip_whitelist);
      return { id: row.id, ipWhitelist, limits, blocked: false };
    } catch (error) {
      // Written by hand past the API's checks: fail closed rather than lift the restriction.
      this.logBlocked(row.id, (error as Error).message);
      return { id: row.id, ipWhitelist: undefined, blocked: true };
    }
  }

  private keyRow(row: KeySql): KeyRow {
    let permissions: ReadonlySet<string> | undefined;
    let blocked = false;
    try {
      permissions = this.permissionSets.of(storedPermissions(row, this.permissionNames));
    } catch (error) {
      // A name this gateway does not know, written by hand: refuse the key rather than guess.
      this.logBlockedKey(row.id, (error as Error).message);
      blocked = true;
    }
    return {
      id: row.id,
      accountId: row.account_id,
      role: row.role,
      publishableKey: row.publishable_key,
      secretKeySha256: row.secret_sha256,
      revoked: row.revoked_at !== null || blocked,
      expiresAt: row.expires_at === null ? undefined : row.expires_at.getTime(),
      permissions,
    };
  }

  private logBlockedKey(key: string, reason: string): void {
    this.logger?.error(
      { event: 'keys.key_blocked', key, reason },
      'key permissions in the database are invalid: the key is refused until fixed',
    );
  }

  private logBlocked(account: string, reason: string): void {
    this.logger?.error(
      { event: 'keys.account_blocked', account, reason },
      'account whitelist or limits in the database are invalid: its keys are refused until fixed',
    );
  }

  /** The backstop: a cheap `max(version)` first, then the rows after ours when it moved. */
  private async backstop(): Promise<void> {
    if (this.closed || this.running !== undefined) return;
    try {
      const result = await this.pool.query<{ version: string }>(LATEST_VERSION);
      if (BigInt(result.rows[0]?.version ?? '0') > this.version) {
        await this.sync();
      } else {
        this.lastSyncAt = Date.now();
        this.setFault('sync', undefined);
      }
    } catch (error) {
      this.setFault('sync', `database unreachable: ${describe(error)}`);
    }
  }

  private async listen(): Promise<void> {
    if (this.closed) return;
    const client = new this.pg.Client(this.clientConfig);
    client.on('error', (error) => {
      this.listenerLost(client, error);
    });
    client.on('end', () => {
      this.listenerLost(client, new Error('connection closed'));
    });
    client.on('notification', (message: Notification) => {
      if (message.channel === NOTIFY_CHANNEL) this.notified(message.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${NOTIFY_CHANNEL}`);
    } catch (error) {
      this.listenerLost(client, error);
      return;
    }
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- close() may have run meanwhile
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.listener = client;
    this.reconnectDelay = RECONNECT_MIN_MS;
    this.setFault('listen', undefined);
    // Changes made while nobody listened: fetch them now.
    void this.sync();
  }

  private notified(payload: string | undefined): void {
    try {
      const { version } = JSON.parse(payload ?? '{}') as { version?: unknown };
      if (typeof version === 'number' && BigInt(version) <= this.version) return;
    } catch {
      // An unreadable payload: sync anyway.
    }
    void this.sync();
  }

  private listenerLost(client: Client, error: unknown): void {
    if (this.listener !== undefined && this.listener !== client) return;
    if (this.reconnectTimer !== undefined) return;
    this.listener = undefined;
    client.removeAllListeners('end');
    client.on('error', () => undefined);
    void client.end().catch(() => undefined);
    if (this.closed) return;
    this.setFault('listen', `change notifications lost: ${describe(error)}`);
    const delay = this.reconnectDelay;
    this.reconnectDelay = Math.min(delay * 2, RECONNECT_MAX_MS);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      void this.listen();
    }, delay);
    this.reconnectTimer.unref();
  }

  private setFault(which: 'sync' | 'listen', reason: string | undefined): void {
    if (which === 'sync') this.syncFault = reason;
    else this.listenFault = reason;
    const state = this.state();
    // Opening: the first load is in and the listener is still connecting. Nothing is out of
    // reach yet; the listener's connection, or its failure, decides what is logged next.
    if (state.reason === NOT_LISTENING_YET) return;
    if (state.status === this.lastStatus) return;
    this.lastStatus = state.status;
    if (state.status === 'stale') {
      this.logger?.warn(
        { event: 'keys.stale', reason: state.reason, last_sync_at: new Date(state.lastSyncAt) },
        'key database unreachable: the last keys loaded stay in force',
      );
    } else {
      this.logger?.info({ event: 'keys.in_sync', version: state.version }, 'key database in step');
    }
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
    clearInterval(this.pollTimer);
    clearInterval(this.flushTimer);
    if (this.reconnectTimer !== undefined) clearTimeout(this.reconnectTimer);
    await this.building;
    await this.running;
    await this.flushLastUsed();
    const listener = this.listener;
    this.listener = undefined;
    if (listener !== undefined) {
      listener.removeAllListeners('end');
      await listener.end().catch(() => undefined);
    }
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
    return this.ring.keyRecords();
  }

  recordsOfAccount(accountId: string): Iterable<KeyRecord> {
    return this.ring.recordsOfAccount(accountId);
  }

  findBySecretKey(secretKey: string): KeyRecord | undefined {
    return this.noteUse(this.ring.findBySecretKey(secretKey));
  }

  findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined {
    return this.noteUse(this.ring.findByKeyPair(publishableKey, secretKey));
  }

  findByPublishableKey(publishableKey: string): KeyRecord | undefined {
    return this.ring.findByPublishableKey(publishableKey);
  }

  /**
   * The key whose secret has this value, as `findBySecretKey` finds it, without counting as a use
   * of the key: for a lookup made about a key (a report that it was found in public), not with it.
   */
  peekBySecretKey(secretKey: string): KeyRecord | undefined {
    return this.ring.findBySecretKey(secretKey);
  }

  findById(keyId: string): KeyRecord | undefined {
    return this.noteUse(this.ring.findById(keyId));
  }

  private noteUse(record: KeyRecord | undefined): KeyRecord | undefined {
    if (record !== undefined && !record.revoked) this.used.set(record.id, performance.now());
    return record;
  }
}

function describe(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? error.message : String(error);
  return typeof code === 'string' ? `${code} ${message}` : message;
}
