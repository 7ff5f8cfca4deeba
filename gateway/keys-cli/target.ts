import { readFileSync } from 'node:fs';
import { ConfigurationError } from '../../lib';
import type { CommandName, Options } from './options';

/**
 * Where the key command works: a keys file or a database. The choice is never a guess between
 * two configured stores: `--file` with `--database-url`, or both variables set and neither option
 * given, is refused, and every write names the store it changed. Database URLs are shown with
 * their password replaced by `***`, in every message.
 */

export type Target =
  | { readonly kind: 'file'; readonly file: string }
  | { readonly kind: 'database'; readonly url: string; readonly shown: string };

type Env = Readonly<Record<string, string | undefined>>;

function variable(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === '' ? undefined : value;
}

/** `TOLLGATE_DATABASE_URL`, or the URL in the file `TOLLGATE_DATABASE_URL_FILE` names (as the gateway reads them). */
export function databaseFromEnv(env: Env): { url: string; source: string } | undefined {
  const url = variable(env, 'TOLLGATE_DATABASE_URL');
  const file = variable(env, 'TOLLGATE_DATABASE_URL_FILE');
  if (file === undefined)
    return url === undefined ? undefined : { url, source: 'TOLLGATE_DATABASE_URL' };
  if (url !== undefined) {
    throw new ConfigurationError(
      'TOLLGATE_DATABASE_URL and TOLLGATE_DATABASE_URL_FILE are both set: set one of them',
    );
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8').replace(/\r?\n$/, '');
  } catch (error) {
    throw new ConfigurationError(
      `TOLLGATE_DATABASE_URL_FILE names a file that cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'}): ${file}`,
    );
  }
  return { url: text, source: 'TOLLGATE_DATABASE_URL_FILE' };
}

export function targetOf(command: CommandName, options: Options, env: Env): Target {
  const option = options['database-url'];
  if (command === 'import' || command === 'export' || command === 'migrate') {
    if (command === 'export' && options.file !== undefined) {
      throw new ConfigurationError(
        'export writes the database to stdout or to --out <path>; --file is for import',
      );
    }
    if (command === 'migrate' && options.file !== undefined) {
      throw new ConfigurationError('migrate works on a database only; --file is for import');
    }
    if (option !== undefined) return database(option, '--database-url');
    const fromEnv = databaseFromEnv(env);
    if (fromEnv === undefined) {
      throw new ConfigurationError(
        `${command} works on a database: pass --database-url <url> or set TOLLGATE_DATABASE_URL`,
      );
    }
    return database(fromEnv.url, fromEnv.source);
  }
  if (options.out !== undefined) throw new ConfigurationError('--out is for export only');
  if (option !== undefined && options.file !== undefined) {
    throw new ConfigurationError(
      '--file and --database-url both given: choose where the keys live (one of them)',
    );
  }
  if (option !== undefined) return database(option, '--database-url');
  if (options.file !== undefined) return { kind: 'file', file: options.file };
  const fromEnv = databaseFromEnv(env);
  const file = variable(env, 'TOLLGATE_KEYS_FILE');
  if (fromEnv !== undefined && file !== undefined) {
    throw new ConfigurationError(
      `${fromEnv.source} and TOLLGATE_KEYS_FILE are both set: pass --database-url <url> or --file <path> to choose`,
    );
  }
  if (fromEnv !== undefined) return database(fromEnv.url, fromEnv.source);
  return { kind: 'file', file: file ?? 'keys.json' };
}

function database(url: string, source: string): Target {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  // The value itself is not echoed: it may hold a password.
  if (
    parsed === undefined ||
    (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:')
  ) {
    throw new ConfigurationError(`${source} must be a postgres:// or postgresql:// URL`);
  }
  return { kind: 'database', url, shown: redactedUrl(parsed) };
}

/** `postgres://user:***@host:port/db`; a query string (which may carry a password) as `?…`. */
function redactedUrl(url: URL): string {
  const credentials =
    url.username === '' ? '' : `${url.username}${url.password === '' ? '' : ':***'}@`;
  return `${url.protocol}//${credentials}${url.host}${url.pathname}${url.search === '' ? '' : '?…'}`;
}

const URL_PASSWORD = /(postgres(?:ql)?:\/\/[^:/?#@\s]*:)[^@\s]*@/gi;

/**
 * `text` with every password it could carry replaced: those of the given URLs (as written and
 * decoded) and any `postgres://user:password@` in it.
 */
export function scrub(text: string, urls: readonly (string | undefined)[]): string {
  let out = text;
  for (const url of urls) {
    if (url === undefined || url === '') continue;
    out = out.split(url).join('postgres://***');
    const password = passwordOf(url);
    for (const secret of new Set([password, safeDecode(password)])) {
      if (secret !== '') out = out.split(secret).join('***');
    }
  }
  return out.replace(URL_PASSWORD, '$1***@').replace(/(password=)[^&\s]*/gi, '$1***');
}

function passwordOf(url: string): string {
  try {
    return new URL(url).password;
  } catch {
    return '';
  }
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}
