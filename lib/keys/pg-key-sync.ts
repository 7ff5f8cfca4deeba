import type { Client, ClientConfig, Notification, Pool } from 'pg';
import type { Logger } from '../model/logger';
import type { LimitScopes } from '../model/key-record';
import { LiveKeyRing } from './live-key-ring';
import { PackedKeyRing } from './packed-key-ring';
import { type BuiltRing, buildRing } from './ring-build';
import {
  ChangeReader,
  type ChangedRows,
  type AccountSql,
  type DeletionSql,
  type KeySql,
  logBlockedAccount,
  logBlockedKey,
  type RingFeed,
} from './pg-changes';
import { FULL_LOAD_ROWS, NOTIFY_CHANNEL, type PgKeyStoreState } from './pg-key-views';

/**
 * The half of the database key store that keeps this instance's ring in step with the database
 * (pg-key-store.ts describes how): the first load, the changes announced by NOTIFY on
 * `tollgate_keys` and found by the version backstop, whole rebuilds in the worker, and the state
 * (`ready` or `stale`) with its log lines. It reads the database and never writes it.
 */

const LATEST_VERSION = `SELECT greatest(
  (SELECT coalesce(max(version), 0) FROM accounts),
  (SELECT coalesce(max(version), 0) FROM keys),
  (SELECT coalesce(max(version), 0) FROM deletions))::text AS version`;

/** The listener's state from construction until its first connection succeeds or fails. */
const NOT_LISTENING_YET = 'not connected yet';
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5000;

/** What the syncing half is given by the store. */
export interface PgKeySyncSettings {
  readonly connectionString: string;
  readonly timeoutMs: number;
  readonly clientConfig: ClientConfig;
  readonly logger: Logger | undefined;
  readonly limitScopes: LimitScopes;
  readonly permissionNames: readonly string[];
  readonly pollIntervalMs: number;
  /** Given every ring and batch of changes once in force, for other threads to follow. */
  readonly feed?: RingFeed | undefined;
}

export class PgKeySync {
  /** The ring in force: every lookup reads it. */
  ring = new LiveKeyRing();
  /** True once the first ring is in. */
  loaded = false;
  private readonly connectionString: string;
  private readonly timeoutMs: number;
  private readonly logger: Logger | undefined;
  private readonly clientConfig: ClientConfig;
  private readonly limitScopes: LimitScopes;
  private readonly permissionNames: readonly string[];
  private readonly reader: ChangeReader;
  private readonly feed: RingFeed | undefined;
  /** Rows applied over the base, each counted: what a follower replays after the base. */
  private rowsOverBase = 0;
  private version = 0n;
  private lastSyncAt = 0;
  /** Why the last sync failed; `undefined` once one succeeds. */
  syncFault: string | undefined;
  private listenFault: string | undefined = NOT_LISTENING_YET;
  private listener: Client | undefined;
  private reconnectDelay = RECONNECT_MIN_MS;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private readonly pollTimer: NodeJS.Timeout;
  /** The sync running, and whether another was asked for while it ran. */
  private running: Promise<void> | undefined;
  private again = false;
  /** A whole ring being built in the worker while the ring in force takes the later changes. */
  private building: Promise<void> | undefined;
  /** That ring once built, for the next sync to swap in. */
  private built: BuiltRing | undefined;
  /** The version to read from again, after a build failed. */
  private rewindTo: bigint | undefined;
  private closed = false;
  private lastStatus: PgKeyStoreState['status'] | undefined;

  constructor(
    private readonly pool: Pool,
    settings: PgKeySyncSettings,
    private readonly pg: typeof import('pg'),
  ) {
    this.connectionString = settings.connectionString;
    this.timeoutMs = settings.timeoutMs;
    this.clientConfig = settings.clientConfig;
    this.logger = settings.logger;
    this.limitScopes = settings.limitScopes;
    this.permissionNames = settings.permissionNames;
    this.reader = new ChangeReader(this.limitScopes, this.permissionNames, this.logger);
    this.feed = settings.feed;
    this.pollTimer = setInterval(() => {
      void this.backstop();
    }, settings.pollIntervalMs);
    this.pollTimer.unref();
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
        const rows = await this.readSince(built.version);
        const version = this.apply(ring, BigInt(built.version), rows);
        // The new ring, with the changes after its snapshot: in force in one assignment.
        this.ring = ring;
        this.version = version;
        this.loaded = true;
        this.rowsOverBase = countRows(rows);
        this.feed?.base(built.table, rows);
      } else {
        if (this.building === undefined && (await this.wantsFullLoad())) await this.startBuild();
        const rows = await this.readSince(this.version);
        const version = this.apply(this.ring, this.version, rows);
        if (version !== this.version) {
          this.version = version;
          this.rowsOverBase += countRows(rows);
          this.feed?.changes(rows);
        }
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
      shared: this.feed !== undefined,
    });
    for (const { account, reason } of built.blocked) {
      logBlockedAccount(this.logger, account, reason);
    }
    for (const { key, reason } of built.blockedKeys) logBlockedKey(this.logger, key, reason);
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
    // Followers replay every row applied over the base, so with them every row counts.
    const layer = this.feed === undefined ? this.ring.changes : this.rowsOverBase;
    if (layer > Math.max(FULL_LOAD_ROWS, this.ring.size / 16)) return true;
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
    const read = this.reader.read(rows, version);
    if (read.version !== version) ring.apply(read.changes);
    return read.version;
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

  /** Starts listening for changes (reconnecting with backoff when the connection drops). */
  async listen(): Promise<void> {
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
    this.feed?.state(state);
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

  /** Stops listening and polling, and waits for a sync or build under way. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.pollTimer);
    if (this.reconnectTimer !== undefined) clearTimeout(this.reconnectTimer);
    await this.building;
    await this.running;
    const listener = this.listener;
    this.listener = undefined;
    if (listener !== undefined) {
      listener.removeAllListeners('end');
      await listener.end().catch(() => undefined);
    }
  }
}

function countRows(rows: ChangedRows): number {
  return rows.accounts.length + rows.keys.length + rows.deletions.length;
}

function describe(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? error.message : String(error);
  return typeof code === 'string' ? `${code} ${message}` : message;
}
