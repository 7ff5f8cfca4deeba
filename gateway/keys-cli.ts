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
 * `npm run keys -- create --account acct_x --role level-2 [--file keys.json] [--env live]`
 * creates a key pair, prints the secret once, and writes only its SHA-256 into the keys file.
 * `npm run keys -- revoke --key key_x [--file keys.json]` marks a key revoked.
 * The file is validated before it is replaced, and replaced atomically (write, then rename).
 */

const USAGE = `usage:
  npm run keys -- create --account <id> [--role ${ROLES.join('|')}] [--key <id>] [--env test|live] [--file keys.json]
  npm run keys -- revoke --key <id> [--file keys.json]
Then send SIGHUP to the gateway (or restart it) to load the change.`;

interface KeysDocument {
  accounts: { id: string; ipWhitelist?: string[]; keys: Record<string, unknown>[] }[];
}

function main(argv: string[]): void {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      account: { type: 'string' },
      role: { type: 'string', default: 'administrator' },
      key: { type: 'string' },
      env: { type: 'string', default: 'test' },
      file: { type: 'string', default: process.env.TOLLGATE_KEYS_FILE ?? 'keys.json' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const command = positionals[0];
  if (values.help === true || command === undefined) {
    console.log(USAGE);
    return;
  }
  const document = readDocument(values.file);
  if (command === 'create') {
    if (values.account === undefined) throw new ConfigurationError('--account is required');
    const role = parseRole(values.role, '--role');
    if (values.env !== 'test' && values.env !== 'live')
      throw new ConfigurationError('--env must be test or live');
    const environment: KeyEnvironment = values.env;
    const keyId = values.key ?? `key_${randomBytes(6).toString('hex')}`;
    const publishableKey = generateKey('publishable', environment);
    const secretKey = generateKey('secret', environment);
    let account = document.accounts.find((candidate) => candidate.id === values.account);
    if (account === undefined) {
      account = { id: values.account, keys: [] };
      document.accounts.push(account);
    }
    account.keys.push({
      id: keyId,
      publishableKey,
      secretKeySha256: sha256(secretKey).toString('hex'),
      role,
    });
    writeDocument(values.file, document);
    console.log(`Created key ${keyId} (${role}) for account ${account.id} in ${values.file}.`);
    console.log(`  publishable key: ${publishableKey}`);
    console.log(`  secret key:      ${secretKey}`);
    console.log(
      'The secret key is shown only now and is not stored anywhere: keep it in your secret manager.',
    );
    return;
  }
  if (command === 'revoke') {
    if (values.key === undefined || values.key === '') {
      throw new ConfigurationError(`revoke needs --key <id>: which key to revoke\n${USAGE}`);
    }
    const key = document.accounts
      .flatMap((account) => account.keys)
      .find((candidate) => candidate.id === values.key);
    if (key === undefined)
      throw new ConfigurationError(`no key ${JSON.stringify(values.key)} in ${values.file}`);
    key.revoked = true;
    writeDocument(values.file, document);
    console.log(
      `Revoked key ${values.key}; its tokens stop working once the gateway reloads the file.`,
    );
    return;
  }
  throw new ConfigurationError(`unknown command ${JSON.stringify(command)}\n${USAGE}`);
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
