import jwt from 'jsonwebtoken';
import { AuthenticationError, ConfigurationError } from '../../lib/errors';
import type { Role } from '../../lib/model/roles';
import {
  DEFAULT_TOKEN_TTL_SECONDS,
  MAX_TOKEN_LENGTH,
  MIN_TOKEN_SECRET_BYTES,
  type TokenClaims,
  TokenService,
  type TokenServiceOptions,
} from '../../lib/tokens/tokens';

const SECRET = 'unit-test-token-secret-of-at-least-32-bytes';
const OTHER_SECRET = 'another-secret-that-is-also-32-bytes-long!!';
const TTL = 600;
/** A frozen "now", in ms, not on a whole second: 2025-06-15T14:40:00.250Z. */
const START_MS = 1_750_000_000_250;
const START_S = Math.floor(START_MS / 1000);
const KEY = { id: 'key_l2', accountId: 'acct_open', role: 'level-2' as Role };
const DAY = 24 * 60 * 60;
const TEN_YEARS = 10 * 365 * DAY;

interface Clock {
  ms: number;
}

function service(clock: Clock, options: Partial<TokenServiceOptions> = {}): TokenService {
  return new TokenService({ secret: SECRET, ttlSeconds: TTL, now: () => clock.ms, ...options });
}

/**
 * A payload as the service itself would write it, at `iat`, for overriding field by field; a field
 * overridden with `undefined` is left out.
 */
function claims(iat = START_S, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const payload: Record<string, unknown> = {
    sub: KEY.id,
    acct: KEY.accountId,
    role: KEY.role,
    jti: 'f3b1c2d4-0000-4000-8000-000000000000',
    iat,
    exp: iat + TTL,
    iss: 'tollgate',
    ...overrides,
  };
  return Object.fromEntries(Object.entries(payload).filter(([, value]) => value !== undefined));
}

function sign(
  payload: string | object,
  options: jwt.SignOptions = {},
  secret: string = SECRET,
): string {
  return jwt.sign(payload, secret, { algorithm: 'HS256', ...options });
}

function verifyError(tokens: TokenService, token: string): AuthenticationError {
  try {
    tokens.verify(token);
  } catch (error) {
    expect(error).toBeInstanceOf(AuthenticationError);
    return error as AuthenticationError;
  }
  throw new Error('the token was accepted');
}

function expectInvalid(tokens: TokenService, token: string): void {
  expect(verifyError(tokens, token)).toMatchObject({
    status: 401,
    code: 'invalid_token',
    message: 'Invalid token',
  });
}

function expectExpired(tokens: TokenService, token: string): void {
  expect(verifyError(tokens, token)).toMatchObject({
    status: 401,
    code: 'expired_token',
    message: 'Expired token',
  });
}

describe('TokenService issue/verify', () => {
  it('round-trips the key id, account, role and a jti, with exp - iat equal to the TTL', () => {
    const clock = { ms: START_MS };
    const tokens = service(clock);
    const issued = tokens.issue(KEY);
    expect(issued.expiresIn).toBe(TTL);
    const verified: TokenClaims = tokens.verify(issued.token);
    expect(verified).toEqual({
      keyId: KEY.id,
      accountId: KEY.accountId,
      role: KEY.role,
      tokenId: issued.tokenId,
      issuedAt: START_S,
      expiresAt: START_S + TTL,
    });
    expect(verified.expiresAt - verified.issuedAt).toBe(TTL);
  });

  it('writes an HS256 JWT: typ JWT, issuer, exp - iat = TTL, and no secret', () => {
    const tokens = service({ ms: START_MS });
    const { token, tokenId } = tokens.issue(KEY);
    const decoded = jwt.decode(token, { complete: true });
    expect(decoded?.header).toEqual({ alg: 'HS256', typ: 'JWT' });
    expect(decoded?.payload).toEqual({
      sub: KEY.id,
      acct: KEY.accountId,
      role: KEY.role,
      jti: tokenId,
      iat: START_S,
      exp: START_S + TTL,
      iss: 'tollgate',
    });
    expect(token).not.toContain(Buffer.from(SECRET).toString('base64url'));
  });

  it('uses the default lifetime (30 minutes)', () => {
    const tokens = new TokenService({ secret: SECRET, now: () => START_MS });
    expect(tokens.ttlSeconds).toBe(DEFAULT_TOKEN_TTL_SECONDS);
    expect(DEFAULT_TOKEN_TTL_SECONDS).toBe(30 * 60);
    const verified = tokens.verify(tokens.issue(KEY).token);
    expect(verified.expiresAt - verified.issuedAt).toBe(30 * 60);
  });

  it('gives every token its own jti', () => {
    const tokens = service({ ms: START_MS });
    const ids = Array.from({ length: 200 }, () => tokens.verify(tokens.issue(KEY).token).tokenId);
    expect(new Set(ids).size).toBe(200);
  });

  it('keeps its own copy of a Buffer secret', () => {
    const secret = Buffer.from(SECRET);
    const tokens = new TokenService({ secret, ttlSeconds: TTL, now: () => START_MS });
    const { token } = tokens.issue(KEY);
    secret.fill(0);
    expect(tokens.verify(token).keyId).toBe(KEY.id);
  });
});

