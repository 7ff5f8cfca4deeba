import { randomBytes } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { OWNER_ROLE, type Role } from '../model/roles';
import {
  ConflictError,
  InvalidRequestError,
  KeyAlreadyRolledError,
  KeyNotRollableError,
  TollgateError,
} from '../errors';
import { sha256 } from './key-digest';
import { generateKey, type KeyEnvironment } from '../model/key-format';
import * as rules from './key-rules';
import type { AccountLimits, LimitScopes } from '../model/key-record';
import { parseKeysDocument } from './keys-file';
import { PERMISSIONS, permissionsOfMask } from '../model/permissions';
import type {
  AccountView,
  AccountWithKeys,
  CreateKeyOptions,
  KeyChanges,
  KeysDocument,
  KeyView,
  NewKey,
  RollOptions,
  RollResult,
} from './pg-key-views';

/**
 * The writes of the database key store, each one transaction. The schema's triggers
 * give every changed row a new version and announce it by NOTIFY, so every instance applies it.
 * Every input passes the keys file's rules, typed or not (a caller in plain JavaScript is not held
 * by the types); a fault is an `InvalidRequestError` (400 `invalid_request`) naming the parameter
 * as `KeyAdmin` (key-admin.ts) spells it (`ipWhitelist[1]: …`, `graceSeconds: …`). An
 * account or key that does not exist is a 404 `not_found`; a duplicate, or a roll of a revoked or
 * expired key, a 409 `conflict`. Values only ever reach SQL as parameters.
 */

import { isGraceSeconds, MAX_GRACE_SECONDS, planRoll } from './key-roll';

const invalid: rules.Fail = (where, problem) => {
  throw new InvalidRequestError(`${where}: ${problem}`);
};

function notFound(what: 'account' | 'key', id: string): TollgateError {
  return new TollgateError(404, 'not_found', `No ${what} with id ${JSON.stringify(id)}`);
}

interface AccountRowSql {
  id: string;
  ip_whitelist: string[] | null;
  limits: AccountLimits | null;
  created_at: Date;
  updated_at: Date;
}

interface KeyRowSql {
  id: string;
  account_id: string;
  role: Role;
  publishable_key: string;
  secret_sha256: Buffer;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  last_used_at: Date | null;
  permissions: string[] | null;
}

const ACCOUNT_COLUMNS = 'id, ip_whitelist, limits, created_at, updated_at';
const KEY_COLUMNS =
  'id, account_id, role, publishable_key, secret_sha256, created_at, expires_at, revoked_at, last_used_at, permissions';

