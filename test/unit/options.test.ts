import { EventEmitter } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as root from '../../lib';
import { ConfigurationError } from '../../lib/errors';
import * as coreEntry from '../../lib/entry/core';
import * as expressEntry from '../../lib/entry/express';
import * as forwardAuthEntry from '../../lib/entry/forward-auth';
import * as postgresEntry from '../../lib/entry/postgres';
import * as redisEntry from '../../lib/entry/redis';
import { RedisHealth } from '../../lib/rate-limit/redis-health';
import { AdmissionStore } from '../../lib/rate-limit/admission-store';
import { ScopeCounter } from '../../lib/core/limits';
import { credentialResolver } from '../../lib/core/credentials';
import { keyPairResolver } from '../../lib/core/key-pair';
import { createFixtures, TOKEN_SECRET } from '../helpers/fixtures';

const kit = {
  ...root,
  ...coreEntry,
  ...expressEntry,
  ...forwardAuthEntry,
  ...postgresEntry,
  ...redisEntry,
};
const {
  authenticate,
  authenticateKeyPair,
  createAuthFailureLimiter,
  createGate,
  createLimiterRedis,
  createPathRedactor,
  createRateLimiter,
  errorHandler,
  FileKeyAdmin,
  FileKeyStore,
  forwardAuthDoor,
  issueToken,
  jsonBody,
  KeyRing,
  PgKeyStore,
  refuseQueryCredentials,
  requireWhitelistedIp,
  ThreadShare,
  TokenService,
  tollgate,
  TollgateStore,
} = kit;

/**
 * Every public function and class that takes an options object refuses, when it is called, a
 * misspelt option, a value of the wrong type, a missing required option and an options argument
 * that is not an object, with a `ConfigurationError` naming the function and the option. A new
 * export must join the table, or the list of exports that take no options object.
 */

type Options = Record<string, unknown>;

interface Case {
  /** The export (or the method of what it returns) as the message names it. */
  readonly where: string;
  readonly call: (options: unknown) => unknown;
  /** Options it accepts. */
  readonly valid: Options;
  /** A misspelling of one of its options. */
  readonly misspelt: string;
  /** An option and a value of the wrong type for it. */
  readonly wrongType: readonly [name: string, value: unknown];
  /** An option it cannot do without, when it has one. */
  readonly required?: string;
  /** `true` when the options argument may be left out. */
  readonly optional?: boolean;
  /** Calling it with `valid` would open a file or a connection: not done here. */
  readonly opensSomething?: boolean;
}

const keyStore = new KeyRing([]);
const keysDocument = createFixtures().document;
const tokens = new TokenService({ secret: TOKEN_SECRET });
const scopes = { orders: { limit: 10 } };
const gate = tollgate({ keyStore, tokens, scopes });
const core = createGate({ keyStore, tokens, scopes });
const redisStatus = Object.assign(new EventEmitter(), { status: 'wait' });

