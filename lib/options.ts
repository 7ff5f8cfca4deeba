import { ConfigurationError } from './errors';

/**
 * The checks every function of the kit that takes options runs when it is called: an options
 * argument that is not an object, an unknown (often misspelt) key, a value of the wrong type and a
 * missing required option each throw a `ConfigurationError` naming the function, the option and
 * what it accepts. A value is described by its type only, never shown: it may be a secret given
 * in the wrong place.
 */

/** One option's rule: what it accepts, as a message says it, and the test of a given value. */
export interface Check {
  /** What the option accepts, completing "must be …": `a whole number of at least 1`. */
  readonly accepts: string;
  readonly required: boolean;
  readonly test: (value: unknown) => boolean;
}

/**
 * A check for every option of `T`, each key of `T` once: an option added to the type without a
 * check here, or a check of an option the type does not have, fails to compile.
 */
export type OptionChecks<T> = { readonly [K in keyof Required<T>]: Check };

export function check(accepts: string, test: (value: unknown) => boolean): Check {
  return { accepts, required: false, test };
}

/** The same check, for an option that must be given. */
export function required(optional: Check): Check {
  return { ...optional, required: true };
}

export const isBoolean = check('true or false', (value) => typeof value === 'boolean');
export const isString = check('a string', (value) => typeof value === 'string');
export const isNonEmptyString = check(
  'a non-empty string',
  (value) => typeof value === 'string' && value.length > 0,
);
export const isFunction = check('a function', (value) => typeof value === 'function');
export const isRegExp = check('a regular expression', (value) => value instanceof RegExp);
export const isStringList = check(
  'a list of strings',
  (value) => Array.isArray(value) && value.every((entry) => typeof entry === 'string'),
);

export function wholeNumber(min: number, max = Number.MAX_SAFE_INTEGER): Check {
  return check(
    max === Number.MAX_SAFE_INTEGER
      ? `a whole number of at least ${min}`
      : `a whole number from ${min} to ${max}`,
    (value) => Number.isInteger(value) && (value as number) >= min && (value as number) <= max,
  );
}

export function oneOf(values: readonly string[]): Check {
  return check(`one of ${values.join(', ')}`, (value) => values.includes(value as string));
}

export function listOf(values: readonly string[]): Check {
  return check(
    `a list of ${values.join(', ')}`,
    (value) => Array.isArray(value) && value.every((entry) => values.includes(entry as string)),
  );
}

/** A value that passes either check. */
export function either(first: Check, second: Check): Check {
  return check(
    `${first.accepts} or ${second.accepts}`,
    (value) => first.test(value) || second.test(value),
  );
}

/** An object that has every named method: a duck-typed dependency (a key store, a client). */
export function objectWith(accepts: string, methods: readonly string[]): Check {
  return check(accepts, (value) => {
    if (typeof value !== 'object' || value === null) return false;
    const fields = value as Record<string, unknown>;
    return methods.every((name) => typeof fields[name] === 'function');
  });
}

/** A plain object (not a list), checked no further here. */
export const isObject = check(
  'an object',
  (value) => typeof value === 'object' && value !== null && !Array.isArray(value),
);

export const KEY_STORE = objectWith('a key store (KeyRing, FileKeyStore or PgKeyStore)', [
  'findBySecretKey',
  'findByKeyPair',
  'findByPublishableKey',
  'findById',
]);

export const LIMITER_REDIS = check(
  'the { client, health } of createLimiterRedis()',
  (value) =>
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { client?: unknown }).client === 'object' &&
    typeof (value as { health?: unknown }).health === 'object',
);

/** The SharedArrayBuffer the worker threads of one process keep their failure budget in. */
export const FAILURE_BUDGET_BUFFER = check(
  'a SharedArrayBuffer of a ThreadShare link (its failures)',
  isSharedArrayBuffer,
);

function isSharedArrayBuffer(value: unknown): boolean {
  return Object.prototype.toString.call(value) === '[object SharedArrayBuffer]';
}

export const TOKEN_SERVICE = objectWith('a TokenService', ['issue', 'verify']);

/** One worker's share of a `ThreadShare`: its port, and the shared memory of its counts. */
export const THREAD_LINK = check('a link of ThreadShare#link()', (value) => {
  if (typeof value !== 'object' || value === null) return false;
  const { port, failures, counters } = value as {
    port?: { postMessage?: unknown };
    failures?: unknown;
    counters?: unknown;
  };
  return (
    typeof port?.postMessage === 'function' &&
    isSharedArrayBuffer(failures) &&
    isSharedArrayBuffer(counters)
  );
});

/** The failed-authentication budget, of which a middleware uses one method. */
export function authFailuresWith(method: 'queueAttempt' | 'record'): Check {
  return objectWith(`the limiter of createAuthFailureLimiter() (with ${method})`, [method]);
}

export const LOGGER = objectWith('a logger with info, warn and error (pino fits)', [
  'info',
  'warn',
  'error',
]);

/**
 * Throws a `ConfigurationError` unless `options` is an object whose every key has a check in
 * `checks`, whose every given value passes it, and which gives every required option. `where`
 * names the function: `protect()`.
 */
export function checkOptions<T>(
  where: string,
  options: unknown,
  checks: OptionChecks<T>,
): asserts options is T {
  const table = checks as Readonly<Record<string, Check>>;
  const names = Object.keys(table);
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    const mandatory = names.filter((name) => table[name]?.required === true);
    throw new ConfigurationError(
      `${where}: expected an options object { ${names.join(', ')} }` +
        (mandatory.length === 0 ? '' : ` with at least ${mandatory.join(', ')}`) +
        `; got ${describe(options)}`,
    );
  }
  const given = options as Readonly<Record<string, unknown>>;
  for (const name of Object.keys(given)) {
    if (!Object.hasOwn(table, name)) {
      const near = closest(name, names);
      throw new ConfigurationError(
        `${where}: unknown option ${JSON.stringify(name)}` +
          (near === undefined ? '' : ` (did you mean ${near}?)`) +
          `; known: ${names.join(', ')}`,
      );
    }
  }
  for (const name of names) {
    const rule = table[name];
    const value = given[name];
    if (rule === undefined) continue;
    if (value === undefined) {
      if (rule.required) {
        throw new ConfigurationError(`${where}: ${name} is required (${rule.accepts})`);
      }
      continue;
    }
    if (!rule.test(value)) {
      throw new ConfigurationError(
        `${where}: ${name} must be ${rule.accepts}; got ${describe(value)}`,
      );
    }
  }
}

/** A value's kind for a message: numbers and booleans as they are, anything else by type only. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  switch (typeof value) {
    case 'undefined':
      return 'nothing';
    case 'number':
    case 'boolean':
      return String(value);
    case 'string':
      return value === '' ? 'an empty string' : 'a string';
    case 'function':
      return 'a function';
    case 'object':
      return 'an object';
    default:
      return `a ${typeof value}`;
  }
}

/** The known name a misspelt one most likely meant: same letters but case, or two edits away. */
function closest(name: string, names: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = 3;
  for (const candidate of names) {
    const distance =
      candidate.toLowerCase() === name.toLowerCase() ? 0 : editDistance(name, candidate);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/** Levenshtein distance: the fewest single-character edits that turn `a` into `b`. */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}
