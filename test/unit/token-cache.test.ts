import jwt from 'jsonwebtoken';
import { createGate, type Decision } from '../../lib/core/gate';
import type { RequestFacts } from '../../lib/core/facts';
import type { Role } from '../../lib/model/roles';
import { generateKey } from '../../lib/model/key-format';
import { KeyRing, type KeyRecord, type KeyStore, sha256 } from '../../lib/keys/key-store';
import { DEFAULT_VERIFIED_TOKEN_CACHE_SIZE, TokenService } from '../../lib/tokens/tokens';

/**
 * The verified-token cache: a token presented again skips the signature check, and is
 * still refused at its `exp`, once its key is revoked or removed, and takes a role change at once,
 * because expiry is checked against the service's clock and the key is looked up on every request.
 */

const TOKEN_SECRET = 'token-cache-test-secret-of-at-least-32-bytes';
const TTL = 600;
const START_MS = 1_750_000_000_250;

interface KeySpec {
  role: Role;
  revoked?: boolean;
  ipWhitelist?: string[];
}

/** A key store swapped whole, as `FileKeyStore.reload()` does. */
class SwappableStore implements KeyStore {
  constructor(public ring: KeyRing) {}
  findBySecretKey(secretKey: string): KeyRecord | undefined {
    return this.ring.findBySecretKey(secretKey);
  }
  findByKeyPair(publishableKey: string, secretKey: string): KeyRecord | undefined {
    return this.ring.findByKeyPair(publishableKey, secretKey);
  }
  findByPublishableKey(publishableKey: string): KeyRecord | undefined {
    return this.ring.findByPublishableKey(publishableKey);
  }
  findById(keyId: string): KeyRecord | undefined {
    return this.ring.findById(keyId);
  }
}

const PUBLISHABLE = generateKey('publishable', 'test');
const SECRET = generateKey('secret', 'test');
const OTHER_PUBLISHABLE = generateKey('publishable', 'test');
const OTHER_SECRET = generateKey('secret', 'test');

/** A ring holding `key_cached` of `acct_cached` as `spec` says, or only another key. */
function ring(spec: KeySpec | undefined): KeyRing {
  return KeyRing.fromDocument({
    accounts: [
      {
        id: 'acct_cached',
        ...(spec?.ipWhitelist === undefined ? {} : { ipWhitelist: spec.ipWhitelist }),
        keys: [
          spec === undefined
            ? {
                id: 'key_other',
                publishableKey: OTHER_PUBLISHABLE,
                secretKeySha256: sha256(OTHER_SECRET).toString('hex'),
                role: 'level-2',
              }
            : {
                id: 'key_cached',
                publishableKey: PUBLISHABLE,
                secretKeySha256: sha256(SECRET).toString('hex'),
                role: spec.role,
                ...(spec.revoked === true ? { revoked: true } : {}),
              },
        ],
      },
    ],
  });
}

function setup(spec: KeySpec, options: { cacheSize?: number } = {}) {
  const clock = { ms: START_MS };
  const tokens = new TokenService({
    secret: TOKEN_SECRET,
    ttlSeconds: TTL,
    now: () => clock.ms,
    ...(options.cacheSize === undefined ? {} : { verifiedTokenCacheSize: options.cacheSize }),
  });
  const store = new SwappableStore(ring(spec));
  const gate = createGate({
    keyStore: store,
    tokens,
    scopes: { api: { limit: 1_000_000 } },
    authFailureLimit: 1_000_000,
  });
  const anyRole = gate.policy({ accept: ['token'], limit: 'api' });
  const level3 = gate.policy({ accept: ['token'], limit: 'api', role: 'level-3' });
  const issue = () =>
    tokens.issue({ id: 'key_cached', accountId: 'acct_cached', role: spec.role }).token;
  return { clock, tokens, store, gate, anyRole, level3, issue };
}

let gates: { close(): void }[] = [];
afterEach(() => {
  for (const gate of gates) gate.close();
  gates = [];
  jest.restoreAllMocks();
});

function facts(token: string, clientIp = '203.0.113.9'): RequestFacts {
  return {
    method: 'GET',
    path: '/orders',
    originalUrl: '/orders',
    headersDistinct: { authorization: [`Bearer ${token}`] },
    clientIp,
  };
}

/** `allowed` with the role the gate saw, or the refusal's status and code. */
function outcome(decision: Decision): string {
  return decision.allowed
    ? `allowed ${decision.auth.role}`
    : `${decision.error.status} ${decision.error.code}`;
}

function prepared(spec: KeySpec, options: { cacheSize?: number } = {}) {
  const context = setup(spec, options);
  gates.push(context.gate);
  return context;
}