const CASES: readonly Case[] = [
  {
    where: 'tollgate()',
    call: (options) => {
      tollgate(options as never).close();
    },
    valid: { keyStore, scopes },
    misspelt: 'scope',
    wrongType: ['windowMs', '60000'],
    required: 'scopes',
  },
  {
    where: 'scope orders',
    call: (definition) => {
      tollgate({ keyStore, scopes: { orders: definition as never } }).close();
    },
    valid: { limit: 10 },
    misspelt: 'windowMs',
    wrongType: ['limit', '10'],
    required: 'limit',
  },
  {
    where: 'protect(',
    call: (options) => gate.protect(options as never),
    valid: { accept: ['secret'], limit: 'orders' },
    misspelt: 'ipWhitelst',
    wrongType: ['accept', 'secret'],
    required: 'limit',
  },
  {
    where: 'tokenExchange()',
    call: (options) => gate.tokenExchange(options as never),
    valid: { limit: 'orders' },
    misspelt: 'limt',
    wrongType: ['limit', 10],
    required: 'limit',
  },
  {
    where: 'forwardAuth()',
    call: (options) => gate.forwardAuth(options as never),
    valid: { routes: [{ method: 'GET', path: '/orders', accept: ['secret'], limit: 'orders' }] },
    misspelt: 'route',
    wrongType: ['parameterPattern', '[a-z]+'],
    required: 'routes',
  },
  {
    where: 'cors()',
    call: (options) => gate.cors(options as never),
    valid: { methods: ['GET'] },
    misspelt: 'method',
    wrongType: ['methods', 'GET'],
    optional: true,
  },
  {
    where: 'createGate()',
    call: (options) => {
      createGate(options as never).close();
    },
    valid: { keyStore, scopes },
    misspelt: 'keystore',
    wrongType: ['refuseSecretKeysFromBrowsers', 'no'],
    required: 'keyStore',
  },
  {
    where: 'protect(',
    call: (policy) => core.policy(policy as never),
    valid: { accept: ['token'], limit: 'orders' },
    misspelt: 'roles',
    wrongType: ['ipWhitelist', 'yes'],
    required: 'accept',
  },
  {
    where: 'forwardAuth()',
    call: (options) => forwardAuthDoor(options as never, { gate: core, credentialHeaders: [] }),
    valid: { routes: [] },
    misspelt: 'parameterPatern',
    wrongType: ['routes', 'GET /orders'],
    required: 'routes',
  },
  {
    where: 'ScopeCounter',
    call: (options) => {
      new ScopeCounter(options as never).store.shutdown();
    },
    valid: { name: 'orders', definition: { limit: 1 }, windowMs: 60_000, prefix: 'rl:' },
    misspelt: 'windowMS',
    wrongType: ['windowMs', '60000'],
    required: 'definition',
  },
  {
    where: 'AdmissionStore',
    call: (options) => {
      new AdmissionStore(options as never).shutdown();
    },
    valid: { windowMs: 60_000 },
    misspelt: 'expectedInstance',
    wrongType: ['expectedInstances', '2'],
    required: 'windowMs',
  },
  {
    where: 'credentialResolver()',
    call: (options) => credentialResolver(options as never),
    valid: { keyStore, accept: ['secret'] },
    misspelt: 'acept',
    wrongType: ['accept', 'secret'],
    required: 'accept',
  },
  {
    where: 'keyPairResolver()',
    call: (options) => keyPairResolver(options as never),
    valid: { keyStore },
    misspelt: 'keystore',
    wrongType: ['onSecurityEvent', true],
    required: 'keyStore',
  },
  {
    where: 'createPathRedactor()',
    call: (options) => createPathRedactor(options as never),
    valid: { maxLength: 100 },
    misspelt: 'maxLenght',
    wrongType: ['maxLength', '100'],
    optional: true,
  },
  {
    where: 'KeyRing.fromDocument()',
    call: (options) => KeyRing.fromDocument(keysDocument, 'keys.json', options as never),
    valid: { permissions: ['reports:read'], limitScopes: { orders: 'account' } },
    misspelt: 'permisions',
    wrongType: ['permissions', 'reports:read'],
    optional: true,
  },
  {
    where: 'FileKeyStore.open()',
    call: (options) => FileKeyStore.open('keys.json', options as never),
    valid: { permissions: [] },
    misspelt: 'permission',
    wrongType: ['limitScopes', ['orders']],
    optional: true,
    opensSomething: true,
  },
  {
    where: 'FileKeyStore.load()',
    call: (options) => FileKeyStore.load('keys.json', options as never),
    valid: { permissions: [] },
    misspelt: 'limitscopes',
    wrongType: ['permissions', 'wallets:read'],
    optional: true,
    opensSomething: true,
  },
  {
    where: 'FileKeyAdmin.open()',
    call: (options) =>
      FileKeyAdmin.open(join(tmpdir(), 'tollgate-options-absent.json'), options as never),
    valid: { keyEnvironment: 'live' },
    misspelt: 'keyEnviroment',
    wrongType: ['keyEnvironment', 'production'],
    optional: true,
  },
  {
    where: 'PgKeyStore.open()',
    call: (options) => PgKeyStore.open(options as never),
    valid: { connectionString: 'postgres://127.0.0.1:1/keys' },
    misspelt: 'connectionstring',
    wrongType: ['poolSize', '4'],
    required: 'connectionString',
    opensSomething: true,
  },
  {
    where: 'TokenService',
    call: (options) => new TokenService(options as never),
    valid: { secret: TOKEN_SECRET },
    misspelt: 'ttl',
    wrongType: ['ttlSeconds', '60'],
    required: 'secret',
  },
  {
    where: 'createAuthFailureLimiter()',
    call: (options) => {
      createAuthFailureLimiter(options as never).shutdown();
    },
    valid: { limit: 5 },
    misspelt: 'limt',
    wrongType: ['limit', '5'],
    optional: true,
  },
  {
    where: 'ThreadShare',
    call: (options) => {
      new ThreadShare(options as never).close();
    },
    valid: { authFailureLimit: 5, windowMs: 60_000, maxTrackedIps: 64 },
    misspelt: 'windowMS',
    wrongType: ['maxTrackedIps', '64'],
    optional: true,
  },
  {
    where: 'TollgateStore',
    call: (options) => new TollgateStore(options as never),
    valid: { prefix: 'rl:' },
    misspelt: 'prefx',
    wrongType: ['expectedInstances', '2'],
    optional: true,
  },
  {
    where: 'RedisHealth',
    call: (options) => new RedisHealth(redisStatus, options as never),
    valid: { coolDownMs: 10 },
    misspelt: 'cooldown',
    wrongType: ['coolDownMs', '10'],
    optional: true,
  },
  {
    where: 'createLimiterRedis()',
    call: (options) => createLimiterRedis(options as never),
    valid: { url: 'redis://127.0.0.1:1' },
    misspelt: 'ur1',
    wrongType: ['clusterNodes', '127.0.0.1:7000'],
    opensSomething: true,
  },
  {
    where: 'authenticate()',
    call: (options) => authenticate(options as never),
    valid: { keyStore, accept: ['secret'] },
    misspelt: 'keystore',
    wrongType: ['accept', 'secret'],
    required: 'keyStore',
  },
  {
    where: 'refuseQueryCredentials()',
    call: (options) => refuseQueryCredentials(options as never),
    valid: { keyStore },
    misspelt: 'onSecurityEvents',
    wrongType: ['onSecurityEvent', 'log'],
    optional: true,
  },
  {
    where: 'authenticateKeyPair()',
    call: (options) => authenticateKeyPair(options as never),
    valid: { keyStore },
    misspelt: 'authFailure',
    wrongType: ['refuseSecretKeysFromBrowsers', 1],
    required: 'keyStore',
  },
  {
    where: 'issueToken()',
    call: (options) => issueToken(options as never),
    valid: { tokens },
    misspelt: 'token',
    wrongType: ['tokens', TOKEN_SECRET],
    required: 'tokens',
  },
  {
    where: 'requireWhitelistedIp()',
    call: (options) => requireWhitelistedIp(options as never),
    valid: { whitelist: ['10.0.0.0/8'] },
    misspelt: 'whitelst',
    wrongType: ['credentials', 'secret'],
    optional: true,
  },
  {
    where: 'jsonBody()',
    call: (options) => jsonBody(options as never),
    valid: { limit: '64kb' },
    misspelt: 'limt',
    wrongType: ['limit', true],
    optional: true,
  },
  {
    where: 'errorHandler()',
    call: (options) => errorHandler(options as never),
    valid: {},
    misspelt: 'loger',
    wrongType: ['logger', true],
    optional: true,
  },
  {
    where: 'createRateLimiter()',
    call: (options) => {
      createRateLimiter(options as never).store.shutdown();
    },
    valid: { name: 'orders', limit: 5 },
    misspelt: 'windowMS',
    wrongType: ['limit', '5'],
    required: 'name',
  },
];

