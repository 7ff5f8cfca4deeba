#!/usr/bin/env node
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import {
  ConfigurationError,
  generateKey,
  type KeyEnvironment,
  KeyRing,
  parseRole,
  ROLES,
  sha256,
} from '../lib';

/**
 * The key command, installed as `tollgate-keys` (in this repository `npm run keys -- …`): it edits
 * a keys file, printing a new secret once and writing only its SHA-256. The file is validated
 * before it is replaced, and replaced atomically (write, then rename), so `SIGHUP` loads it whole.
 */

const MAX_GRACE_SECONDS = 604_800;

const USAGE = `usage: tollgate-keys <command> [--file keys.json]
  list                                             accounts and keys (never a secret)
  create --account <id> [--role ${ROLES.join('|')}] [--key <id>] [--env test|live]
  roll --key <id> --grace <seconds>                a new key pair; the old key expires after the grace (0 to ${MAX_GRACE_SECONDS})
  revoke --key <id>
  set-role --key <id> --role <role>
  set-whitelist --account <id> --entries <a,b,...> | --none
The file defaults to $TOLLGATE_KEYS_FILE or keys.json. Then send SIGHUP to the gateway (or restart
it) to load the change. In this repository: npm run keys -- <command> ...`;

interface KeyEntry {
  id: string;
  publishableKey: string;
  secretKeySha256: string;
  role?: string;
  revoked?: boolean;
  expiresAt?: string;
}

interface KeysDocument {
  accounts: { id: string; ipWhitelist?: string[]; keys: KeyEntry[] }[];
}

type Options = ReturnType<typeof parse>['values'];

function parse(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      account: { type: 'string' },
      role: { type: 'string' },
      key: { type: 'string' },
      env: { type: 'string', default: 'test' },
      grace: { type: 'string' },
      entries: { type: 'string' },
      none: { type: 'boolean' },
      file: { type: 'string', default: process.env.TOLLGATE_KEYS_FILE ?? 'keys.json' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}

const COMMANDS: Record<string, (document: KeysDocument, options: Options) => void> = {
  list,
  create,
  roll,
  revoke,
  'set-role': setRole,
  'set-whitelist': setWhitelist,
};

function main(argv: string[]): void {
  const { positionals, values } = parse(argv);
  const command = positionals[0];
  if (values.help === true || command === undefined) {
    console.log(USAGE);
    return;
  }
  const run = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (run === undefined) {
    throw new ConfigurationError(`unknown command ${JSON.stringify(command)}\n${USAGE}`);
  }
  run(readDocument(values.file), values);
}

function list(document: KeysDocument): void {
  const now = Date.now();
  for (const account of document.accounts) {
    const whitelist =
      account.ipWhitelist === undefined ? 'any address' : account.ipWhitelist.join(', ');
    console.log(`${account.id}  (whitelist: ${whitelist})`);
    for (const key of account.keys) {
      const state =
        key.revoked === true
          ? 'revoked'
          : key.expiresAt !== undefined && Date.parse(key.expiresAt) <= now
            ? `expired ${key.expiresAt}`
            : key.expiresAt !== undefined
              ? `expires ${key.expiresAt}`
              : 'active';
      console.log(`  ${key.id}  ${key.role ?? 'administrator'}  ${key.publishableKey}  ${state}`);
    }
  }
}

function create(document: KeysDocument, options: Options): void {
  const accountId = required(options.account, 'create', '--account <id>');
  let account = document.accounts.find((candidate) => candidate.id === accountId);
  if (account === undefined) {
    account = { id: accountId, keys: [] };
    document.accounts.push(account);
  }
  const role = parseRole(options.role ?? 'administrator', '--role');
  const pair = addKeyPair(account, role, environment(options.env), options.key);
  writeDocument(options.file, document);
  printPair(`Created key ${pair.id} (${role}) for account ${account.id} in ${options.file}.`, pair);
}

function roll(document: KeysDocument, options: Options): void {
  const { account, key } = findKey(document, options, 'roll');
  const grace = graceSeconds(options.grace);
  const now = Date.now();
  if (key.revoked === true)
    throw new ConfigurationError(`key ${key.id} is revoked: create a new key instead`);
  const current = key.expiresAt === undefined ? undefined : Date.parse(key.expiresAt);
  if (current !== undefined && current <= now) {
    throw new ConfigurationError(`key ${key.id} has expired: create a new key instead`);
  }
  // The grace never extends a deadline the key already has.
  const deadline = Math.min(now + grace * 1000, current ?? Number.POSITIVE_INFINITY);
  key.expiresAt = new Date(deadline).toISOString();
  const role = parseRole(key.role ?? 'administrator', `${key.id}.role`);
  const pair = addKeyPair(account, role, environmentOf(key.publishableKey), undefined);
  writeDocument(options.file, document);
  printPair(
    `Rolled key ${key.id}: it stops working at ${key.expiresAt}. New key ${pair.id} (${role}) for account ${account.id} in ${options.file}.`,
    pair,
  );
}

function revoke(document: KeysDocument, options: Options): void {
  const { key } = findKey(document, options, 'revoke');
  key.revoked = true;
  writeDocument(options.file, document);
  console.log(`Revoked key ${key.id}; its tokens stop working once the gateway reloads the file.`);
}

function setRole(document: KeysDocument, options: Options): void {
  const { key } = findKey(document, options, 'set-role');
  const role = parseRole(required(options.role, 'set-role', '--role <role>'), '--role');
  key.role = role;
  writeDocument(options.file, document);
  console.log(
    `Key ${key.id} now has the role ${role}, for its tokens too, once the gateway reloads the file.`,
  );
}

function setWhitelist(document: KeysDocument, options: Options): void {
  const accountId = required(options.account, 'set-whitelist', '--account <id>');
  const account = document.accounts.find((candidate) => candidate.id === accountId);
  if (account === undefined)
    throw new ConfigurationError(`no account ${JSON.stringify(accountId)} in ${options.file}`);
  if ((options.none === true) === (options.entries !== undefined)) {
    throw new ConfigurationError(
      'set-whitelist needs either --entries <a,b,...> or --none (no restriction)',
    );
  }
  if (options.none === true) {
    delete account.ipWhitelist;
  } else {
    // Checked by the gateway's own parser when the document is validated below.
    account.ipWhitelist = (options.entries ?? '').split(',').map((entry) => entry.trim());
  }
  writeDocument(options.file, document);
  console.log(
    options.none === true
      ? `Account ${account.id}: secret keys and tokens are accepted from any address.`
      : `Account ${account.id}: secret keys and tokens are accepted from ${(account.ipWhitelist ?? []).join(', ')} only.`,
  );
}

interface NewPair {
  readonly id: string;
  readonly publishableKey: string;
  readonly secretKey: string;
}

function addKeyPair(
  account: KeysDocument['accounts'][number],
  role: string,
  env: KeyEnvironment,
  id: string | undefined,
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
  });
  return pair;
}

