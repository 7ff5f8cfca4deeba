import { parseArgs } from 'node:util';
import { ConfigurationError, type KeyEnvironment, PERMISSIONS, ROLES } from '../../lib';
import { MAX_GRACE_SECONDS } from '../../lib/entry/postgres';

/** The key command's arguments, usage text and the checks every verb shares. */

export const USAGE = `usage: tollgate-keys <command> [--file keys.json | --database-url postgres://…]
  list                                             accounts and keys (never a secret)
  create --account <id> [--role ${ROLES.join('|')}] [--key <id>] [--env test|live] [--permissions <a,b,...>]
  roll --key <id> --grace <seconds>                a new key pair; the old key expires after the grace (0 to ${MAX_GRACE_SECONDS})
  revoke --key <id>
  set-role --key <id> --role <role>
  set-permissions --key <id> --permissions <a,b,...> | --none   what a restricted key may do (${PERMISSIONS.join(', ')}); --none: all its role allows
  set-whitelist --account <id> --entries <a,b,...> | --none
  set-limits --account <id> --limits <scope=n,...> | --none   the account's own limits per minute (payments, authenticated)
  import --file <keys.json>                        a keys file into the database, all or nothing
  export [--out <keys.json>]                       the database as a keys file (digests only), to stdout or --out
  migrate                                          applies the SQL migrations the database lacks (safe to repeat)
Where the keys live: --file <path> or --database-url <url>. Without either: $TOLLGATE_DATABASE_URL
if set, else $TOLLGATE_KEYS_FILE, else ./keys.json; both options, or both variables, are refused.
import, export and migrate always work on the database (import reads the keys file given by --file).
A keys file: send SIGHUP to the gateway (or restart it) to load the change. The database: every
gateway on it applies the change within 1 s.`;

export const COMMAND_NAMES = [
  'list',
  'create',
  'roll',
  'revoke',
  'set-role',
  'set-permissions',
  'set-whitelist',
  'set-limits',
  'import',
  'export',
  'migrate',
] as const;
export type CommandName = (typeof COMMAND_NAMES)[number];

export function isCommand(value: string): value is CommandName {
  return (COMMAND_NAMES as readonly string[]).includes(value);
}

