import jwt from 'jsonwebtoken';
import { MAX_TOKEN_LENGTH } from '../../lib/tokens/tokens';
import { bearer, describeHostileCases, type HostileCase, UNTHROTTLED } from './hostile-cases';

/**
 * Bearer tokens: what jsonwebtoken leaves open (no `exp`, string payloads, `typ`, future `iat`,
 * other algorithms), forged headers (`kid`, `jku`, `x5u`, `jwk`), tampering, revoked and foreign
 * keys, and role claims that must never outrank the key record.
 */

const WALLETS = '/api/v1/wallets/';
const APPROVE = '/api/v1/payouts/po_1/approve/';
const WRONG_SECRET = 'another-gateway-secret-0123456789-abcdefghij';
const TEN_YEARS = 10 * 365 * 24 * 3600;

const now = (): number => Math.floor(Date.now() / 1000);

/** Swaps the payload of `token` for `payload`, keeping its header and signature. */
function withPayload(token: string, payload: object): string {
  const [header = '', , signature = ''] = token.split('.');
  return `${header}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.${signature}`;
}

const invalid = {
  status: 401,
  code: 'invalid_token',
  message: 'Invalid token',
  upstream: false,
} as const;

const cases: HostileCase[] = [
  {
    name: 'a token minted by the gateway is accepted',
    request: (ctx) => ({ path: WALLETS, headers: bearer(ctx.token()) }),
    status: 200,
    code: null,
    upstream: true,
    then: (_result, ctx) => {
      expect(ctx.gateway.upstream.requests.at(-1)?.headers['x-gateway-credential']).toBe('token');
    },
  },
  {
    name: 'alg "none" with an empty signature: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign(ctx.claims(), { header: { alg: 'none' } })),
    }),
    ...invalid,
  },
  {
    name: 'alg "None" signed with the right secret: 401 invalid_token',
    request: (ctx) => {
      const token = ctx.sign(ctx.claims());
      return {
        path: WALLETS,
        headers: bearer(
          token.replace(/^[^.]+/, Buffer.from('{"alg":"None","typ":"JWT"}').toString('base64url')),
        ),
      };
    },
    ...invalid,
  },
  {
    name: 'HS384 signed with the right secret: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign(ctx.claims(), { header: { alg: 'HS384' } })),
    }),
    ...invalid,
  },
  {
    name: 'HS512 signed with the right secret: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign(ctx.claims(), { header: { alg: 'HS512' } })),
    }),
    ...invalid,
  },
  {
    name: 'a wrong secret with exp ten years ahead: invalid_token, not expired_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(
        ctx.sign({ ...ctx.claims(), exp: now() + TEN_YEARS }, { secret: WRONG_SECRET }),
      ),
    }),
    ...invalid,
  },
  {
    name: 'a wrong secret with exp in the past: invalid_token, not expired_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(
        ctx.sign(
          { ...ctx.claims(), iat: now() - 3600, exp: now() - 1800 },
          { secret: WRONG_SECRET },
        ),
      ),
    }),
    ...invalid,
  },
  {
    name: 'signed with an empty-string secret: 401 invalid_token',
    request: (ctx) => ({ path: WALLETS, headers: bearer(ctx.sign(ctx.claims(), { secret: '' })) }),
    ...invalid,
  },
  {
    name: 'the right signature and exp in the past: 401 "Expired token"',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), iat: now() - 3600, exp: now() - 1800 })),
    }),
    status: 401,
    code: 'expired_token',
    message: 'Expired token',
    upstream: false,
  },
  {
    name: 'the right signature, exp in the past and a wrong issuer: invalid_token, not expired_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(
        ctx.sign({ ...ctx.claims(), iss: 'someone-else', iat: now() - 3600, exp: now() - 1800 }),
      ),
    }),
    ...invalid,
  },
  {
    name: 'the right signature, exp in the past and iat written as a string: invalid_token, not expired_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), iat: String(now() - 3600), exp: now() - 1800 })),
    }),
    ...invalid,
  },
  {
    name: 'the right signature and no exp: 401 invalid_token',
    request: (ctx) => {
      const { exp: _exp, ...claims } = ctx.claims();
      return { path: WALLETS, headers: bearer(ctx.sign(claims)) };
    },
    ...invalid,
  },
  {
    name: 'the right signature and nbf in the future: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), nbf: now() + 600 })),
    }),
    ...invalid,
  },
  {
    name: 'the right signature and iat in the future: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), iat: now() + 600, exp: now() + 900 })),
    }),
    ...invalid,
  },
  {
    name: 'the right signature and a lifetime longer than the TTL: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), exp: now() + TEN_YEARS })),
    }),
    ...invalid,
  },
  {
    name: 'the right signature over a string payload: 401 invalid_token',
    request: (ctx) => ({ path: WALLETS, headers: bearer(ctx.sign('key_admin')) }),
    ...invalid,
  },
  {
    name: 'the right signature and typ "at+jwt": 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign(ctx.claims(), { header: { typ: 'at+jwt' } })),
    }),
    ...invalid,
  },
  {
    name: 'the right signature and another issuer: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), iss: 'someone-else' })),
    }),
    ...invalid,
  },
  {
    name: 'the right signature and no issuer: 401 invalid_token',
    request: (ctx) => {
      const { iss: _iss, ...claims } = ctx.claims();
      return { path: WALLETS, headers: bearer(ctx.sign(claims)) };
    },
    ...invalid,
  },
  {
    name: 'exp written as a string: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), exp: String(now() + 600) })),
    }),
    ...invalid,
  },
  {
    name: 'exp written as a fraction: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), exp: now() + 600.5 })),
    }),
    ...invalid,
  },
  {
    name: 'sub written as a number: 401 invalid_token',
    request: (ctx) => ({ path: WALLETS, headers: bearer(ctx.sign({ ...ctx.claims(), sub: 42 })) }),
    ...invalid,
  },
  {
    name: 'a kid header pointing at a file, signed with a wrong key: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(
        ctx.sign(ctx.claims(), { secret: '', header: { kid: '../../../../dev/null' } }),
      ),
    }),
    ...invalid,
  },
  {
    name: 'a jku header naming an attacker key set, RS256: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(
        ctx.sign(ctx.claims(), { header: { alg: 'RS256', jku: 'http://127.0.0.1:1/jwks.json' } }),
      ),
    }),
    ...invalid,
  },
  {
    name: 'an x5u header, signed with a wrong secret: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(
        ctx.sign(ctx.claims(), {
          secret: WRONG_SECRET,
          header: { x5u: 'http://127.0.0.1:1/cert.pem' },
        }),
      ),
    }),
    ...invalid,
  },
  {
    name: 'an embedded jwk header with the key that signed it: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(
        ctx.sign(ctx.claims(), {
          secret: WRONG_SECRET,
          header: { jwk: { kty: 'oct', k: Buffer.from(WRONG_SECRET).toString('base64url') } },
        }),
      ),
    }),
    ...invalid,
  },
  {
    name: 'a header that is not JSON: 401 invalid_token',
    request: (ctx) => {
      const [, payload = '', signature = ''] = ctx.token().split('.');
      return { path: WALLETS, headers: bearer(`bm90LWpzb24.${payload}.${signature}`) };
    },
    ...invalid,
  },
  {
    name: 'a header that is JSON null: 401 invalid_token',
    request: (ctx) => {
      const [, payload = '', signature = ''] = ctx.token().split('.');
      return {
        path: WALLETS,
        headers: bearer(`${Buffer.from('null').toString('base64url')}.${payload}.${signature}`),
      };
    },
    ...invalid,
  },
  {
    name: 'the signature removed: 401 invalid_token',
    request: (ctx) => ({ path: WALLETS, headers: bearer(ctx.token().replace(/[^.]+$/, '')) }),
    ...invalid,
  },
  {
    name: 'a level-1 token with its payload changed to administrator: 401 invalid_token',
    request: (ctx) => ({
      method: 'POST',
      path: APPROVE,
      headers: bearer(
        withPayload(ctx.token(ctx.keys.level1), {
          ...ctx.claims(ctx.keys.level1),
          role: 'administrator',
        }),
      ),
    }),
    ...invalid,
  },
  {
    name: 'a role claim of administrator signed with a wrong key: 401 invalid_token',
    request: (ctx) => ({
      method: 'POST',
      path: APPROVE,
      headers: bearer(
        ctx.sign(
          { ...ctx.claims(ctx.keys.level1), role: 'administrator' },
          { secret: WRONG_SECRET },
        ),
      ),
    }),
    ...invalid,
  },
  {
    name: 'a correctly signed administrator claim for a level-1 key: the key record decides, 403',
    request: (ctx) => ({
      method: 'POST',
      path: APPROVE,
      headers: bearer(ctx.sign({ ...ctx.claims(ctx.keys.level1), role: 'administrator' })),
    }),
    status: 403,
    code: 'insufficient_role',
    upstream: false,
  },
  {
    name: 'a correctly signed payload with the role under __proto__: 401 invalid_token',
    request: (ctx) => {
      const { role: _role, ...claims } = ctx.claims(ctx.keys.level1);
      const payload = `{"__proto__":{"role":"administrator"},${JSON.stringify(claims).slice(1)}`;
      return { method: 'POST', path: APPROVE, headers: bearer(ctx.sign(payload)) };
    },
    ...invalid,
  },
  {
    name: "a revoked key's token: 401 invalid_token",
    request: (ctx) => ({ path: WALLETS, headers: bearer(ctx.token(ctx.keys.revoked)) }),
    ...invalid,
  },
  {
    name: 'a correctly signed token for a key id that does not exist: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), sub: 'key_ghost' })),
    }),
    ...invalid,
  },
  {
    name: "a correctly signed token naming another account than the key's: 401 invalid_token",
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), acct: 'acct_walled' })),
    }),
    ...invalid,
  },
  {
    name: 'a token minted by jsonwebtoken with another secret: 401 invalid_token',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.secret(jwt.sign(ctx.claims(), WRONG_SECRET, { algorithm: 'HS256' }))),
    }),
    ...invalid,
  },
  {
    name: 'a valid token with a fourth segment is not a token: 401 invalid_api_key',
    request: (ctx) => ({ path: WALLETS, headers: bearer(`${ctx.token()}.eyJ4IjoxfQ`) }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a valid token with base64 padding on its signature: 401 invalid_api_key',
    request: (ctx) => ({ path: WALLETS, headers: bearer(`${ctx.token()}=`) }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a token longer than the length cap: 401 before verification',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.sign({ ...ctx.claims(), pad: 'x'.repeat(MAX_TOKEN_LENGTH) })),
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: "a whitelisted account's token from outside its whitelist: 403",
    request: (ctx) => ({ path: WALLETS, headers: bearer(ctx.token(ctx.keys.walled)) }),
    status: 403,
    code: 'ip_not_whitelisted',
    message: 'Access denied: IP not whitelisted.',
    upstream: false,
  },
  {
    name: "a whitelisted account's token from a whitelisted address is accepted",
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.token(ctx.keys.walled)),
      from: '127.0.0.2',
    }),
    status: 200,
    code: null,
    upstream: true,
  },
];

describeHostileCases('hostile tokens', cases, UNTHROTTLED);
