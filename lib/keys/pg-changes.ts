import { IpWhitelist } from '../model/ip-whitelist';
import type { Logger } from '../model/logger';
import type { AccountLimits, LimitScopes } from '../model/key-record';
import { PermissionSets } from '../model/permissions';
import type { AccountRow, KeyRow, RingChanges } from './live-key-ring';
import type { PackedTable } from './packed-table';
import type { PgKeyStoreState } from './pg-key-views';
import {
  type AccountSql as RingAccountSql,
  type KeySql as RingKeySql,
  storedLimits,
  storedPermissions,
} from './ring-sources';

/**
 * The rows the database key store reads after a version, and how they become one batch of ring
 * changes. The rows are plain data: a thread that follows another's ring (ring-follower.ts) is
 * sent them as they were read and makes the same batch of them.
 */

export type AccountSql = RingAccountSql & { version: string };
export type KeySql = RingKeySql & { version: string };
export interface DeletionSql {
  table_name: string;
  id: string;
  version: string;
}

/** The rows changed after a version, read in one snapshot. */
export interface ChangedRows {
  readonly accounts: readonly AccountSql[];
  readonly keys: readonly KeySql[];
  readonly deletions: readonly DeletionSql[];
}

/**
 * What a store whose ring other threads follow tells them, in the order it happens: each new base
 * (built in shared memory) with the rows applied over it, each batch of rows applied since, and
 * its state after every sync. A follower that applies them in that order holds the same ring.
 */
export interface RingFeed {
  base(table: PackedTable, rows: ChangedRows): void;
  changes(rows: ChangedRows): void;
  state(state: PgKeyStoreState): void;
}

/** Makes ring changes of changed rows, by the store's limit scopes and permission names. */
export class ChangeReader {
  /** One set per distinct list of the keys changed since the base. */
  private readonly permissionSets: PermissionSets;

  constructor(
    private readonly limitScopes: LimitScopes,
    private readonly permissionNames: readonly string[],
    /** Where a row refused as invalid is logged; a follower leaves that to the thread it follows. */
    private readonly logger: Logger | undefined,
  ) {
    this.permissionSets = new PermissionSets(permissionNames);
  }

  /** The batch the rows make, whatever version the ring is at. */
  changesOf(rows: ChangedRows): RingChanges {
    return this.read(rows, 0n).changes;
  }

  /** The batch the rows make, and the version it brings a ring at `version` to. */
  read(rows: ChangedRows, version: bigint): { changes: RingChanges; version: bigint } {
    const { accounts, keys, deletions } = rows;
    let top = version;
    const bump = (version: string): void => {
      const value = BigInt(version);
      if (value > top) top = value;
    };
    const present = new Set([...accounts.map((a) => `a:${a.id}`), ...keys.map((k) => `k:${k.id}`)]);
    const deletedAccounts: string[] = [];
    const deletedKeys: string[] = [];
    const changes: RingChanges = {
      accounts: accounts.map((row) => {
        bump(row.version);
        return this.accountRow(row);
      }),
      keys: keys.map((row) => {
        bump(row.version);
        return this.keyRow(row);
      }),
      deletedAccounts,
      deletedKeys,
    };
    for (const row of deletions) {
      bump(row.version);
      const kind = row.table_name === 'accounts' ? 'a' : 'k';
      if (present.has(`${kind}:${row.id}`)) continue; // deleted, then made again
      (kind === 'a' ? deletedAccounts : deletedKeys).push(row.id);
    }
    return { changes, version: top };
  }

  private accountRow(row: AccountSql): AccountRow {
    try {
      const limits: AccountLimits | undefined = storedLimits(row, this.limitScopes);
      const ipWhitelist =
        row.ip_whitelist === null ? undefined : IpWhitelist.parse(row.ip_whitelist);
      return { id: row.id, ipWhitelist, limits, blocked: false };
    } catch (error) {
      // Written by hand past the API's checks: fail closed rather than lift the restriction.
      logBlockedAccount(this.logger, row.id, (error as Error).message);
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
      logBlockedKey(this.logger, row.id, (error as Error).message);
      blocked = true;
    }
    return {
      id: row.id,
      accountId: row.account_id,
      role: row.role,
      publishableKey: row.publishable_key,
      // A row sent to another thread arrives with its digest as a plain Uint8Array.
      secretKeySha256: Buffer.isBuffer(row.secret_sha256)
        ? row.secret_sha256
        : Buffer.from(row.secret_sha256),
      revoked: row.revoked_at !== null || blocked,
      expiresAt: row.expires_at === null ? undefined : row.expires_at.getTime(),
      permissions,
    };
  }
}

export function logBlockedKey(logger: Logger | undefined, key: string, reason: string): void {
  logger?.error(
    { event: 'keys.key_blocked', key, reason },
    'key permissions in the database are invalid: the key is refused until fixed',
  );
}

export function logBlockedAccount(
  logger: Logger | undefined,
  account: string,
  reason: string,
): void {
  logger?.error(
    { event: 'keys.account_blocked', account, reason },
    'account whitelist or limits in the database are invalid: its keys are refused until fixed',
  );
}