function printPair(headline: string, pair: NewPair): void {
  console.log(headline);
  console.log(`  publishable key: ${pair.publishableKey}`);
  console.log(`  secret key:      ${pair.secretKey}`);
  console.log(
    'The secret key is shown only now and is not stored anywhere: keep it in your secret manager.',
  );
}

function findKey(
  document: KeysDocument,
  options: Options,
  command: string,
): { account: KeysDocument['accounts'][number]; key: KeyEntry } {
  const keyId = required(options.key, command, '--key <id>');
  for (const account of document.accounts) {
    const key = account.keys.find((candidate) => candidate.id === keyId);
    if (key !== undefined) return { account, key };
  }
  throw new ConfigurationError(`no key ${JSON.stringify(keyId)} in ${options.file}`);
}

function required(value: string | undefined, command: string, what: string): string {
  if (value === undefined || value === '') {
    throw new ConfigurationError(`${command} needs ${what}\n${USAGE}`);
  }
  return value;
}

function graceSeconds(value: string | undefined): number {
  const text = required(
    value,
    'roll',
    `--grace <seconds>: how long the old key keeps working (0 to ${MAX_GRACE_SECONDS})`,
  );
  if (!/^\d{1,6}$/.test(text) || Number(text) > MAX_GRACE_SECONDS) {
    throw new ConfigurationError(
      `--grace must be a whole number of seconds from 0 to ${MAX_GRACE_SECONDS}`,
    );
  }
  return Number(text);
}

function environment(value: string | undefined): KeyEnvironment {
  if (value !== 'test' && value !== 'live')
    throw new ConfigurationError('--env must be test or live');
  return value;
}

/** A rolled key's replacement keeps its environment (`pk_live_…` rolls into `pk_live_…`). */
function environmentOf(publishableKey: string): KeyEnvironment {
  return publishableKey.startsWith('pk_live_') ? 'live' : 'test';
}

function readDocument(file: string): KeysDocument {
  if (!existsSync(file)) return { accounts: [] };
  const document = JSON.parse(readFileSync(file, 'utf8')) as KeysDocument;
  KeyRing.fromDocument(document, file);
  return document;
}

function writeDocument(file: string, document: KeysDocument): void {
  KeyRing.fromDocument(document, file);
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(document, null, 2)}\n`, { mode: 0o600 });
  renameSync(temporary, file);
}

try {
  main(process.argv.slice(2));
} catch (error) {
  console.error(`tollgate-keys: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
}