/**
 * Exports that take no options object: predicates, parsers and builders with positional
 * arguments, middlewares without settings, and the error classes (recognised as such).
 */
const WITHOUT_OPTIONS: ReadonlySet<string> = new Set([
  'identityHeaders',
  'RouteTable',
  'allowAnswer',
  'refusalAnswer',
  'originalRequest',
  'limitScopesOf',
  'canonicalClientIp',
  'generateKey',
  'sha256',
  'requireRole',
  'requestId',
  'clientIp',
  'expressServerOptions',
  'refuseMalformedRequests',
  'toTollgateError',
  'notFound',
  'methodNotAllowed',
  'clientErrorHandler',
  'errorBody',
  'series',
]);

/** What the table covers, by export name (a method counts as its factory). */
const COVERED: ReadonlySet<string> = new Set([
  'tollgate',
  'createGate',
  'forwardAuthDoor',
  'createPathRedactor',
  'KeyRing',
  'FileKeyStore',
  'FileKeyAdmin',
  'PgKeyStore',
  'TokenService',
  'createAuthFailureLimiter',
  'ThreadShare',
  'TollgateStore',
  'createLimiterRedis',
  'authenticate',
  'refuseQueryCredentials',
  'authenticateKeyPair',
  'issueToken',
  'requireWhitelistedIp',
  'jsonBody',
  'errorHandler',
  'createRateLimiter',
]);

/** The message of what `call` throws or rejects with; fails when it returns. */
async function refusal(call: () => unknown): Promise<ConfigurationError> {
  let result: unknown;
  try {
    result = call();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return error as ConfigurationError;
  }
  try {
    await result;
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return error as ConfigurationError;
  }
  throw new Error('expected a ConfigurationError, and the call returned');
}

function without(options: Options, name: string): Options {
  const copy = { ...options };
  // eslint-disable-next-line @typescript-eslint/no-dynamic-delete -- the option under test
  delete copy[name];
  return copy;
}

