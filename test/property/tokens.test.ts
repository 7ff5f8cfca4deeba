import fc from 'fast-check';
import { AuthenticationError } from '../../lib/errors';
import { ROLES } from '../../lib/model/roles';
import { TokenService } from '../../lib/tokens/tokens';
import { TOKEN_SECRET } from '../helpers/fixtures';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { expectSafeAnswer, expectSafeLogs, signJwt, UNTHROTTLED } from '../security/hostile-cases';

/**
 * Token verification under random input, with a frozen clock: any string is either a token the
 * service minted or an `AuthenticationError` (`invalid_token`, or `expired_token` only for a
 * genuine signature); claims signed with the right secret are accepted exactly when every rule of
 * the wrapper holds; over HTTP no token-like value gives anything but a 401.
 */

const RUNS = 300;
const NOW_MS = Date.UTC(2030, 0, 1, 12, 0, 0);
const NOW = NOW_MS / 1000;
const TTL = 1800;
const service = new TokenService({ secret: TOKEN_SECRET, ttlSeconds: TTL, now: () => NOW_MS });
const KEY = { id: 'key_admin', accountId: 'acct_open', role: 'administrator' } as const;

/** What verify() did: the claims' key id, or the error code. */
function outcome(token: string): string {
  try {
    return `ok:${service.verify(token).keyId}`;
  } catch (error) {
    expect(error).toBeInstanceOf(AuthenticationError);
    return (error as AuthenticationError).code;
  }
}

const base64urlChar = fc.constantFrom(
  ...Array.from('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'),
);