describe('TokenService expiry', () => {
  const expSeconds = START_S + TTL;

  // jsonwebtoken treats a token as expired once the clock (whole seconds) reaches exp: exp is the
  // first second at which the token is refused.
  it.each([
    ['one second before exp', (expSeconds - 1) * 1000, 'valid'],
    ['the last millisecond before exp', expSeconds * 1000 - 1, 'valid'],
    ['exactly at exp', expSeconds * 1000, 'expired'],
    ['one second after exp', (expSeconds + 1) * 1000, 'expired'],
    ['a day after exp', (expSeconds + DAY) * 1000, 'expired'],
  ])('%s, the token is %s', (_when, nowMs, expected) => {
    const clock = { ms: START_MS };
    const tokens = service(clock);
    const { token } = tokens.issue(KEY);
    clock.ms = nowMs;
    if (expected === 'valid') expect(tokens.verify(token).keyId).toBe(KEY.id);
    else expectExpired(tokens, token);
  });

  it.each([
    [29, 'valid'],
    [30, 'expired'],
  ])('with 30 s of clock tolerance, %i s after exp the token is %s', (after, expected) => {
    const clock = { ms: START_MS };
    const tokens = service(clock, { clockToleranceSeconds: 30 });
    const { token } = tokens.issue(KEY);
    clock.ms = (expSeconds + after) * 1000;
    if (expected === 'valid') expect(tokens.verify(token).keyId).toBe(KEY.id);
    else expectExpired(tokens, token);
  });

  it('calls an expired token signed with a wrong secret invalid, not expired', () => {
    const tokens = service({ ms: (expSeconds + 60) * 1000 });
    expectInvalid(tokens, sign(claims(), {}, OTHER_SECRET));
  });
});

