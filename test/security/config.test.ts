import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../../gateway/config';
import { ConfigurationError } from '../../lib/errors';
import {
  MIN_TOKEN_SECRET_BYTES,
  TokenService,
  type TokenServiceOptions,
} from '../../lib/tokens/tokens';

/**
 * Configuration that would weaken a check refuses to start: one error naming the variable, never
 * echoing a secret, instead of a silent default.
 */

const SECRET = 'a-token-secret-long-enough-0123456789-abcdef';
const BASE = { TOLLGATE_TOKEN_SECRET: SECRET } as const;

function refusal(env: Record<string, string>): string {
  try {
    loadConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return (error as Error).message;
  }
  throw new Error('loadConfig accepted the configuration');
}

describe('configuration that would weaken a check', () => {
  it.each([
    ['trusting every proxy with "true"', { TOLLGATE_TRUST_PROXY: 'true' }, 'TOLLGATE_TRUST_PROXY'],
    ['trusting every proxy with "TRUE"', { TOLLGATE_TRUST_PROXY: 'TRUE' }, 'TOLLGATE_TRUST_PROXY'],
    ['trusting every proxy with "yes"', { TOLLGATE_TRUST_PROXY: 'yes' }, 'TOLLGATE_TRUST_PROXY'],
    ['"true" hidden in a list', { TOLLGATE_TRUST_PROXY: 'loopback,true' }, 'TOLLGATE_TRUST_PROXY'],
    ['trusting 0.0.0.0/0', { TOLLGATE_TRUST_PROXY: '0.0.0.0/0' }, 'TOLLGATE_TRUST_PROXY'],
    ['trusting ::/0', { TOLLGATE_TRUST_PROXY: '::/0' }, 'TOLLGATE_TRUST_PROXY'],
    [
      'trusting every IPv4 address as the mapped range ::ffff:0:0/96',
      { TOLLGATE_TRUST_PROXY: '::ffff:0:0/96' },
      'TOLLGATE_TRUST_PROXY',
    ],
    ['trusting half the IPv4 space', { TOLLGATE_TRUST_PROXY: '0.0.0.0/1' }, 'TOLLGATE_TRUST_PROXY'],
    ['trusting half the IPv6 space', { TOLLGATE_TRUST_PROXY: '::/1' }, 'TOLLGATE_TRUST_PROXY'],
    [
      'a trusted range with host bits set',
      { TOLLGATE_TRUST_PROXY: '10.0.0.1/8' },
      'TOLLGATE_TRUST_PROXY',
    ],
    ['an octal trusted address', { TOLLGATE_TRUST_PROXY: '010.0.0.1' }, 'TOLLGATE_TRUST_PROXY'],
    [
      'an integer trusted address',
      { TOLLGATE_TRUST_PROXY: '167772161/32' },
      'TOLLGATE_TRUST_PROXY',
    ],
    ['a wildcard', { TOLLGATE_TRUST_PROXY: '*' }, 'TOLLGATE_TRUST_PROXY'],
    ['zero hops', { TOLLGATE_TRUST_PROXY: '0' }, 'TOLLGATE_TRUST_PROXY'],
    [
      'an empty entry in the list',
      { TOLLGATE_TRUST_PROXY: 'loopback,,10.0.0.0/8' },
      'TOLLGATE_TRUST_PROXY',
    ],
    [
      'a token secret one byte short',
      { TOLLGATE_TOKEN_SECRET: 'x'.repeat(MIN_TOKEN_SECRET_BYTES - 1) },
      'TOLLGATE_TOKEN_SECRET',
    ],
    [
      'a non-numeric token TTL',
      { TOLLGATE_TOKEN_TTL_SECONDS: 'thirty minutes' },
      'TOLLGATE_TOKEN_TTL_SECONDS',
    ],
    [
      'a fractional token TTL',
      { TOLLGATE_TOKEN_TTL_SECONDS: '1800.5' },
      'TOLLGATE_TOKEN_TTL_SECONDS',
    ],
    [
      'a token TTL in exponent notation',
      { TOLLGATE_TOKEN_TTL_SECONDS: '1e9' },
      'TOLLGATE_TOKEN_TTL_SECONDS',
    ],
    ['a zero token TTL', { TOLLGATE_TOKEN_TTL_SECONDS: '0' }, 'TOLLGATE_TOKEN_TTL_SECONDS'],
    [
      'a token TTL over a day',
      { TOLLGATE_TOKEN_TTL_SECONDS: '86401' },
      'TOLLGATE_TOKEN_TTL_SECONDS',
    ],
    [
      'a failed-authentication limit of zero',
      { TOLLGATE_AUTH_FAILURE_LIMIT: '0' },
      'TOLLGATE_AUTH_FAILURE_LIMIT',
    ],
    [
      'Authorization as the publishable-key header',
      { TOLLGATE_PUBLIC_KEY_HEADER: 'Authorization' },
      'TOLLGATE_PUBLIC_KEY_HEADER',
    ],
    [
      'X-Forwarded-For as the publishable-key header',
      { TOLLGATE_PUBLIC_KEY_HEADER: 'X-Forwarded-For' },
      'TOLLGATE_PUBLIC_KEY_HEADER',
    ],
    [
      'Origin as the publishable-key header',
      { TOLLGATE_PUBLIC_KEY_HEADER: 'Origin' },
      'TOLLGATE_PUBLIC_KEY_HEADER',
    ],
    [
      'a Sec-Fetch header as the publishable-key header',
      { TOLLGATE_PUBLIC_KEY_HEADER: 'Sec-Fetch-Site' },
      'TOLLGATE_PUBLIC_KEY_HEADER',
    ],
    [
      "one of the gateway's identity headers as the publishable-key header",
      { TOLLGATE_PUBLIC_KEY_HEADER: 'X-Gateway-Key-Id' },
      'TOLLGATE_PUBLIC_KEY_HEADER',
    ],
    [
      'a header name with a space',
      { TOLLGATE_PUBLIC_KEY_HEADER: 'X Public Key' },
      'TOLLGATE_PUBLIC_KEY_HEADER',
    ],
  ])('refuses %s, naming the variable', (_name, env, variable) => {
    expect(refusal({ ...BASE, ...env })).toContain(variable);
  });

  it('refuses production without a token secret', () => {
    expect(
      refusal({ NODE_ENV: 'production', TOLLGATE_KEYS_FILE: '/etc/tollgate/keys.json' }),
    ).toContain('TOLLGATE_TOKEN_SECRET');
  });

  it('refuses production without a keys file, whose demo keys would be printed', () => {
    expect(refusal({ NODE_ENV: 'production', TOLLGATE_TOKEN_SECRET: SECRET })).toContain(
      'TOLLGATE_KEYS_FILE',
    );
  });

  it('never echoes a token secret that is refused', () => {
    const shortSecret = 'short-but-secret-value';
    expect(refusal({ TOLLGATE_TOKEN_SECRET: shortSecret })).not.toContain(shortSecret);
  });

  it.each([
    ['one hop', '1', 1],
    ['loopback', 'loopback', ['loopback']],
    ['a private /8', '10.0.0.0/8', ['10.0.0.0/8']],
    [
      'an address and the unique-local keyword',
      '203.0.113.10, uniquelocal',
      ['203.0.113.10', 'uniquelocal'],
    ],
    ['the unique-local range written out', 'fc00::/7', ['fc00::/7']],
    ['an IPv4-mapped /104', '::ffff:10.0.0.0/104', ['::ffff:10.0.0.0/104']],
  ])('accepts a trusted proxy given as %s', (_name, value, expected) => {
    expect(loadConfig({ ...BASE, TOLLGATE_TRUST_PROXY: value }).trustProxy).toEqual(expected);
  });

  it('trusts no proxy when TOLLGATE_TRUST_PROXY is unset', () => {
    expect(loadConfig(BASE).trustProxy).toBe(false);
  });
});

