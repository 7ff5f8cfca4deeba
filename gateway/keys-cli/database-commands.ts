import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { ConfigurationError, KeyRing, TollgateError } from '../../lib';
import { ConflictError } from '../../lib/internal';
import { PgKeyStore } from '../../lib/entry/postgres';
import type { KeyView } from '../../lib/entry/postgres';
import { parseRole } from '../../lib/internal';
import { describeDatabaseFault } from './database-errors';
import {
  type CommandName,
  environment,
  graceSeconds,
  type Options,
  describeLimits,
  describePermissions,
  limitsOption,
  permissionsOption,
  permissionsSentence,
  printAccount,
  printPair,
  required,
  whitelistOption,
} from './options';
import { GATEWAY_LIMIT_SCOPES } from './limit-scopes';

/**
 * The key command on the database (`--database-url`, or `TOLLGATE_DATABASE_URL`), through
 * PgKeyStore's write API: the validation of the admin API, one transaction per change, and the
 * NOTIFY that every running gateway applies within 1 s. A secret is printed only by create and
 * roll; export holds digests only.
 */

type Verb = (store: PgKeyStore, options: Options, where: string) => Promise<void>;

const VERBS: Record<Exclude<CommandName, 'migrate'>, Verb> = {
  list,
  create,
  roll,
  revoke,
  'set-role': setRole,
  'set-permissions': setPermissions,
  'set-whitelist': setWhitelist,
  'set-limits': setLimits,
  import: importFile,
  export: exportDocument,
};

const APPLIED = 'Every gateway on this database applies it within 1 s.';

export async function runOnDatabase(
  command: Exclude<CommandName, 'migrate'>,
  options: Options,
  url: string,
  shown: string,
): Promise<void> {
  // Options that need no database are checked before connecting.
  const keyEnvironment = environment(options.env);
  let store: PgKeyStore;
  try {
    store = await PgKeyStore.open({
      connectionString: url,
      keyEnvironment,
      poolSize: 2,
      // A short-lived command: the backstop and the last-used flush never need to run.
      pollIntervalMs: 3_600_000,
      lastUsedFlushMs: 3_600_000,
      limitScopes: GATEWAY_LIMIT_SCOPES,
    });
  } catch (error) {
    throw new ConfigurationError(
      `cannot use the database ${shown}: ${describeDatabaseFault(error)}`,
    );
  }
  try {
    await VERBS[command](store, options, `the database ${shown}`);
  } catch (error) {
    if (error instanceof ConfigurationError) throw error;
    if (error instanceof TollgateError)
      throw new ConfigurationError(`${command} refused: ${error.message}`);
    throw new ConfigurationError(
      `${command} failed on the database ${shown}: ${describeDatabaseFault(error)}`,
    );
  } finally {
    await store.close().catch(() => undefined);
  }
}

/** `migrate`: what `npm run migrate` does, for users of the installed package. */
export async function migrateDatabase(url: string, shown: string): Promise<void> {
  let result: Awaited<ReturnType<typeof PgKeyStore.migrate>>;
  try {
    result = await PgKeyStore.migrate(url);
  } catch (error) {
    throw new ConfigurationError(
      `migrate failed on the database ${shown}: ${describeDatabaseFault(error)}`,
    );
  }
  console.log(
    result.applied.length === 0
      ? `the database ${shown} is at schema version ${result.to}: nothing to do`
      : `the database ${shown}: schema version ${result.from} -> ${result.to} (${result.applied
          .map((migration) => `${String(migration.version).padStart(3, '0')}_${migration.name}`)
          .join(', ')})`,
  );
}

function idInUse(store: PgKeyStore, keyId: string): boolean {
  for (const record of store.keyRecords()) if (record.id === keyId) return true;
  return false;
}

async function list(store: PgKeyStore): Promise<void> {
  for (const account of await store.listAccounts()) {
    printAccount(
      account.id,
      account.ipWhitelist ?? undefined,
      account.keys.map((key) => ({
        id: key.id,
        role: key.role,
        publishableKey: key.publishableKey,
        revoked: key.revoked,
        expiresAt: key.expiresAt?.toISOString(),
        lastUsedAt: key.lastUsedAt?.toISOString(),
        permissions: key.permissions,
      })),
      account.limits,
    );
  }
}

async function create(store: PgKeyStore, options: Options, where: string): Promise<void> {
  const accountId = required(options.account, 'create', '--account <id>');
  const permissions = permissionsOption(options, 'create');
  const keyOptions = {
    ...(options.role === undefined ? {} : { role: parseRole(options.role, '--role') }),
    ...(options.key === undefined ? {} : { id: options.key }),
    ...(permissions === null ? {} : { permissions }),
  };
  let key;
  let created = false;
  try {
    // The role and the key id are checked before the account is looked up.
    key = await store.createKey(accountId, keyOptions).catch(named('--key'));
  } catch (error) {
    if (!(error instanceof TollgateError && error.code === 'not_found')) throw error;
    // As with a keys file, an account that does not exist yet is added (checked as the admin
    // API checks it), unless the key could not be added to it anyway.
    // A walk of the listing, not findById(): a lookup counts as a use of the key (last_used_at).
    if (options.key !== undefined && idInUse(store, options.key)) {
      throw new ConflictError('The key id is already in use');
    }
    await store.createAccount(accountId).catch(named('--account'));
    created = true;
    key = await store.createKey(accountId, keyOptions).catch(named('--key'));
  }
  if (created) console.log(`Created account ${accountId} (no IP whitelist) in ${where}.`);
  printPair(
    `Created key ${key.id} (${key.role}${key.permissions === null ? '' : `; permissions: ${describePermissions(key.permissions)}`}) for account ${key.accountId} in ${where}.`,
    key,
  );
}

