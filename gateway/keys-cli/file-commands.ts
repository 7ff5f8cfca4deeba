import { existsSync } from 'node:fs';
import { ConfigurationError, FileKeyAdmin, TollgateError } from '../../lib';
import {
  KeyAlreadyRolledError,
  KeyNotRollableError,
  OWNER_ROLE,
  parseRole,
} from '../../lib/internal';
import type { KeysDocument, NewKey } from '../../lib/entry/postgres';
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
 * The key command on a keys file: it reads its options, asks `FileKeyAdmin` for the change (which
 * validates the whole file before replacing it atomically, mode 0600, so `SIGHUP` loads it whole),
 * and prints the result. A new secret is printed once; the file holds only its SHA-256.
 */

type Verb = (admin: FileKeyAdmin, options: Options, file: string) => Promise<void>;

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

export async function runOnFile(
  command: CommandName,
  options: Options,
  file: string,
): Promise<void> {
  if (command === 'import' || command === 'export' || command === 'migrate') {
    throw new ConfigurationError(`${command} works on a database only`);
  }
  // Only create starts a new file: any other command on a path that is not there is a typo.
  if (command !== 'create' && !existsSync(file)) {
    throw new ConfigurationError(
      `keys file ${file} does not exist (create makes it: tollgate-keys create --account <id> --file ${file})`,
    );
  }
  const admin = FileKeyAdmin.open(file, {
    limitScopes: GATEWAY_LIMIT_SCOPES,
    keyEnvironment: environment(options.env),
  });
  await VERBS[command](admin, options, file);
}

async function list(admin: FileKeyAdmin): Promise<void> {
  const document: KeysDocument = await admin.export();
  for (const account of document.accounts) {
    printAccount(
      account.id,
      account.ipWhitelist,
      account.keys.map((key) => ({
        id: key.id,
        role: (key.role as string | undefined) ?? OWNER_ROLE,
        publishableKey: key.publishableKey,
        revoked: key.revoked === true,
        expiresAt: key.expiresAt,
        permissions: key.permissions,
      })),
      account.limits,
    );
  }
}

async function create(admin: FileKeyAdmin, options: Options, file: string): Promise<void> {
  const accountId = required(options.account, 'create', '--account <id>');
  const role = parseRole(options.role ?? OWNER_ROLE, '--role');
  const permissions = permissionsOption(options, 'create');
  const key = await admin.createKey(
    accountId,
    { role, permissions, ...(options.key === undefined ? {} : { id: options.key }) },
    { addAccount: true },
  );
  printPair(
    `Created key ${key.id} (${role}${permissions === null ? '' : `; permissions: ${describePermissions(permissions)}`}) for account ${key.accountId} in ${file}.`,
    pairOf(key),
  );
}

async function roll(admin: FileKeyAdmin, options: Options, file: string): Promise<void> {
  const keyId = required(options.key, 'roll', '--key <id>');
  const grace = graceSeconds(options.grace);
  const before = admin.findKey(keyId);
  const { key, previous } = await admin.roll(keyId, grace).catch((error: unknown) => {
    throw refusal(error, file, keyId, before?.expiresAt);
  });
  printPair(
    `Rolled key ${previous.id}: it stops working at ${previous.expiresAt?.toISOString() ?? ''}. New key ${key.id} (${key.role}) for account ${key.accountId} in ${file}.`,
    pairOf(key),
  );
}

async function revoke(admin: FileKeyAdmin, options: Options, file: string): Promise<void> {
  const keyId = required(options.key, 'revoke', '--key <id>');
  const key = await admin.revoke(keyId).catch(fileFault(file, keyId));
  console.log(`Revoked key ${key.id}; its tokens stop working once the gateway reloads the file.`);
}

async function setRole(admin: FileKeyAdmin, options: Options, file: string): Promise<void> {
  const keyId = required(options.key, 'set-role', '--key <id>');
  const role = parseRole(required(options.role, 'set-role', '--role <role>'), '--role');
  const key = await admin.updateKey(keyId, { role }).catch(fileFault(file, keyId));
  console.log(
    `Key ${key.id} now has the role ${role}, for its tokens too, once the gateway reloads the file.`,
  );
}

async function setPermissions(admin: FileKeyAdmin, options: Options, file: string): Promise<void> {
  const keyId = required(options.key, 'set-permissions', '--key <id>');
  const permissions = permissionsOption(options, 'set-permissions');
  const key = await admin.updateKey(keyId, { permissions }).catch(fileFault(file, keyId));
  console.log(
    `${permissionsSentence(key.id, permissions)}, for its tokens too, once the gateway reloads the file.`,
  );
}

async function setWhitelist(admin: FileKeyAdmin, options: Options, file: string): Promise<void> {
  const accountId = required(options.account, 'set-whitelist', '--account <id>');
  const entries = whitelistOption(options);
  const account = await admin.setIpWhitelist(accountId, entries).catch(fileFault(file, accountId));
  console.log(
    entries === null
      ? `Account ${account.id}: secret keys and tokens are accepted from any address.`
      : `Account ${account.id}: secret keys and tokens are accepted from ${entries.join(', ')} only.`,
  );
}

async function setLimits(admin: FileKeyAdmin, options: Options, file: string): Promise<void> {
  const accountId = required(options.account, 'set-limits', '--account <id>');
  const limits = limitsOption(options);
  const account = await admin.setLimits(accountId, limits).catch(fileFault(file, accountId));
  console.log(
    `Account ${account.id}: limits per minute ${describeLimits(limits ?? undefined)}, once the gateway reloads the file.`,
  );
}

function pairOf(key: NewKey): NewPair {
  return { id: key.id, publishableKey: key.publishableKey, secretKey: key.secretKey };
}

/** An unknown account or key, in the command's words. */
function fileFault(file: string, id: string): (error: unknown) => never {
  return (error) => {
    if (error instanceof TollgateError && error.status === 404) {
      const what = error.message.startsWith('No account') ? 'account' : 'key';
      throw new ConfigurationError(`no ${what} ${JSON.stringify(id)} in ${file}`);
    }
    throw error;
  };
}

/** A roll refused, in the command's words. */
function refusal(
  error: unknown,
  file: string,
  keyId: string,
  expiresAt: string | undefined,
): unknown {
  if (error instanceof KeyAlreadyRolledError) {
    return new ConfigurationError(
      `key ${keyId} is already rolled: it stops working at ${expiresAt ?? ''}, within the grace`,
    );
  }
  if (error instanceof KeyNotRollableError) {
    const state = error.reason === 'revoked' ? 'is revoked' : 'has expired';
    return new ConfigurationError(`key ${keyId} ${state}: create a new key instead`);
  }
  try {
    fileFault(file, keyId)(error);
  } catch (translated) {
    return translated;
  }
  return error;
}