afterAll(() => {
  gate.close();
  core.close();
});

describe.each(CASES)('$where', (entry) => {
  it('takes its valid options', async () => {
    if (entry.opensSomething === true) return;
    await Promise.resolve(entry.call(entry.valid));
  });

  it('refuses a misspelt option, naming it and the known ones', async () => {
    const error = await refusal(() => entry.call({ ...entry.valid, [entry.misspelt]: 1 }));
    expect(error.message).toContain(entry.where);
    expect(error.message).toContain(`unknown option ${JSON.stringify(entry.misspelt)}`);
    expect(error.message).toMatch(/; known: \w+/);
  });

  it('refuses a value of the wrong type, naming the option and what it accepts', async () => {
    const [name, value] = entry.wrongType;
    const error = await refusal(() => entry.call({ ...entry.valid, [name]: value }));
    expect(error.message).toContain(entry.where);
    expect(error.message).toContain(`${name} must be `);
    // A value is described by its type, never shown: it may be a secret in the wrong place.
    expect(error.message).toMatch(/; got (a|an) [a-z]+$|; got (true|false|-?\d+)$/);
  });

  it('refuses a missing required option, or an options argument that is not an object', async () => {
    if (entry.required !== undefined) {
      const error = await refusal(() => entry.call(without(entry.valid, entry.required!)));
      expect(error.message).toContain(`${entry.required} is required`);
    }
    const wrong = await refusal(() => entry.call(42));
    expect(wrong.message).toContain(entry.where);
    expect(wrong.message).toContain('expected an options object');
    if (entry.optional !== true) {
      const missing = await refusal(() => entry.call(undefined));
      expect(missing.message).toContain('expected an options object');
    }
  });
});

describe('the table', () => {
  /** The package's entry files: the root and every subpath export, as sources. */
  function entryFiles(): string[] {
    const manifest = JSON.parse(readFileSync(join(__dirname, '../../package.json'), 'utf8')) as {
      exports: Record<string, string | { types?: string }>;
    };
    const files = new Set<string>(['lib/index.ts']);
    for (const target of Object.values(manifest.exports)) {
      const types = typeof target === 'string' ? target : target.types;
      const source = types?.match(/^\.\/dist\/(lib\/.+)\.d\.ts$/)?.[1];
      if (source !== undefined) files.add(`${source}.ts`);
    }
    for (const name of readdirSync(join(__dirname, '../../lib'))) {
      if (name.endsWith('-entry.ts')) files.add(`lib/${name}`);
    }
    return [...files];
  }

  /** Every runtime export of every entry, by name. */
  function allExports(): Map<string, unknown> {
    const exported = new Map<string, unknown>(Object.entries(root));
    for (const file of entryFiles()) {
      const entry = jest.requireActual<Record<string, unknown>>(join(__dirname, '../..', file));
      for (const [name, value] of Object.entries(entry)) exported.set(name, value);
    }
    return exported;
  }

  it('covers every runtime export that is a function or a class', () => {
    const uncovered = [...allExports()]
      .filter(([, value]) => typeof value === 'function')
      .filter(([name, value]) => {
        const prototype = (value as { prototype?: unknown }).prototype;
        const isErrorClass = prototype instanceof Error;
        return !isErrorClass && !COVERED.has(name) && !WITHOUT_OPTIONS.has(name);
      })
      .map(([name]) => name);
    expect(uncovered).toEqual([]);
  });

  it('names only exports that exist', () => {
    const names = new Set(allExports().keys());
    expect([...COVERED, ...WITHOUT_OPTIONS].filter((name) => !names.has(name))).toEqual([]);
  });
});