describe('TokenService refuses hostile and malformed tokens', () => {
  const tokens = service({ ms: START_MS });

  it('accepts the well-formed token these cases are made from (the baseline)', () => {
    expect(tokens.verify(sign(claims())).keyId).toBe(KEY.id);
  });

  type Case = [string, () => string];
  const cases: Case[] = [
    [
      'a wrong secret with exp ten years ahead',
      () => sign(claims(START_S, { exp: START_S + TEN_YEARS }), {}, OTHER_SECRET),
    ],
    ['a wrong secret and a valid lifetime', () => sign(claims(), {}, OTHER_SECRET)],
    ['alg none with an empty signature', () => jwt.sign(claims(), null, { algorithm: 'none' })],
    [
      'alg none with the HS256 signature kept',
      () => {
        const [, payload, signature] = sign(claims()).split('.');
        const header = Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString(
          'base64url',
        );
        return `${header}.${payload}.${signature}`;
      },
    ],
    ['HS384 with the right secret', () => sign(claims(), { algorithm: 'HS384' })],
    ['HS512 with the right secret', () => sign(claims(), { algorithm: 'HS512' })],
    ['no exp', () => sign(claims(START_S, { exp: undefined }))],
    [
      'exp as a string',
      () => sign(JSON.stringify(claims(START_S, { exp: String(START_S + TTL) }))),
    ],
    ['iat as a string', () => sign(JSON.stringify(claims(START_S, { iat: String(START_S) })))],
    ['no iat', () => sign(claims(START_S, { iat: undefined }), { noTimestamp: true })],
    ['a string payload', () => sign('{not json at all}')],
    ['a JSON array payload', () => sign(JSON.stringify([claims()]))],
    ['iat one minute in the future', () => sign(claims(START_S + 60))],
    ['nbf in the future', () => sign(claims(START_S, { nbf: START_S + 60 }))],
    [
      'a lifetime one second longer than the TTL',
      () => sign(claims(START_S, { exp: START_S + TTL + 1 })),
    ],
    ['a lifetime of ten years', () => sign(claims(START_S, { exp: START_S + TEN_YEARS }))],
    ['exp before iat', () => sign(claims(START_S, { iat: START_S + 10, exp: START_S + 5 }))],
    ['another issuer', () => sign(claims(START_S, { iss: 'someone-else' }))],
    ['no issuer', () => sign(claims(START_S, { iss: undefined }))],
    ['an unknown role', () => sign(claims(START_S, { role: 'root' }))],
    ['no sub', () => sign(claims(START_S, { sub: undefined }))],
    ['a numeric sub', () => sign(claims(START_S, { sub: 42 }))],
    ['no acct', () => sign(claims(START_S, { acct: undefined }))],
    ['no jti', () => sign(claims(START_S, { jti: undefined }))],
    [
      'a role only in __proto__',
      () =>
        sign(
          `{"__proto__":{"role":"administrator"},${JSON.stringify(claims(START_S, { role: undefined })).slice(1)}`,
        ),
    ],
    ['typ at+jwt', () => sign(claims(), { header: { alg: 'HS256', typ: 'at+jwt' } })],
    ['typ jwt in lower case', () => sign(claims(), { header: { alg: 'HS256', typ: 'jwt' } })],
    ['an empty string', () => ''],
    ['one segment', () => 'abc'],
    ['two segments', () => sign(claims()).split('.').slice(0, 2).join('.')],
    ['four segments', () => `${sign(claims())}.abc`],
    [
      'a signature with one character changed',
      () => {
        const token = sign(claims());
        return token.slice(0, -2) + (token.at(-2) === 'A' ? 'B' : 'A') + token.slice(-1);
      },
    ],
    [
      'a payload swapped for a higher role',
      () => {
        const [header, , signature] = sign(claims()).split('.');
        const payload = Buffer.from(
          JSON.stringify(claims(START_S, { role: 'administrator' })),
        ).toString('base64url');
        return `${header}.${payload}.${signature}`;
      },
    ],
    ['a header that is not JSON', () => `${Buffer.from('{alg').toString('base64url')}.e30.abc`],
    ['segments of junk', () => 'a.b.c'],
  ];

  it.each(cases)('%s: 401 invalid_token', (_what, token) => {
    expectInvalid(tokens, token());
  });

  it('takes the role from the payload, never from an injected __proto__', () => {
    const token = sign(
      `{"__proto__":{"role":"administrator"},${JSON.stringify(claims(START_S, { role: 'level-1' })).slice(1)}`,
    );
    const verified = tokens.verify(token);
    expect(verified.role).toBe('level-1');
    expect(Object.getPrototypeOf(verified)).toBe(Object.prototype);
    expect(({} as { role?: unknown }).role).toBeUndefined();
  });

  it('accepts a token without typ (the header field is optional)', () => {
    const token = sign(JSON.stringify(claims()));
    expect(jwt.decode(token, { complete: true })?.header.typ).toBeUndefined();
    expect(tokens.verify(token).keyId).toBe(KEY.id);
  });

  it('accepts an iat in the future within the clock tolerance', () => {
    const tolerant = service({ ms: START_MS }, { clockToleranceSeconds: 30 });
    expect(tolerant.verify(sign(claims(START_S + 20))).issuedAt).toBe(START_S + 20);
    expectInvalid(tolerant, sign(claims(START_S + 31)));
  });

  describe(`tokens longer than ${MAX_TOKEN_LENGTH} characters`, () => {
    /** Correctly signed tokens of growing length, the `pad` claim making up the difference. */
    const padded = (length: number): string => sign(claims(START_S, { pad: 'x'.repeat(length) }));
    let longestAccepted = '';
    let shortestRefused = '';
    for (let pad = 0; shortestRefused === ''; pad++) {
      const token = padded(pad);
      if (token.length <= MAX_TOKEN_LENGTH) longestAccepted = token;
      else shortestRefused = token;
    }

    it(`accepts a correctly signed token of up to ${MAX_TOKEN_LENGTH} characters`, () => {
      expect(longestAccepted.length).toBeGreaterThan(MAX_TOKEN_LENGTH - 3);
      expect(tokens.verify(longestAccepted).keyId).toBe(KEY.id);
    });

    it('refuses a correctly signed token one step longer, as invalid_token', () => {
      expect(shortestRefused.length).toBeGreaterThan(MAX_TOKEN_LENGTH);
      expect(jwt.verify(shortestRefused, SECRET, { clockTimestamp: START_S })).toMatchObject({
        sub: KEY.id,
      });
      expectInvalid(tokens, shortestRefused);
    });
  });

  it('never echoes a library message', () => {
    const error = verifyError(tokens, sign(claims(START_S, { iss: 'someone-else' })));
    expect(error.message).toBe('Invalid token');
    expect(error.message).not.toMatch(/jwt|expected|tollgate/i);
  });
});

