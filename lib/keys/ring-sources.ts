import type { Client } from 'pg';
import { WhitelistParser } from '../model/ip-whitelist';
import type { Role } from '../model/roles';
import { requireOptional } from '../optional-module';
import type { AccountLimits, LimitScopes } from '../model/key-record';
import { accountLimits, keyPermissions } from './key-rules';
import { PERMISSIONS } from '../model/permissions';
import { TAKEN, visitKeysFile } from './keys-file';
import { PackedTableBuilder } from './packed-builder';
import type { PackedTable } from './packed-table';

/**
 * The two ways a whole ring is built: from a keys file, from the database. Both run in the ring
 * worker (ring-worker.ts), off the request path; both can run in the calling thread too (tests).
 */

/**
 * What to build, the limit scopes an account's `limits` may name and the permissions a key's
 * `permissions` may name (key-rules.ts): they travel with the job, as the worker validates them.
 */
export type RingJob = (
  | { readonly kind: 'file'; readonly path: string }
  | { readonly kind: 'database'; readonly connectionString: string; readonly timeoutMs: number }
) & {
  /** Requests are served meanwhile (a reload, not the first load): a large build yields to them. */
  readonly background?: boolean | undefined;
  /** The scopes accounts' `limits` may name (see `KeyStoreLimitOptions`); defaults to none. */
  readonly limitScopes?: LimitScopes | undefined;
  /** The permission names, bit order (see `permissionNames()`); defaults to the seven built in. */
  readonly permissions?: readonly string[] | undefined;
  /** The table in shared memory (`sharedTable()`), for several threads to serve. */
  readonly shared?: boolean | undefined;
};

/**
 * What a build calls once it knows it is large and requests are served meanwhile (a keys file
 * over `LARGE_FILE_BYTES`; a database build made in the background, at its start): the ring
 * worker lowers its own thread's priority there. A small file's build never calls it.
 */
export interface BuildHooks {
  readonly large?: (() => void) | undefined;
}

/** About 16,000 keys: a build this big takes long enough for its priority to matter. */
export const LARGE_FILE_BYTES = 4 * 1024 * 1024;

export interface BuiltRing {
  readonly table: PackedTable;
  /** The database's change version the ring is at ('0' for a file). */
  readonly version: string;
  /** Accounts whose stored whitelist or limits are invalid: their keys are held as revoked. */
  readonly blocked: readonly { readonly account: string; readonly reason: string }[];
  /** Keys whose stored permissions are invalid: held as revoked. */
  readonly blockedKeys: readonly { readonly key: string; readonly reason: string }[];
}

export async function buildRingHere(job: RingJob, hooks: BuildHooks = {}): Promise<BuiltRing> {
  const large = job.background === true ? hooks.large : undefined;
  return job.kind === 'file'
    ? fromFile(job.path, job.limitScopes ?? {}, job.permissions ?? PERMISSIONS, large)
    : fromDatabase(job, large);
}

/**
 * Reads and validates a keys file one account at a time, straight into the builder;
 * a `ConfigurationError` names what is wrong.
 */
function fromFile(
  path: string,
  limitScopes: LimitScopes,
  permissions: readonly string[],
  large: (() => void) | undefined,
): BuiltRing {
  const builder = new PackedTableBuilder(permissions);
  visitKeysFile(
    path,
    {
      account: (id, ipWhitelist, limits) => {
        const index = builder.addAccount(id, ipWhitelist?.entries(), limits);
        return index < 0 ? TAKEN : index;
      },
      key: (account, key) => builder.addKey(account, key),
    },
    limitScopes,
    permissions,
    (bytes) => {
      if (bytes > LARGE_FILE_BYTES) large?.();
    },
  );
  return { table: builder.build(), version: '0', blocked: [], blockedKeys: [] };
}

/**
 * Half pace for a large database build made while requests are served: after every stretch of
 * work of `SLICE_MS` or more, a rest as long as the stretch. The worker thread already runs at a
 * low priority; resting also leaves the cores to what that does not cover, PostgreSQL's backend
 * above all. Such a build takes about twice as long. (Tried on the keys file too, it doubled the
 * reload's length and did not lower the worst wait: the file's read is not paced.)
 */
class Pacer {
  private since = performance.now();

  async rest(): Promise<void> {
    const worked = performance.now() - this.since;
    if (worked < SLICE_MS) return;
    await new Promise((resolve) => setTimeout(resolve, worked));
    this.since = performance.now();
  }
}

const SLICE_MS = 10;

const PAGE = 20_000;

/** An `accounts` row as the key store reads it (pg-key-store.ts adds its `version`). */
export interface AccountSql {
  id: string;
  ip_whitelist: string[] | null;
  /** jsonb: `null`, or an object the schema checks only the shape of. */
  limits: unknown;
}

/**
 * A stored account's limits, checked against `scopes` as the keys file's are: a value written past
 * the write API (by hand, or before a scope changed) throws, naming the account and the scope.
 */
export function storedLimits(row: AccountSql, scopes: LimitScopes): AccountLimits | undefined {
  if (row.limits === null) return undefined;
  return accountLimits(row.limits, 'limits', row.id, scopes, (where, problem) => {
    throw new Error(`${where}: ${problem}`);
  });
}

