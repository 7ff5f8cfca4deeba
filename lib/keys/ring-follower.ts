import type { KeyDirectory, KeyRecord, KeyStore, LimitScopes } from '../model/key-record';
import { LiveKeyRing } from './live-key-ring';
import { PackedKeyRing } from './packed-key-ring';
import type { PackedTable } from './packed-table';
import { type ChangedRows, ChangeReader, type RingFeed } from './pg-changes';
import type { PgKeyStoreState } from './pg-key-views';

/** One thing the database store told of its ring, as it crosses to another thread. */
export type RingNews =
  /** A new base, with the rows applied over it since its snapshot. */
  | { readonly kind: 'base'; readonly table: PackedTable; readonly rows: ChangedRows }
  /** One batch of rows, applied to the ring in force. */
  | { readonly kind: 'changes'; readonly rows: ChangedRows }
  /** The store's state after a sync. */
  | { readonly kind: 'state'; readonly state: PgKeyStoreState };

/**
 * Where a follower starts: the base in force, the rows applied over it since, the state, and the
 * store's limit scopes and permission names, by which it reads the rows.
 */
export interface RingFollowerStart {
  readonly table: PackedTable;
  readonly rows: readonly ChangedRows[];
  readonly state: PgKeyStoreState;
  readonly limitScopes: LimitScopes;
  readonly permissionNames: readonly string[];
}

/**
 * The database key store's ring as another thread of the same host holds it (its
 * `openSharedPgKeyStore()`): the same packed base, in shared memory, and its own small layer of
 * the changes since, made of the same rows, applied in the same order. Each base and each batch
 * is put in force in one synchronous step, so a lookup sees the ring wholly before or wholly
 * after it. That thread alone talks to the database; this one remembers which keys it served, for
 * it to write their last use (`takeUses()`).
 */
export class RingFollower implements KeyStore, Required<KeyDirectory> {
  private ring: LiveKeyRing;
  private readonly reader: ChangeReader;
  private store: PgKeyStoreState;
  private used = new Map<string, number>();

  constructor(start: RingFollowerStart) {
    // Rows another thread refused are logged there, once.
    this.reader = new ChangeReader(start.limitScopes, start.permissionNames, undefined);
    this.ring = this.ringOf(start.table, start.rows);
    this.store = start.state;
  }

  /** Puts in force what the store told, in one synchronous step; news must come in its order. */
  hear(news: RingNews): void {
    switch (news.kind) {
      case 'base':
        this.ring = this.ringOf(news.table, [news.rows]);
        return;
      case 'changes':
        this.ring.apply(this.reader.changesOf(news.rows));
        return;
      case 'state':
        this.store = news.state;
        return;
    }
  }

  state(): PgKeyStoreState {
    return { ...this.store, keys: this.ring.size };
  }

  /** A follower starts from a ring in force. */
  readonly ready = true;

  get size(): number {
    return this.ring.size;
  }

  /** The keys served since the last call, each with how many milliseconds ago it was last used. */
  takeUses(): [string, number][] {
    if (this.used.size === 0) return [];
    const now = performance.now();
    const uses = [...this.used].map(([id, at]): [string, number] => [id, now - at]);
    this.used = new Map();
    return uses;
  }

  private ringOf(table: PackedTable, batches: readonly ChangedRows[]): LiveKeyRing {
    const ring = new LiveKeyRing(new PackedKeyRing(table));
    for (const rows of batches) ring.apply(this.reader.changesOf(rows));
    return ring;
  }

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

  /** As `findBySecretKey`, without counting as a use of the key. */
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

/** The store a broadcast starts followers from. */
interface Broadcaster {
  state(): PgKeyStoreState;
  readonly limitScopes: LimitScopes;
  readonly permissionNames: readonly string[];
}

/**
 * The feed of a database store whose ring other threads follow: each thing it tells is passed on
 * at once (`tell`, to every follower running), and kept as where a follower started later begins,
 * the base in force and every batch applied since (the store builds a new base before that list
 * grows past a sixteenth of the keys).
 */
export class RingBroadcast implements RingFeed {
  private table: PackedTable | undefined;
  private rows: ChangedRows[] = [];

  constructor(private readonly tell: (news: RingNews) => void) {}

  base(table: PackedTable, rows: ChangedRows): void {
    this.table = table;
    this.rows = [rows];
    this.tell({ kind: 'base', table, rows });
  }

  changes(rows: ChangedRows): void {
    this.rows.push(rows);
    this.tell({ kind: 'changes', rows });
  }

  state(state: PgKeyStoreState): void {
    this.tell({ kind: 'state', state });
  }

  /** Where a follower starts now, from `store`'s ring. */
  start(store: Broadcaster): RingFollowerStart {
    if (this.table === undefined) throw new Error('the key database store has no ring yet');
    return {
      table: this.table,
      rows: [...this.rows],
      state: store.state(),
      limitScopes: store.limitScopes,
      permissionNames: store.permissionNames,
    };
  }
}