describe('verified-token cache', () => {
  it('verifies the signature once for repeated presentations of the same token', async () => {
    const { gate, anyRole, tokens, issue } = prepared({ role: 'level-2' });
    const token = issue();
    const verify = jest.spyOn(jwt, 'verify');
    for (let n = 0; n < 5; n++) {
      expect(outcome(await gate.decide(facts(token), anyRole))).toBe('allowed level-2');
    }
    expect(verify).toHaveBeenCalledTimes(1);
    expect(tokens.cachedTokenCount()).toBe(1);
  });

  it('refuses a cached token at its exp as expired_token, exactly as an uncached one', async () => {
    const { gate, anyRole, clock, issue } = prepared({ role: 'level-2' });
    const uncached = prepared({ role: 'level-2' }, { cacheSize: 0 });
    const token = issue();
    const expSeconds = Math.floor(START_MS / 1000) + TTL;
    expect(outcome(await gate.decide(facts(token), anyRole))).toBe('allowed level-2');
    for (const [ms, expected] of [
      [expSeconds * 1000 - 1, 'allowed level-2'],
      [expSeconds * 1000, '401 expired_token'],
      [(expSeconds + 3600) * 1000, '401 expired_token'],
    ] as const) {
      clock.ms = ms;
      uncached.clock.ms = ms;
      expect(outcome(await gate.decide(facts(token), anyRole))).toBe(expected);
      expect(outcome(await gate.decide(facts(token), anyRole))).toBe(expected);
      expect(outcome(await uncached.gate.decide(facts(token), uncached.anyRole))).toBe(expected);
    }
  });

  it('refuses a cached token once its key is revoked, and once its key is gone', async () => {
    const { gate, anyRole, store, issue } = prepared({ role: 'level-2' });
    const token = issue();
    expect(outcome(await gate.decide(facts(token), anyRole))).toBe('allowed level-2');
    store.ring = ring({ role: 'level-2', revoked: true });
    expect(outcome(await gate.decide(facts(token), anyRole))).toBe('401 invalid_token');
    store.ring = ring(undefined);
    expect(outcome(await gate.decide(facts(token), anyRole))).toBe('401 invalid_token');
    // The same key back, unrevoked: the token (still within its exp) is good again.
    store.ring = ring({ role: 'level-2' });
    expect(outcome(await gate.decide(facts(token), anyRole))).toBe('allowed level-2');
  });

  it("takes a role change of the token's key at once", async () => {
    const { gate, anyRole, level3, store, issue } = prepared({ role: 'level-2' });
    const token = issue();
    expect(outcome(await gate.decide(facts(token), level3))).toBe('403 insufficient_role');
    store.ring = ring({ role: 'level-3' });
    expect(outcome(await gate.decide(facts(token), level3))).toBe('allowed level-3');
    expect(outcome(await gate.decide(facts(token), anyRole))).toBe('allowed level-3');
    store.ring = ring({ role: 'level-1' });
    expect(outcome(await gate.decide(facts(token), level3))).toBe('403 insufficient_role');
    expect(outcome(await gate.decide(facts(token), anyRole))).toBe('allowed level-1');
  });

  it('applies a reloaded account whitelist to a cached token at once', async () => {
    const { gate, anyRole, store, issue } = prepared({
      role: 'level-2',
      ipWhitelist: ['203.0.113.0/24'],
    });
    const token = issue();
    expect(outcome(await gate.decide(facts(token, '203.0.113.9'), anyRole))).toBe(
      'allowed level-2',
    );
    store.ring = ring({ role: 'level-2', ipWhitelist: ['198.51.100.0/24'] });
    expect(outcome(await gate.decide(facts(token, '203.0.113.9'), anyRole))).toBe(
      '403 ip_not_whitelisted',
    );
    expect(outcome(await gate.decide(facts(token, '198.51.100.7'), anyRole))).toBe(
      'allowed level-2',
    );
  });

  it('never lets another token text hit: tampered, re-signed or extended tokens are checked in full', async () => {
    const { gate, anyRole, tokens, issue } = prepared({ role: 'level-2' });
    const token = issue();
    expect(outcome(await gate.decide(facts(token), anyRole))).toBe('allowed level-2');
    const [header = '', payload = '', signature = ''] = token.split('.');
    const decoded = jwt.decode(token) as jwt.JwtPayload;
    const tampered = [
      // The signature's last character changed (both values decode to other bits).
      `${header}.${payload}.${signature.slice(0, -1)}${signature.endsWith('A') ? 'Q' : 'A'}`,
      // The same payload under another secret.
      jwt.sign(decoded, 'another-secret-that-is-also-32-bytes-long!!', { algorithm: 'HS256' }),
      // The same claims with a role raised, under another secret.
      jwt.sign({ ...decoded, role: 'administrator' }, 'x'.repeat(40), { algorithm: 'HS256' }),
      // The right secret, but a JOSE header with a `kid`, which no token minted here carries.
      jwt.sign(decoded, TOKEN_SECRET, { algorithm: 'HS256', keyid: 'key_cached' }),
      // The right secret and HS512.
      jwt.sign(decoded, TOKEN_SECRET, { algorithm: 'HS512' }),
    ];
    for (const other of tampered) {
      expect(other).not.toBe(token);
      for (let presentation = 0; presentation < 3; presentation++) {
        expect(outcome(await gate.decide(facts(other), anyRole))).toBe('401 invalid_token');
      }
    }
    // Failures are never remembered.
    expect(tokens.cachedTokenCount()).toBe(1);
    expect(outcome(await gate.decide(facts(token), anyRole))).toBe('allowed level-2');
  });

  it.each([
    ['a kid', { alg: 'HS256', typ: 'JWT', kid: 'key_cached' }],
    ['crit', { alg: 'HS256', typ: 'JWT', crit: ['exp'] }],
    ['a typ other than JWT', { alg: 'HS256', typ: 'at+jwt' }],
  ])(
    'refuses a correctly signed token whose JOSE header has %s on every presentation (14.8)',
    async (_what, joseHeader) => {
      const { gate, anyRole, tokens, clock } = prepared({ role: 'level-2' });
      const iat = Math.floor(clock.ms / 1000);
      const token = jwt.sign(
        {
          sub: 'key_cached',
          acct: 'acct_cached',
          role: 'level-2',
          jti: 'f3b1c2d4-0000-4000-8000-000000000000',
          iat,
          exp: iat + TTL,
          iss: 'tollgate',
        },
        TOKEN_SECRET,
        { algorithm: 'HS256', header: joseHeader },
      );
      for (let presentation = 0; presentation < 3; presentation++) {
        expect(outcome(await gate.decide(facts(token), anyRole))).toBe('401 invalid_token');
      }
      expect(tokens.cachedTokenCount()).toBe(0);
    },
  );

  it('stays bounded after many distinct tokens, and an evicted token is verified again', () => {
    const { tokens, issue } = prepared({ role: 'level-2' }, { cacheSize: 50 });
    const first = issue();
    expect(tokens.verify(first).keyId).toBe('key_cached');
    for (let n = 0; n < 500; n++) {
      tokens.verify(issue());
      expect(tokens.cachedTokenCount()).toBeLessThanOrEqual(50);
    }
    expect(tokens.cachedTokenCount()).toBe(50);
    const verify = jest.spyOn(jwt, 'verify');
    expect(tokens.verify(first).keyId).toBe('key_cached');
    expect(verify).toHaveBeenCalledTimes(1);
  });

  it(`holds at most ${DEFAULT_VERIFIED_TOKEN_CACHE_SIZE} tokens by default`, () => {
    const { tokens, issue } = prepared({ role: 'level-2' });
    for (let n = 0; n < DEFAULT_VERIFIED_TOKEN_CACHE_SIZE + 100; n++) tokens.verify(issue());
    expect(tokens.cachedTokenCount()).toBe(DEFAULT_VERIFIED_TOKEN_CACHE_SIZE);
  });

  it('checks iat and nbf again on a hit when the clock goes back', () => {
    const { tokens, clock } = prepared({ role: 'level-2' });
    const iat = Math.floor(clock.ms / 1000);
    const token = jwt.sign(
      {
        sub: 'key_cached',
        acct: 'acct_cached',
        role: 'level-2',
        jti: 'f3b1c2d4-0000-4000-8000-000000000001',
        iat,
        nbf: iat,
        exp: iat + TTL,
        iss: 'tollgate',
      },
      TOKEN_SECRET,
      { algorithm: 'HS256' },
    );
    const uncached = new TokenService({
      secret: TOKEN_SECRET,
      ttlSeconds: TTL,
      now: () => clock.ms,
      verifiedTokenCacheSize: 0,
    });
    const answer = (service: TokenService): string => {
      try {
        return `valid ${service.verify(token).keyId}`;
      } catch (error) {
        return (error as { code: string }).code;
      }
    };
    expect(answer(tokens)).toBe('valid key_cached');
    clock.ms = START_MS - 5000;
    expect(answer(tokens)).toBe('invalid_token');
    expect(answer(tokens)).toBe(answer(uncached));
    clock.ms = START_MS;
    expect(answer(tokens)).toBe('valid key_cached');
  });

  it.each([-1, 1.5, 1_000_001, Number.NaN, '10' as never])(
    'refuses verifiedTokenCacheSize %p',
    (size) => {
      expect(
        () => new TokenService({ secret: TOKEN_SECRET, verifiedTokenCacheSize: size }),
      ).toThrow('verifiedTokenCacheSize must be a whole number from 0 to 1000000');
    },
  );
});