async function roll(store: PgKeyStore, options: Options, where: string): Promise<void> {
  const keyId = required(options.key, 'roll', '--key <id>');
  const { key, previous } = await store.roll(keyId, graceSeconds(options.grace));
  printPair(
    `Rolled key ${previous.id}: it stops working at ${stamp(previous)}. New key ${key.id} (${key.role}) for account ${key.accountId} in ${where}. ${APPLIED}`,
    key,
  );
}

async function revoke(store: PgKeyStore, options: Options, where: string): Promise<void> {
  const key = await store.revoke(required(options.key, 'revoke', '--key <id>'));
  console.log(`Revoked key ${key.id} in ${where}; its tokens stop working too. ${APPLIED}`);
}

async function setRole(store: PgKeyStore, options: Options, where: string): Promise<void> {
  const keyId = required(options.key, 'set-role', '--key <id>');
  const key = await store.setRole(
    keyId,
    parseRole(required(options.role, 'set-role', '--role <role>'), '--role'),
  );
  console.log(
    `Key ${key.id} now has the role ${key.role} in ${where}, for its tokens too. ${APPLIED}`,
  );
}

async function setPermissions(store: PgKeyStore, options: Options, where: string): Promise<void> {
  const keyId = required(options.key, 'set-permissions', '--key <id>');
  const key = await store.setPermissions(keyId, permissionsOption(options, 'set-permissions'));
  console.log(
    `${permissionsSentence(key.id, key.permissions)} in ${where}, for its tokens too. ${APPLIED}`,
  );
}

async function setWhitelist(store: PgKeyStore, options: Options, where: string): Promise<void> {
  const accountId = required(options.account, 'set-whitelist', '--account <id>');
  const account = await store.setIpWhitelist(accountId, whitelistOption(options));
  console.log(
    account.ipWhitelist === null
      ? `Account ${account.id} in ${where}: secret keys and tokens are accepted from any address. ${APPLIED}`
      : `Account ${account.id} in ${where}: secret keys and tokens are accepted from ${account.ipWhitelist.join(', ')} only. ${APPLIED}`,
  );
}

async function setLimits(store: PgKeyStore, options: Options, where: string): Promise<void> {
  const accountId = required(options.account, 'set-limits', '--account <id>');
  const account = await store.setLimits(accountId, limitsOption(options));
  console.log(
    `Account ${account.id} in ${where}: limits per minute ${describeLimits(account.limits)}. ${APPLIED}`,
  );
}

async function importFile(store: PgKeyStore, options: Options, where: string): Promise<void> {
  const file = required(options.file, 'import', '--file <keys.json>: the keys file to import');
  if (!existsSync(file)) throw new ConfigurationError(`no file ${file}`);
  let document: unknown;
  try {
    document = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new ConfigurationError(`${file} is not JSON: ${(error as Error).message}`);
  }
  // The keys file's own rules, so a fault names the file and the entry.
  KeyRing.fromDocument(document, file, { limitScopes: GATEWAY_LIMIT_SCOPES });
  let counts;
  try {
    counts = await store.import(document);
  } catch (error) {
    if (error instanceof TollgateError) {
      throw new ConfigurationError(`import refused, nothing was written: ${error.message}`);
    }
    throw error;
  }
  console.log(
    `Imported ${counts.accounts} account(s) and ${counts.keys} key(s) from ${file} into ${where}. ${APPLIED}`,
  );
}

async function exportDocument(store: PgKeyStore, options: Options, where: string): Promise<void> {
  const document = await store.export();
  const accounts = await store.listAccounts();
  const left = accounts.filter((account) => account.keys.length === 0).map((account) => account.id);
  const text = `${JSON.stringify(document, null, 2)}\n`;
  if (left.length > 0) {
    process.stderr.write(
      `tollgate-keys: not exported, a keys file cannot hold an account without keys: ${left.join(', ')}\n`,
    );
  }
  if (options.out === undefined) {
    process.stdout.write(text);
    return;
  }
  const keys = document.accounts.reduce((sum, account) => sum + account.keys.length, 0);
  writeAtomically(options.out, text);
  console.log(
    `Exported ${document.accounts.length} account(s) and ${keys} key(s) (digests only) from ${where} to ${options.out} (mode 0600).`,
  );
}

/** A temporary file of mode 0600 next to `file`, then a rename: a reader sees all or nothing. */
function writeAtomically(file: string, text: string): void {
  const temporary = `${file}.${process.pid}.tmp`;
  try {
    writeFileSync(temporary, text, { mode: 0o600, flag: 'wx' });
    renameSync(temporary, file);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw new ConfigurationError(`cannot write ${file}: ${(error as Error).message}`);
  }
}

/** The admin API's `id: …` fault, named as the option that gave the id. */
function named(option: string): (error: unknown) => never {
  return (error) => {
    if (error instanceof TollgateError && error.message.startsWith('id: ')) {
      throw new TollgateError(error.status, error.code, `${option} ${error.message.slice(4)}`);
    }
    throw error;
  };
}

function stamp(key: KeyView): string {
  return key.expiresAt?.toISOString() ?? 'no deadline';
}
