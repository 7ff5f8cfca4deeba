import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { ConfigurationError, generateKey, type KeyEnvironment, KeyRing, sha256 } from '../../lib';
import { parseRole } from '../../lib/internal';
import { planRoll } from '../../lib/internal';
import {
  type CommandName,
  environment,
  graceSeconds,
  type NewPair,
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
 * The key command on a keys file: it prints a new secret once and writes only its SHA-256. The
 * file is validated before it is replaced, and replaced atomically (write, then rename), mode
 * 0600, so `SIGHUP` loads it whole.
 */

interface KeyEntry {
  id: string;
  publishableKey: string;
  secretKeySha256: string;
  role?: string;
  revoked?: boolean;
  expiresAt?: string;
  permissions?: string[];
}

interface KeysDocument {
  accounts: {
    id: string;
    ipWhitelist?: string[];
    limits?: Record<string, unknown>;
    keys: KeyEntry[];
  }[];
}

type Account = KeysDocument['accounts'][number];
type Verb = (document: KeysDocument, options: Options, file: string) => void;

const VERBS: Record<Exclude<CommandName, 'import' | 'export' | 'migrate'>, Verb> = {
  list,
  create,
  roll,
  revoke,
  'set-role': setRole,
  'set-permissions': setPermissions,
  'set-whitelist': setWhitelist,
  'set-limits': setLimits,
};

export function runOnFile(command: CommandName, options: Options, file: string): void {
  if (command === 'import' || command === 'export' || command === 'migrate') {
    throw new ConfigurationError(`${command} works on a database only`);
  }
  // Only create starts a new file: any other command on a path that is not there is a typo.
  if (command !== 'create' && !existsSync(file)) {
    throw new ConfigurationError(
      `keys file ${file} does not exist (create makes it: tollgate-keys create --account <id> --file ${file})`,
    );
  }
  VERBS[command](readDocument(file), options, file);
}

function list(document: KeysDocument): void {
  for (const account of document.accounts) {
    printAccount(
      account.id,
      account.ipWhitelist,
      account.keys.map((key) => ({
        id: key.id,
        role: key.role ?? 'administrator',
        publishableKey: key.publishableKey,
        revoked: key.revoked === true,
        expiresAt: key.expiresAt,
        permissions: key.permissions,
      })),
      account.limits as Readonly<Record<string, number>> | undefined,
    );
  }
}

function create(document: KeysDocument, options: Options, file: string): void {
  const accountId = required(options.account, 'create', '--account <id>');
  let account = document.accounts.find((candidate) => candidate.id === accountId);
  if (account === undefined) {
    account = { id: accountId, keys: [] };
    document.accounts.push(account);
  }
  const role = parseRole(options.role ?? 'administrator', '--role');
  const permissions = permissionsOption(options, 'create');
  const pair = addKeyPair(account, role, environment(options.env), options.key, permissions);
  // Checked, permissions included, when the document is validated before it is written.
  writeDocument(file, document);
  printPair(
    `Created key ${pair.id} (${role}${permissions === null ? '' : `; permissions: ${describePermissions(permissions)}`}) for account ${account.id} in ${file}.`,
    pair,
  );
}

function roll(document: KeysDocument, options: Options, file: string): void {
  const { account, key } = findKey(document, options, 'roll', file);
  const grace = graceSeconds(options.grace);
  const plan = planRoll(
    {
      revoked: key.revoked === true,
      expiresAt: key.expiresAt === undefined ? undefined : Date.parse(key.expiresAt),
    },
    grace,
    Date.now(),
  );
  if (plan.kind === 'revoked') {
    throw new ConfigurationError(`key ${key.id} is revoked: create a new key instead`);
  }
  if (plan.kind === 'expired') {
    throw new ConfigurationError(`key ${key.id} has expired: create a new key instead`);
  }
  if (plan.kind === 'rolled') {
    throw new ConfigurationError(
      `key ${key.id} is already rolled: it stops working at ${key.expiresAt ?? ''}, within the grace`,
    );
  }
  key.expiresAt = new Date(plan.deadline).toISOString();
  const role = parseRole(key.role ?? 'administrator', `${key.id}.role`);
  // The new pair may do what the old one could, no more.
  const pair = addKeyPair(
    account,
    role,
    environmentOf(key.publishableKey),
    undefined,
    key.permissions ?? null,
  );
  writeDocument(file, document);
  printPair(
    `Rolled key ${key.id}: it stops working at ${key.expiresAt}. New key ${pair.id} (${role}) for account ${account.id} in ${file}.`,
    pair,
  );
}

function revoke(document: KeysDocument, options: Options, file: string): void {
  const { key } = findKey(document, options, 'revoke', file);
  key.revoked = true;
  writeDocument(file, document);
  console.log(`Revoked key ${key.id}; its tokens stop working once the gateway reloads the file.`);
}

function setRole(document: KeysDocument, options: Options, file: string): void {
  const { key } = findKey(document, options, 'set-role', file);
  const role = parseRole(required(options.role, 'set-role', '--role <role>'), '--role');
  key.role = role;
  writeDocument(file, document);
  console.log(
    `Key ${key.id} now has the role ${role}, for its tokens too, once the gateway reloads the file.`,
  );
}

function setPermissions(document: KeysDocument, options: Options, file: string): void {
  const { key } = findKey(document, options, 'set-permissions', file);
  const permissions = permissionsOption(options, 'set-permissions');
  if (permissions === null) delete key.permissions;
  // Checked against the known permissions when the document is validated below.
  else key.permissions = permissions;
  writeDocument(file, document);
  console.log(
    `${permissionsSentence(key.id, permissions)}, for its tokens too, once the gateway reloads the file.`,
  );
}

function setWhitelist(document: KeysDocument, options: Options, file: string): void {
  const account = findAccount(document, options, 'set-whitelist', file);
  const entries = whitelistOption(options);
  if (entries === null) {
    delete account.ipWhitelist;
  } else {
    // Checked by the gateway's own parser when the document is validated below.
    account.ipWhitelist = entries;
  }
  writeDocument(file, document);
  console.log(
    entries === null
      ? `Account ${account.id}: secret keys and tokens are accepted from any address.`
      : `Account ${account.id}: secret keys and tokens are accepted from ${entries.join(', ')} only.`,
  );
}

function setLimits(document: KeysDocument, options: Options, file: string): void {
  const account = findAccount(document, options, 'set-limits', file);
  const limits = limitsOption(options);
  if (limits === null) {
    delete account.limits;
  } else {
    // Checked against the gateway's scopes when the document is validated below.
    account.limits = limits;
  }
  writeDocument(file, document);
  console.log(
    `Account ${account.id}: limits per minute ${describeLimits(account.limits as Record<string, number> | undefined)}, once the gateway reloads the file.`,
  );
}

function addKeyPair(
  account: Account,
  role: string,
  env: KeyEnvironment,
  id: string | undefined,
  permissions: readonly string[] | null,
): NewPair {
  const pair = {
    id: id ?? `key_${randomBytes(6).toString('hex')}`,
    publishableKey: generateKey('publishable', env),
    secretKey: generateKey('secret', env),
  };
  account.keys.push({
    id: pair.id,
    publishableKey: pair.publishableKey,
    secretKeySha256: sha256(pair.secretKey).toString('hex'),
    role,
    ...(permissions === null ? {} : { permissions: [...permissions] }),
  });
  return pair;
}

function findAccount(
  document: KeysDocument,
  options: Options,
  command: string,
  file: string,
): Account {
  const accountId = required(options.account, command, '--account <id>');
  const account = document.accounts.find((candidate) => candidate.id === accountId);
  if (account === undefined) {
    throw new ConfigurationError(`no account ${JSON.stringify(accountId)} in ${file}`);
  }
  return account;
}

function findKey(
  document: KeysDocument,
  options: Options,
  command: string,
  file: string,
): { account: Account; key: KeyEntry } {
  const keyId = required(options.key, command, '--key <id>');
  for (const account of document.accounts) {
    const key = account.keys.find((candidate) => candidate.id === keyId);
    if (key !== undefined) return { account, key };
  }
  throw new ConfigurationError(`no key ${JSON.stringify(keyId)} in ${file}`);
}

/** A rolled key's replacement keeps its environment (`pk_live_…` rolls into `pk_live_…`). */
function environmentOf(publishableKey: string): KeyEnvironment {
  return publishableKey.startsWith('pk_live_') ? 'live' : 'test';
}

function readDocument(file: string): KeysDocument {
  if (!existsSync(file)) return { accounts: [] };
  const document = JSON.parse(readFileSync(file, 'utf8')) as KeysDocument;
  KeyRing.fromDocument(document, file, { limitScopes: GATEWAY_LIMIT_SCOPES });
  return document;
}

function writeDocument(file: string, document: KeysDocument): void {
  KeyRing.fromDocument(document, file, { limitScopes: GATEWAY_LIMIT_SCOPES });
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(document, null, 2)}\n`, { mode: 0o600 });
  renameSync(temporary, file);
}