function accountView(row: AccountRowSql): AccountView {
  return {
    id: row.id,
    ipWhitelist: row.ip_whitelist,
    limits: row.limits,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

function keyView(row: KeyRowSql): KeyView {
  return {
    id: row.id,
    accountId: row.account_id,
    role: row.role,
    publishableKey: row.publishable_key,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    revoked: row.revoked_at !== null,
    revokedAt: row.revoked_at,
    lastUsedAt: row.last_used_at,
    permissions: row.permissions,
  };
}

/** `null`/absent: no restriction; otherwise the canonical entries of a valid whitelist. */
function whitelistEntries(value: unknown, where: string): string[] | null {
  if (value === null || value === undefined) return null;
  return [...rules.ipWhitelist(value, where, invalid).entries()];
}

/**
 * `null`: no overrides; otherwise validated limits (`{}` is none) as the jsonb parameter. The
 * account is named in every fault: `limits.public: account "acct_1": scope "public" is …`.
 */
function limitsParameter(value: unknown, account: string, scopes: LimitScopes): string | null {
  if (value === null) return null;
  const limits = rules.accountLimits(value, 'limits', account, scopes, invalid);
  return limits === undefined ? null : JSON.stringify(limits);
}

/**
 * `null`: no restriction; otherwise a validated list (never empty) as the text[] parameter, in the
 * vocabulary's order. The key is named in every fault: `permissions[1]: key "key_1": unknown …`.
 */
function permissionsParameter(
  value: unknown,
  key: string | undefined,
  names: readonly string[],
): string[] | null {
  const mask = rules.keyPermissions(value, 'permissions', key, names, invalid);
  return mask === undefined ? null : [...permissionsOfMask(mask, names)];
}

/** A rolled key's replacement keeps its environment: `pk_live_…` rolls into `pk_live_…`. */
function environmentOf(publishableKey: string): KeyEnvironment | undefined {
  if (publishableKey.startsWith('pk_live_')) return 'live';
  if (publishableKey.startsWith('pk_test_')) return 'test';
  return undefined;
}

function newKeyId(): string {
  return `key_${randomBytes(6).toString('hex')}`;
}

function expiryInput(value: unknown, now: number): number | undefined {
  if (value === undefined || value === null) return undefined;
  const time =
    typeof value === 'number'
      ? rules.expiryTime(value, 'expiresAt', invalid)
      : value instanceof Date
        ? rules.expiryTime(value.getTime(), 'expiresAt', invalid)
        : rules.expiresAt(value, 'expiresAt', invalid);
  if (time !== undefined && time <= now) invalid('expiresAt', 'must be in the future');
  return time;
}

/** Runs `work` in one transaction; database faults become the errors described above. */
export async function inTransaction<T>(
  pool: Pool,
  work: (client: PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw translate(error);
  } finally {
    client.release();
  }
}

/** Constraint violations the validation above did not catch (a race, a duplicate). */
function translate(error: unknown): unknown {
  const { code, constraint } = error as { code?: string; constraint?: string };
  if (code === '23505') {
    const field =
      constraint === 'accounts_pkey'
        ? 'account id'
        : constraint === 'keys_pkey'
          ? 'key id'
          : constraint === 'keys_publishable_key_key'
            ? 'publishable key'
            : constraint === 'keys_secret_sha256_key'
              ? 'secret key'
              : (constraint ?? 'value');
    return new ConflictError(`The ${field} is already in use`);
  }
  if (code === '23514') return new InvalidRequestError(`Refused by ${constraint ?? 'a check'}`);
  // A data exception: a value the rules above let through and the column cannot hold.
  if (typeof code === 'string' && code.startsWith('22')) {
    return new InvalidRequestError('A value does not fit the key database');
  }
  return error;
}

async function accountRow(client: PoolClient, id: string): Promise<AccountRowSql> {
  const result = await client.query<AccountRowSql>(
    `SELECT ${ACCOUNT_COLUMNS} FROM accounts WHERE id = $1`,
    [id],
  );
  const row = result.rows[0];
  if (row === undefined) throw notFound('account', id);
  return row;
}

async function keyRow(client: PoolClient, id: string, lock = false): Promise<KeyRowSql> {
  const result = await client.query<KeyRowSql>(
    `SELECT ${KEY_COLUMNS} FROM keys WHERE id = $1${lock ? ' FOR UPDATE' : ''}`,
    [id],
  );
  const row = result.rows[0];
  if (row === undefined) throw notFound('key', id);
  return row;
}

/** The row a statement that always returns one returned. */
function onlyRow<T>(result: { rows: T[] }): T {
  const row = result.rows[0];
  if (row === undefined) throw new Error('the database returned no row');
  return row;
}

/** An id to look up: one no account or key can have (the rules refuse it) is not found. */
function lookupId(value: unknown, what: 'account' | 'key'): string {
  if (typeof value !== 'string') invalid(`${what} id`, 'must be a string');
  if (!rules.ID_PATTERN.test(value)) throw notFound(what, value.slice(0, 64));
  return value;
}

export async function createAccount(
  pool: Pool,
  id: unknown,
  ipWhitelist?: unknown,
  limits?: unknown,
  scopes: LimitScopes = {},
): Promise<AccountView> {
  const accountId = rules.identifier(id, 'id', invalid);
  const entries = whitelistEntries(ipWhitelist, 'ipWhitelist');
  const overrides = limitsParameter(limits ?? null, accountId, scopes);
  return inTransaction(pool, async (client) => {
    const result = await client.query<AccountRowSql>(
      `INSERT INTO accounts (id, ip_whitelist, limits) VALUES ($1, $2, $3::jsonb)
       RETURNING ${ACCOUNT_COLUMNS}`,
      [accountId, entries, overrides],
    );
    return accountView(onlyRow(result));
  });
}

/** Sets an account's limit overrides; `null` puts every scope back at its default. */
export async function setLimits(
  pool: Pool,
  accountId: unknown,
  limits: unknown,
  scopes: LimitScopes,
): Promise<AccountView> {
  const id = lookupId(accountId, 'account');
  if (limits === undefined) {
    invalid('limits', 'is required: an object of scope name to requests per window, or null');
  }
  const overrides = limitsParameter(limits, id, scopes);
  return inTransaction(pool, async (client) => {
    const result = await client.query<AccountRowSql>(
      `UPDATE accounts SET limits = $2::jsonb WHERE id = $1 RETURNING ${ACCOUNT_COLUMNS}`,
      [id, overrides],
    );
    const row = result.rows[0];
    if (row === undefined) throw notFound('account', id);
    return accountView(row);
  });
}

export async function setIpWhitelist(
  pool: Pool,
  accountId: unknown,
  entries: unknown,
): Promise<AccountView> {
  const id = lookupId(accountId, 'account');
  if (entries === undefined) invalid('entries', 'is required: a list of addresses, or null');
  const whitelist = whitelistEntries(entries, 'entries');
  return inTransaction(pool, async (client) => {
    const result = await client.query<AccountRowSql>(
      `UPDATE accounts SET ip_whitelist = $2 WHERE id = $1 RETURNING ${ACCOUNT_COLUMNS}`,
      [id, whitelist],
    );
    const row = result.rows[0];
    if (row === undefined) throw notFound('account', id);
    return accountView(row);
  });
}

interface KeyToInsert {
  readonly id: string;
  readonly accountId: string;
  readonly role: Role;
  readonly expiresAt: number | undefined;
  readonly permissions: readonly string[] | null;
}

async function insertNewKey(
  client: PoolClient,
  key: KeyToInsert,
  environment: KeyEnvironment,
): Promise<NewKey> {
  const publishableKey = generateKey('publishable', environment);
  const secretKey = generateKey('secret', environment);
  const result = await client.query<KeyRowSql>(
    `INSERT INTO keys (id, account_id, role, publishable_key, secret_sha256, expires_at, permissions)
     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING ${KEY_COLUMNS}`,
    [
      key.id,
      key.accountId,
      key.role,
      publishableKey,
      sha256(secretKey),
      key.expiresAt === undefined ? null : new Date(key.expiresAt),
      key.permissions === null ? null : [...key.permissions],
    ],
  );
  return { ...keyView(onlyRow(result)), secretKey };
}

export async function createKey(
  pool: Pool,
  accountId: unknown,
  options: CreateKeyOptions,
  environment: KeyEnvironment,
  names: readonly string[] = PERMISSIONS,
): Promise<NewKey> {
  const account = lookupId(accountId, 'account');
  const id = options.id === undefined ? newKeyId() : rules.identifier(options.id, 'id', invalid);
  const role = options.role === undefined ? OWNER_ROLE : rules.role(options.role, 'role', invalid);
  const expiresAt = expiryInput(options.expiresAt, Date.now());
  // A made-up id is not named in a fault: the caller never saw it.
  const permissions = permissionsParameter(
    options.permissions ?? null,
    options.id === undefined ? undefined : id,
    names,
  );
  return inTransaction(pool, async (client) => {
    await accountRow(client, account);
    return insertNewKey(
      client,
      { id, accountId: account, role, expiresAt, permissions },
      environment,
    );
  });
}

export async function setRole(pool: Pool, keyId: unknown, role: unknown): Promise<KeyView> {
  return updateKey(pool, keyId, { role: role as Role });
}

/**
 * Changes a key's role, its permissions (`null` lifts the restriction), or both in
 * one transaction. At least one must be given; each is checked before anything is written.
 */
export async function updateKey(
  pool: Pool,
  keyId: unknown,
  changes: KeyChanges,
  names: readonly string[] = PERMISSIONS,
): Promise<KeyView> {
  const id = lookupId(keyId, 'key');
  // A field given as null is given: a null role is refused, null permissions lift the restriction.
  const hasRole = Object.hasOwn(changes, 'role') && changes.role !== undefined;
  const hasPermissions = Object.hasOwn(changes, 'permissions') && changes.permissions !== undefined;
  if (!hasRole && !hasPermissions) {
    throw new InvalidRequestError(
      'role or permissions is required: a role, a list of permissions, or null for no restriction',
    );
  }
  const role = hasRole ? rules.role(changes.role, 'role', invalid) : null;
  const permissions = hasPermissions ? permissionsParameter(changes.permissions, id, names) : null;
  return inTransaction(pool, async (client) => {
    const result = await client.query<KeyRowSql>(
      `UPDATE keys SET role = coalesce($2, role),
         permissions = CASE WHEN $3 THEN $4::text[] ELSE permissions END
       WHERE id = $1 RETURNING ${KEY_COLUMNS}`,
      [id, role, hasPermissions, permissions],
    );
    const row = result.rows[0];
    if (row === undefined) throw notFound('key', id);
    return keyView(row);
  });
}

/**
 * Rolls a key (key-roll.ts): its row is locked first, so of two rolls of one key at once the
 * second waits for the first, then finds the deadline it gave and is refused (409).
 */
export async function roll(
  pool: Pool,
  keyId: unknown,
  graceSeconds: unknown,
  options: RollOptions,
  environment: KeyEnvironment,
): Promise<RollResult> {
  const id = lookupId(keyId, 'key');
  if (typeof graceSeconds !== 'number' || !isGraceSeconds(graceSeconds)) {
    invalid('graceSeconds', `must be a whole number from 0 to ${MAX_GRACE_SECONDS}`);
  }
  const newId = options.id === undefined ? newKeyId() : rules.identifier(options.id, 'id', invalid);
  return inTransaction(pool, async (client) => {
    const old = await keyRow(client, id, true);
    // The time once the row is ours, not the transaction's start: a roll that waited for another
    // must see that one's deadline as already within its own grace.
    const now = await client.query<{ now: Date }>('SELECT clock_timestamp() AS now');
    const plan = planRoll(
      { revoked: old.revoked_at !== null, expiresAt: old.expires_at?.getTime() },
      graceSeconds,
      onlyRow(now).now.getTime(),
    );
    if (plan.kind === 'revoked' || plan.kind === 'expired') {
      throw new KeyNotRollableError(id, plan.kind);
    }
    // Rolled already (by another instance, or an operator): the replacement exists.
    if (plan.kind === 'rolled') throw new KeyAlreadyRolledError(id);
    const key = await insertNewKey(
      client,
      {
        id: newId,
        accountId: old.account_id,
        role: old.role,
        expiresAt: undefined,
        // The new pair may do what the old one could, no more.
        permissions: old.permissions,
      },
      environmentOf(old.publishable_key) ?? environment,
    );
    const updated = await client.query<KeyRowSql>(
      `UPDATE keys SET expires_at = $2 WHERE id = $1 RETURNING ${KEY_COLUMNS}`,
      [id, new Date(plan.deadline)],
    );
    return { key, previous: keyView(onlyRow(updated)) };
  });
}

export async function revoke(pool: Pool, keyId: unknown): Promise<KeyView> {
  const id = lookupId(keyId, 'key');
  return inTransaction(pool, async (client) => {
    const result = await client.query<KeyRowSql>(
      `UPDATE keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1
       RETURNING ${KEY_COLUMNS}`,
      [id],
    );
    const row = result.rows[0];
    if (row === undefined) throw notFound('key', id);
    return keyView(row);
  });
}

/** Every account with its keys (never a secret or its digest), ordered by id. */
/** One account, looked up by its id alone; `undefined` when there is none. */
export async function findAccount(pool: Pool, id: string): Promise<AccountView | undefined> {
  const result = await pool.query<AccountRowSql>(
    `SELECT ${ACCOUNT_COLUMNS} FROM accounts WHERE id = $1`,
    [id],
  );
  const row = result.rows[0];
  return row === undefined ? undefined : accountView(row);
}

export async function listAccounts(pool: Pool): Promise<AccountWithKeys[]> {
  const accounts = await pool.query<AccountRowSql>(
    `SELECT ${ACCOUNT_COLUMNS} FROM accounts ORDER BY id`,
  );
  const keys = await pool.query<KeyRowSql>(`SELECT ${KEY_COLUMNS} FROM keys ORDER BY id`);
  const byAccount = new Map<string, KeyView[]>();
  for (const row of keys.rows) {
    const list = byAccount.get(row.account_id) ?? [];
    list.push(keyView(row));
    byAccount.set(row.account_id, list);
  }
  return accounts.rows.map((row) => ({ ...accountView(row), keys: byAccount.get(row.id) ?? [] }));
}

/**
 * Writes a keys document into the database, all or nothing: it must pass the keys file's rules,
 * and no account, key id, publishable key or secret of it may exist already (409 otherwise).
 */
export async function importDocument(
  pool: Pool,
  document: unknown,
  scopes: LimitScopes = {},
  names: readonly string[] = PERMISSIONS,
): Promise<{ accounts: number; keys: number }> {
  let records;
  try {
    records = parseKeysDocument(document, 'import', scopes, names);
  } catch (error) {
    throw new InvalidRequestError((error as Error).message);
  }
  const accounts = new Map<
    string,
    { entries: readonly string[] | null; limits: AccountLimits | undefined }
  >();
  for (const record of records) {
    accounts.set(record.accountId, {
      entries: record.ipWhitelist?.entries() ?? null,
      limits: record.limits,
    });
  }
  return inTransaction(pool, async (client) => {
    for (const [id, { entries, limits }] of accounts) {
      await client.query(
        'INSERT INTO accounts (id, ip_whitelist, limits) VALUES ($1, $2, $3::jsonb)',
        [
          id,
          entries === null ? null : [...entries],
          limits === undefined ? null : JSON.stringify(limits),
        ],
      );
    }
    for (const record of records) {
      await client.query(
        `INSERT INTO keys (id, account_id, role, publishable_key, secret_sha256, expires_at, revoked_at,
           permissions)
         VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7 THEN now() END, $8)`,
        [
          record.id,
          record.accountId,
          record.role,
          record.publishableKey,
          record.secretKeySha256,
          record.expiresAt === undefined ? null : new Date(record.expiresAt),
          record.revoked,
          record.permissions === undefined ? null : [...record.permissions],
        ],
      );
    }
    return { accounts: accounts.size, keys: records.length };
  });
}

/**
 * The database as a keys document (digests only). Accounts without keys are left out: a keys file
 * cannot hold them.
 */
export async function exportDocument(pool: Pool): Promise<KeysDocument> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const accounts = await client.query<AccountRowSql>(
      `SELECT ${ACCOUNT_COLUMNS} FROM accounts ORDER BY id`,
    );
    const keys = await client.query<KeyRowSql>(`SELECT ${KEY_COLUMNS} FROM keys ORDER BY id`);
    await client.query('COMMIT');
    const byAccount = new Map<string, KeyRowSql[]>();
    for (const key of keys.rows) {
      const list = byAccount.get(key.account_id) ?? [];
      list.push(key);
      byAccount.set(key.account_id, list);
    }
    const document: KeysDocument = { accounts: [] };
    for (const account of accounts.rows) {
      const own = byAccount.get(account.id) ?? [];
      if (own.length === 0) continue;
      document.accounts.push({
        id: account.id,
        ...(account.ip_whitelist === null ? {} : { ipWhitelist: account.ip_whitelist }),
        ...(account.limits === null ? {} : { limits: { ...account.limits } }),
        keys: own.map((key) => ({
          id: key.id,
          publishableKey: key.publishable_key,
          secretKeySha256: key.secret_sha256.toString('hex'),
          role: key.role,
          ...(key.revoked_at === null ? {} : { revoked: true as const }),
          ...(key.expires_at === null ? {} : { expiresAt: key.expires_at.toISOString() }),
          ...(key.permissions === null ? {} : { permissions: [...key.permissions] }),
        })),
      });
    }
    return document;
  } finally {
    client.release();
  }
}