describe('the messages a new user meets', () => {
  it('protect() without limit names the declared scopes', () => {
    expect(() => gate.protect({ accept: ['secret'] } as never)).toThrow(
      'protect(): limit is required (the name of a declared scope (orders))',
    );
  });

  it('protect() with no argument says an options object is expected, not a TypeError', () => {
    expect(() => gate.protect(undefined as never)).toThrow(
      /^protect\(\): expected an options object \{ accept, role, permission, limit, publishableLimit, ipWhitelist, id, idempotency, body \} with at least accept, limit; got nothing$/,
    );
  });

  it('forwardAuth() checks a token-exchange route as it checks every other', () => {
    const route = { method: 'POST', path: '/auth/token', accept: 'key-pair', limt: 'orders' };
    expect(() => gate.forwardAuth({ routes: [route] } as never)).toThrow(/unknown option "limt"/);
  });

  it("the README's first example, with permissions misspelt, is refused naming both", () => {
    expect(() =>
      KeyRing.fromDocument({ accounts: [] }, 'keys.json', { permisions: [] } as never),
    ).toThrow(
      'KeyRing.fromDocument(): unknown option "permisions" (did you mean permissions?); known: limitScopes, permissions',
    );
    expect(() => KeyRing.fromDocument({ accounts: [] }, { permissions: [] } as never)).toThrow(
      /^KeyRing\.fromDocument\(\): source must be a string naming the document \(its path\); got an object$/,
    );
  });

  it('new KeyRing() refuses options given in place of its scopes or its permission names', () => {
    expect(() => new KeyRing([], { permissions: ['reports:read'] } as never)).toThrow(
      /^KeyRing: limitScopes must be an object of scope names, each 'account' or 'ip'; got an object \(for a keys document and its options, use KeyRing\.fromDocument/,
    );
    expect(() => new KeyRing([], undefined, 'wallets:read' as never)).toThrow(
      'KeyRing: permissionNames must be a list of strings; got a string',
    );
    expect(() => new KeyRing({ accounts: [] } as never)).toThrow(
      'KeyRing: records must be a list of key records; got an object',
    );
    expect(new KeyRing([], { orders: 'account' }, ['wallets:read']).limitScopes).toEqual({
      orders: 'account',
    });
  });

  it('tollgate() without scopes says so', () => {
    expect(() => tollgate({ keyStore } as never)).toThrow(
      'tollgate(): scopes is required (an object of scopes, { orders: { limit: 100 } })',
    );
  });

  it('untracedPaths takes a list of paths, each starting with /', () => {
    const withPaths = (untracedPaths: unknown) => () => {
      tollgate({ keyStore, scopes, untracedPaths } as never).close();
    };
    expect(withPaths(['/healthz', '/readyz'])).not.toThrow();
    for (const wrong of ['/healthz', ['healthz'], [1]]) {
      expect(withPaths(wrong)).toThrow(
        'tollgate(): untracedPaths must be a list of paths, each starting with /',
      );
    }
  });

  it('a misspelt option is matched to the one it most likely meant', () => {
    expect(() => requireWhitelistedIp({ whitelst: ['10.0.0.0/8'] } as never)).toThrow(
      'requireWhitelistedIp(): unknown option "whitelst" (did you mean whitelist?); known: whitelist, credentials, authFailures',
    );
  });

  it('a wrong type says what is accepted and what was given, never the value itself', () => {
    expect(() => new TokenService({ secret: TOKEN_SECRET, ttlSeconds: '60' } as never)).toThrow(
      'TokenService: ttlSeconds must be a whole number from 1 to 86400; got a string',
    );
    expect(() => issueToken({ tokens: TOKEN_SECRET } as never)).toThrow(
      /^issueToken\(\): tokens must be a TokenService; got a string$/,
    );
  });

  it("a scope's limit is a whole number from 1 to 1 000 000, or refused naming it", () => {
    const withLimit = (limit: number) => (): void => {
      tollgate({ keyStore, scopes: { orders: { limit } } }).close();
    };
    for (const limit of [0, 1_000_001, 2.5]) {
      expect(withLimit(limit)).toThrow(
        /^tollgate\(\): scope orders: limit must be a whole number from 1 to 1000000; got /,
      );
    }
    expect(withLimit(1_000_000)).not.toThrow();
  });

  it("a scope's window is a whole number of ms from a second to a day, or refused naming it", () => {
    const withWindow = (window: unknown) => (): void => {
      tollgate({ keyStore, scopes: { orders: { limit: 10, window: window as number } } }).close();
    };
    for (const window of [999, 0, -6000, 86_400_001, 1500.5, Number.NaN, Infinity]) {
      expect(withWindow(window)).toThrow(ConfigurationError);
      expect(withWindow(window)).toThrow(
        /^tollgate\(\): scope orders: window must be a whole number from 1000 to 86400000; got /,
      );
    }
    expect(withWindow('6000')).toThrow(
      'tollgate(): scope orders: window must be a whole number from 1000 to 86400000; got a string',
    );
    expect(() => createGate({ keyStore, scopes: { orders: { limit: 1, window: 999 } } })).toThrow(
      'createGate(): scope orders: window must be a whole number from 1000 to 86400000; got 999',
    );
    for (const window of [1000, 6000, 86_400_000]) expect(withWindow(window)).not.toThrow();
    // The gate's own window, every scope's without one, is named as the gate's option.
    expect(() => tollgate({ keyStore, scopes, windowMs: 86_400_001 })).toThrow(
      'tollgate(): windowMs must be a whole number from 1000 to 86400000; got 86400001',
    );
  });
});