describe('TokenService options', () => {
  it.each([
    ['a 31-byte secret', { secret: 'x'.repeat(MIN_TOKEN_SECRET_BYTES - 1) }],
    ['a 31-byte Buffer secret', { secret: Buffer.alloc(MIN_TOKEN_SECRET_BYTES - 1, 1) }],
    ['an empty secret', { secret: '' }],
    ['ttl 0', { ttlSeconds: 0 }],
    ['ttl 1.5', { ttlSeconds: 1.5 }],
    ['ttl 86401 (more than a day)', { ttlSeconds: 86_401 }],
    ['ttl -1', { ttlSeconds: -1 }],
    ['ttl NaN', { ttlSeconds: Number.NaN }],
    [
      "clockTolerance '30' (a string, as read from the environment)",
      { clockToleranceSeconds: '30' as never },
    ],
    ['clockTolerance -1', { clockToleranceSeconds: -1 }],
    ['clockTolerance 0.5', { clockToleranceSeconds: 0.5 }],
    ['clockTolerance 301', { clockToleranceSeconds: 301 }],
  ] as [string, Partial<TokenServiceOptions>][])(
    'refuses %s with a ConfigurationError',
    (_what, options) => {
      expect(() => new TokenService({ secret: SECRET, ...options })).toThrow(ConfigurationError);
    },
  );

  it('names the minimum secret size', () => {
    expect(() => new TokenService({ secret: 'short' })).toThrow(
      `at least ${MIN_TOKEN_SECRET_BYTES} bytes`,
    );
  });

  it.each([
    ['a 32-byte secret', { secret: 'x'.repeat(MIN_TOKEN_SECRET_BYTES) }],
    ['a secret of 16 two-byte characters (32 bytes)', { secret: 'é'.repeat(16) }],
    ['ttl 1', { ttlSeconds: 1 }],
    ['ttl 86400', { ttlSeconds: 86_400 }],
    ['clockTolerance 300', { clockToleranceSeconds: 300 }],
  ] as [string, Partial<TokenServiceOptions>][])('accepts %s', (_what, options) => {
    expect(() => new TokenService({ secret: SECRET, ...options })).not.toThrow();
  });
});