/** A `keys` row as the key store reads it (pg-key-store.ts adds its `version`). */
export interface KeySql {
  id: string;
  account_id: string;
  role: Role;
  publishable_key: string;
  secret_sha256: Buffer;
  expires_at: Date | null;
  revoked_at: Date | null;
  /** `null`: not restricted; the schema checks the names' shape, not that they exist. */
  permissions: string[] | null;
}

/**
 * A stored key's permissions as a mask over `names`, checked as the keys file's are: a name
 * written past the write API (by hand, or before a name was dropped) throws, naming the key and
 * the name; the caller holds the key as revoked.
 */
export function storedPermissions(row: KeySql, names: readonly string[]): number {
  return (
    keyPermissions(row.permissions, 'permissions', row.id, names, (where, problem) => {
      throw new Error(`${where}: ${problem}`);
    }) ?? 0
  );
}

/**
 * Every account and key in one snapshot, read in pages of 20,000 rows by id, and the change
 * version that snapshot is at: the store then asks for the rows after it.
 */
async function fromDatabase(
  job: Extract<RingJob, { kind: 'database' }>,
  large: (() => void) | undefined,
): Promise<BuiltRing> {
  // The store builds in the background only when more than `FULL_LOAD_ROWS` (5,000) keys changed,
  // so such a build is large from its first step, the driver's loading included.
  large?.();
  const background = large !== undefined;
  const pg = requireOptional('pg', 'TOLLGATE_DATABASE_URL (the PostgreSQL key store)');
  const client: Client = new pg.Client({
    connectionString: job.connectionString,
    connectionTimeoutMillis: job.timeoutMs,
    query_timeout: Math.max(job.timeoutMs, 60_000),
  });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const top = await client.query<{ version: string }>(
      `SELECT greatest(
         (SELECT coalesce(max(version), 0) FROM accounts),
         (SELECT coalesce(max(version), 0) FROM keys),
         (SELECT coalesce(max(version), 0) FROM deletions))::text AS version`,
    );
    const names = job.permissions ?? PERMISSIONS;
    const builder = new PackedTableBuilder(names);
    const accounts = new Map<string, number>();
    const blocked: { account: string; reason: string }[] = [];
    const blockedKeys: { key: string; reason: string }[] = [];
    const whitelists = new WhitelistParser();
    await pages<AccountSql>(
      client,
      'SELECT id, ip_whitelist, limits FROM accounts',
      background,
      (row) => {
        let list: readonly string[] | undefined | 'blocked';
        let limits: AccountLimits | undefined;
        try {
          list =
            row.ip_whitelist === null ? undefined : whitelists.parse(row.ip_whitelist).entries();
          limits = storedLimits(row, job.limitScopes ?? {});
        } catch (error) {
          list = 'blocked';
          blocked.push({ account: row.id, reason: (error as Error).message });
        }
        accounts.set(row.id, builder.addAccount(row.id, list, limits));
      },
    );
    await pages<KeySql>(
      client,
      `SELECT id, account_id, role, publishable_key, secret_sha256, expires_at, revoked_at, permissions
       FROM keys`,
      background,
      (row) => {
        const account = accounts.get(row.account_id);
        if (account === undefined) return; // the foreign key forbids it
        let permissionMask = 0;
        let blockedKey = false;
        try {
          permissionMask = storedPermissions(row, names);
        } catch (error) {
          blockedKey = true;
          blockedKeys.push({ key: row.id, reason: (error as Error).message });
        }
        builder.addKey(account, {
          id: row.id,
          role: row.role,
          publishableKey: row.publishable_key,
          secretKeySha256: row.secret_sha256,
          revoked: row.revoked_at !== null || blockedKey,
          expiresAt: row.expires_at?.getTime(),
          permissionMask,
        });
      },
    );
    await client.query('COMMIT');
    return {
      table: builder.build(),
      version: top.rows[0]?.version ?? '0',
      blocked,
      blockedKeys,
    };
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Reads `select` in pages ordered by id (keyset pagination), handing each row to `each`. A build
 * made while requests are served (`background`) reads small pages at half pace (`Pacer`) from the
 * first: PostgreSQL's backend and this worker then work in bursts of a few milliseconds and the
 * request thread keeps the rest.
 */
// eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters -- the row type of `select`
async function pages<Row extends { id: string }>(
  client: Client,
  select: string,
  background: boolean,
  each: (row: Row) => void,
): Promise<void> {
  let after = '';
  const size = background ? BACKGROUND_PAGE : PAGE;
  const pacer = background ? new Pacer() : undefined;
  for (;;) {
    const { rows } = await client.query<Row>(`${select} WHERE id > $1 ORDER BY id LIMIT ${size}`, [
      after,
    ]);
    for (const row of rows) each(row);
    const last = rows[rows.length - 1];
    if (last === undefined || rows.length < size) return;
    after = last.id;
    await pacer?.rest();
  }
}

/** The page size of a build made while requests are served. */
const BACKGROUND_PAGE = 2000;