export function parse(argv: string[]) {
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
      limits: { type: 'string' },
      permissions: { type: 'string' },
      none: { type: 'boolean' },
      file: { type: 'string' },
      'database-url': { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}

export type Options = ReturnType<typeof parse>['values'];

/** An option's value, or a one-line error naming what `command` needs. */
export function required(value: string | undefined, command: string, what: string): string {
  if (value === undefined || value === '') {
    throw new ConfigurationError(`${command} needs ${what} (tollgate-keys --help for usage)`);
  }
  return value;
}

export function graceSeconds(value: string | undefined): number {
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

export function environment(value: string | undefined): KeyEnvironment {
  if (value !== 'test' && value !== 'live')
    throw new ConfigurationError('--env must be test or live');
  return value;
}

/** `--entries a,b` as a list; `--none` as `null` (no restriction); exactly one of them. */
export function whitelistOption(options: Options): string[] | null {
  if ((options.none === true) === (options.entries !== undefined)) {
    throw new ConfigurationError(
      'set-whitelist needs either --entries <a,b,...> or --none (no restriction)',
    );
  }
  if (options.none === true) return null;
  return (options.entries ?? '').split(',').map((entry) => entry.trim());
}

/**
 * `--limits payments=6000,authenticated=300` as an object (the values checked by the store's rules,
 * which name the scope); `--none` as `null` (every scope at its default); exactly one of them.
 */
export function limitsOption(options: Options): Record<string, number> | null {
  if ((options.none === true) === (options.limits !== undefined)) {
    throw new ConfigurationError(
      'set-limits needs either --limits <scope=n,...> or --none (every scope at its default)',
    );
  }
  if (options.none === true) return null;
  const limits: Record<string, number> = {};
  for (const entry of (options.limits ?? '').split(',')) {
    const match = /^\s*([^=\s]+)\s*=\s*(\S*)\s*$/.exec(entry);
    if (match?.[1] === undefined || match[2] === undefined) {
      throw new ConfigurationError(
        `--limits: ${JSON.stringify(entry.slice(0, 64))} is not scope=number (e.g. payments=6000)`,
      );
    }
    // Not a number: NaN, which the store's rules refuse, naming the scope.
    limits[match[1]] = /^\d{1,16}$/.test(match[2]) ? Number(match[2]) : NaN;
  }
  return limits;
}

/**
 * `--permissions wallets:read,transactions:read` as a list (the names checked by the store's
 * rules, which name the key and the permission); `--none` as `null` (not restricted); exactly one
 * of them for set-permissions, and `--permissions` alone, if at all, for create.
 */
export function permissionsOption(
  options: Options,
  command: 'set-permissions' | 'create',
): string[] | null {
  if (command === 'create') {
    if (options.none === true)
      throw new ConfigurationError('create takes --permissions, not --none');
    return options.permissions === undefined ? null : splitList(options.permissions);
  }
  if ((options.none === true) === (options.permissions !== undefined)) {
    throw new ConfigurationError(
      'set-permissions needs either --permissions <a,b,...> or --none (all its role allows)',
    );
  }
  return options.none === true ? null : splitList(options.permissions ?? '');
}

function splitList(text: string): string[] {
  return text.split(',').map((entry) => entry.trim());
}

/** A key's permissions as `list` and `set-permissions` print them. */
export function describePermissions(permissions: readonly string[] | undefined | null): string {
  return permissions === undefined || permissions === null
    ? 'all its role allows'
    : permissions.join(', ');
}

/** What `set-permissions` says a key may now do. */
export function permissionsSentence(keyId: string, permissions: readonly string[] | null): string {
  return permissions === null
    ? `Key ${keyId} is not restricted: it may do all its role allows`
    : `Key ${keyId} may now call only the routes of ${permissions.join(', ')} (within its role)`;
}

/** An account's limits as `list` and `set-limits` print them. */
export function describeLimits(
  limits: Readonly<Record<string, number>> | undefined | null,
): string {
  if (limits === undefined || limits === null) return 'defaults';
  return Object.entries(limits)
    .map(([scope, limit]) => `${scope}=${String(limit)}`)
    .join(', ');
}

export interface NewPair {
  readonly id: string;
  readonly publishableKey: string;
  readonly secretKey: string;
}

/** The only place a secret key is ever printed: after create and roll. */
export function printPair(headline: string, pair: NewPair): void {
  console.log(headline);
  console.log(`  publishable key: ${pair.publishableKey}`);
  console.log(`  secret key:      ${pair.secretKey}`);
  console.log(
    'The secret key is shown only now and is not stored anywhere: keep it in your secret manager.',
  );
}

export interface ListedKey {
  readonly id: string;
  readonly role: string;
  readonly publishableKey: string;
  readonly revoked: boolean;
  readonly expiresAt: string | undefined;
  readonly lastUsedAt?: string | undefined;
  /** A restricted key's permissions; `undefined` or `null`: not restricted. */
  readonly permissions?: readonly string[] | null | undefined;
}

/** One account and its keys as `list` prints them, whatever holds them. */
export function printAccount(
  id: string,
  whitelist: readonly string[] | undefined,
  keys: readonly ListedKey[],
  limits?: Readonly<Record<string, number>> | null,
): void {
  const now = Date.now();
  const own = limits === undefined || limits === null ? '' : `, limits: ${describeLimits(limits)}`;
  console.log(
    `${id}  (whitelist: ${whitelist === undefined ? 'any address' : whitelist.join(', ')}${own})`,
  );
  for (const key of keys) {
    const state = key.revoked
      ? 'revoked'
      : key.expiresAt !== undefined && Date.parse(key.expiresAt) <= now
        ? `expired ${key.expiresAt}`
        : key.expiresAt !== undefined
          ? `expires ${key.expiresAt}`
          : 'active';
    const used = key.lastUsedAt === undefined ? '' : `  last used ${key.lastUsedAt}`;
    const permissions =
      key.permissions === undefined || key.permissions === null
        ? ''
        : `  permissions: ${key.permissions.join(', ')}`;
    console.log(`  ${key.id}  ${key.role}  ${key.publishableKey}  ${state}${used}${permissions}`);
  }
}