describe('token service options that would weaken verification', () => {
  it.each<[string, Partial<TokenServiceOptions>]>([
    ['a secret one byte short', { secret: 'x'.repeat(MIN_TOKEN_SECRET_BYTES - 1) }],
    ['a clock tolerance given as a string', { clockToleranceSeconds: '30' as unknown as number }],
    ['a negative clock tolerance', { clockToleranceSeconds: -1 }],
    ['a clock tolerance over five minutes', { clockToleranceSeconds: 3600 }],
    ['a fractional TTL', { ttlSeconds: 1800.5 }],
    ['a TTL given as a string', { ttlSeconds: '1800' as unknown as number }],
  ])('refuses %s', (_name, options) => {
    expect(() => new TokenService({ secret: SECRET, ...options })).toThrow(ConfigurationError);
  });
});

describe('secrets read from files (TOLLGATE_TOKEN_SECRET_FILE, REDIS_PASSWORD_FILE)', () => {
  let directory = '';
  const write = (name: string, text: string): string => {
    const file = path.join(directory, name);
    writeFileSync(file, text, { mode: 0o600 });
    return file;
  };

  beforeAll(() => {
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-secrets-'));
  });
  afterAll(() => {
    rmSync(directory, { recursive: true, force: true });
  });

  it('reads the token secret from its file, without the trailing newline', () => {
    const file = write('token_secret', `${SECRET}\n`);
    expect(loadConfig({ TOLLGATE_TOKEN_SECRET_FILE: file }).tokenSecret).toBe(SECRET);
  });

  it('reads the Redis password from its file', () => {
    const file = write('redis_password', 'redis-password-0123\n');
    const config = loadConfig({
      ...BASE,
      REDIS_SENTINELS: '127.0.0.1:26379',
      REDIS_SENTINEL_NAME: 'main',
      REDIS_PASSWORD_FILE: file,
    });
    expect(config.redis).toEqual({
      kind: 'sentinel',
      sentinels: ['127.0.0.1:26379'],
      name: 'main',
      password: 'redis-password-0123',
    });
  });

  it('reads the database URL from its file, and refuses it set both ways or with a keys file', () => {
    const url = 'postgres://tollgate:db-password-0123@postgres:5432/tollgate';
    const file = write('database_url', `${url}\n`);
    expect(loadConfig({ ...BASE, TOLLGATE_DATABASE_URL_FILE: file }).databaseUrl).toBe(url);
    const cases: [Record<string, string>, RegExp][] = [
      [
        { ...BASE, TOLLGATE_DATABASE_URL: url, TOLLGATE_DATABASE_URL_FILE: file },
        /^TOLLGATE_DATABASE_URL and TOLLGATE_DATABASE_URL_FILE are both set/,
      ],
      [
        { ...BASE, TOLLGATE_DATABASE_URL_FILE: file, TOLLGATE_KEYS_FILE: 'keys.json' },
        /^TOLLGATE_DATABASE_URL and TOLLGATE_KEYS_FILE are both set/,
      ],
      [
        { ...BASE, TOLLGATE_DATABASE_URL_FILE: write('not_a_url', 'db-password-0123\n') },
        /^TOLLGATE_DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL/,
      ],
    ];
    for (const [env, expected] of cases) {
      const message = refusal(env);
      expect(message).toMatch(expected);
      expect(message).not.toContain('db-password-0123');
    }
  });

  it('refuses a secret set both ways, a missing file, an empty file and a short secret, never echoing it', () => {
    const file = write('short', 'too-short\n');
    const cases: [Record<string, string>, RegExp][] = [
      [
        { TOLLGATE_TOKEN_SECRET: SECRET, TOLLGATE_TOKEN_SECRET_FILE: file },
        /^TOLLGATE_TOKEN_SECRET and TOLLGATE_TOKEN_SECRET_FILE are both set/,
      ],
      [
        { TOLLGATE_TOKEN_SECRET_FILE: path.join(directory, 'absent') },
        /^TOLLGATE_TOKEN_SECRET_FILE names a file that cannot be read \(ENOENT\)/,
      ],
      [
        { TOLLGATE_TOKEN_SECRET_FILE: write('empty', '\n') },
        /^TOLLGATE_TOKEN_SECRET_FILE names an empty file/,
      ],
      [{ TOLLGATE_TOKEN_SECRET_FILE: file }, /^TOLLGATE_TOKEN_SECRET must be at least 32 bytes/],
    ];
    for (const [env, expected] of cases) {
      const message = refusal(env);
      expect(message).toMatch(expected);
      expect(message).not.toContain('too-short');
      expect(message).not.toContain(SECRET);
    }
  });
});