describe('TokenService.verify', () => {
  it('throws only AuthenticationError invalid_token for arbitrary strings', () => {
    const segment = fc.string({ unit: base64urlChar, maxLength: 80 });
    const input = fc.oneof(
      fc.string({ maxLength: 300 }),
      fc.string({ unit: 'binary', maxLength: 300 }),
      fc.array(segment, { minLength: 1, maxLength: 5 }).map((parts) => parts.join('.')),
      fc
        .tuple(fc.json(), fc.json(), segment)
        .map(([header, payload, signature]) =>
          [
            Buffer.from(header).toString('base64url'),
            Buffer.from(payload).toString('base64url'),
            signature,
          ].join('.'),
        ),
    );
    fc.assert(
      fc.property(input, (token) => {
        expect(outcome(token)).toBe('invalid_token');
      }),
      { numRuns: RUNS },
    );
  });

  it('refuses a minted token with any one character changed', () => {
    const token = service.issue(KEY).token;
    fc.assert(
      fc.property(fc.nat({ max: token.length - 1 }), base64urlChar, (index, replacement) => {
        fc.pre(token.charAt(index) !== '.' && token.charAt(index) !== replacement);
        const altered = token.slice(0, index) + replacement + token.slice(index + 1);
        expect(outcome(altered)).toBe('invalid_token');
      }),
      { numRuns: RUNS },
    );
    expect(outcome(token)).toBe('ok:key_admin');
  });

  it('accepts correctly signed claims exactly when every rule holds', () => {
    // Mostly valid values, each sometimes missing or of another type, so both outcomes are common.
    const maybe = <T>(valid: fc.Arbitrary<T>, invalid: fc.Arbitrary<unknown>) =>
      fc.oneof(
        { arbitrary: valid, weight: 18 },
        { arbitrary: invalid, weight: 1 },
        { arbitrary: fc.constant(undefined), weight: 1 },
      );
    const oddTime = fc.oneof(fc.double(), fc.string({ maxLength: 12 }), fc.constant(null));
    const claims = fc
      .record({
        sub: maybe(fc.string({ minLength: 1, maxLength: 20 }), fc.integer()),
        acct: maybe(fc.constant(KEY.accountId), fc.array(fc.string())),
        role: maybe(fc.constantFrom(...ROLES), fc.string()),
        jti: maybe(fc.uuid(), fc.integer()),
        iat: maybe(fc.constant('derived'), oddTime),
        exp: maybe(fc.constant('derived'), oddTime),
        secondsLeft: fc.noBias(fc.integer({ min: -60, max: TTL })),
        lifetime: fc.noBias(fc.integer({ min: -10, max: TTL + 60 })),
        nbf: fc.oneof(
          { arbitrary: fc.constant(undefined), weight: 4 },
          { arbitrary: fc.integer({ min: NOW - TTL, max: NOW + TTL }), weight: 1 },
        ),
        iss: maybe(fc.constant('tollgate'), fc.string()),
      })
      .map(({ secondsLeft, lifetime, iat, exp, ...rest }) => ({
        ...rest,
        exp: exp === 'derived' ? NOW + secondsLeft : exp,
        iat: iat === 'derived' ? NOW + secondsLeft - lifetime : iat,
      }));
    let accepted = 0;
    const header = fc.record({
      alg: fc.constantFrom('HS256', 'HS256', 'HS256', 'HS256', 'HS256', 'HS384', 'none'),
      typ: fc.constantFrom('JWT', 'JWT', 'JWT', 'at+jwt', undefined),
    });
    fc.assert(
      fc.property(claims, header, (payload, { alg, typ }) => {
        const defined = Object.fromEntries(
          Object.entries(payload).filter(([, value]) => value !== undefined),
        );
        const token = signJwt(
          defined,
          TOKEN_SECRET,
          typ === undefined ? { alg, typ: undefined } : { alg, typ },
        );
        const { sub, acct, role, jti, iat, exp, nbf, iss } = payload;
        const integer = (value: unknown): value is number => Number.isSafeInteger(value);
        const shapeOk =
          alg === 'HS256' &&
          (typ === undefined || typ === 'JWT') &&
          iss === 'tollgate' &&
          typeof sub === 'string' &&
          typeof acct === 'string' &&
          typeof jti === 'string' &&
          ROLES.includes(role as never);
        if (!integer(exp) || !integer(iat)) expect(outcome(token)).not.toBe('expired_token');
        const timesOk =
          integer(iat) &&
          integer(exp) &&
          exp > NOW &&
          iat <= NOW &&
          exp - iat > 0 &&
          exp - iat <= TTL &&
          (nbf === undefined || nbf <= NOW);
        const result = outcome(token);
        if (shapeOk && timesOk) accepted++;
        if (shapeOk && timesOk) expect(result).toBe(`ok:${sub}`);
        else expect(result.startsWith('ok:')).toBe(false);
        if (alg !== 'HS256') expect(result).toBe('invalid_token');
      }),
      { numRuns: RUNS },
    );
    expect(accepted).toBeGreaterThan(RUNS / 20);
  });

  it('never reports a forged token as merely expired', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10 * 365 * 86400 }),
        fc.string({ minLength: 1, maxLength: 64 }),
        (ago, secret) => {
          fc.pre(secret !== TOKEN_SECRET);
          const token = signJwt(
            {
              sub: KEY.id,
              acct: KEY.accountId,
              role: KEY.role,
              jti: 'j',
              iss: 'tollgate',
              iat: NOW - ago - TTL,
              exp: NOW - ago,
            },
            secret,
          );
          expect(outcome(token)).toBe('invalid_token');
        },
      ),
      { numRuns: RUNS },
    );
  });
});

describe('token verification over HTTP', () => {
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await startTestGateway(UNTHROTTLED);
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('answers any token-like Bearer value with a 401 and never reaches the upstream', async () => {
    const valid = gateway.tokens.issue(KEY).token;
    const token = fc.oneof(
      fc
        .array(fc.string({ unit: base64urlChar, maxLength: 120 }), { minLength: 3, maxLength: 3 })
        .map((parts) => parts.join('.')),
      fc
        .tuple(fc.nat({ max: valid.length - 1 }), base64urlChar)
        .map(([index, char]) => valid.slice(0, index) + char + valid.slice(index + 1)),
      fc
        .tuple(fc.jsonValue(), fc.string())
        .map(([payload, secret]) => signJwt(payload as object, secret)),
    );
    await fc.assert(
      fc.asyncProperty(token, async (value) => {
        fc.pre(value !== valid);
        const firstLine = gateway.logs.lines.length;
        const result = await gateway.send({
          path: '/api/v1/wallets/',
          headers: { authorization: `Bearer ${value}` },
        });
        expect(result.status).toBe(401);
        expect(['invalid_token', 'invalid_api_key']).toContain(result.body?.code);
        expectSafeAnswer(result, gateway.fixtures, [valid, value]);
        expectSafeLogs(gateway, firstLine, [valid, value]);
      }),
      { numRuns: RUNS },
    );
    expect(gateway.upstream.requests).toHaveLength(0);
  });
});
