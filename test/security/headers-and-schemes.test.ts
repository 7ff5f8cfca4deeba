import { MAX_TOKEN_LENGTH } from '../../lib/tokens/tokens';
import { bearer, describeHostileCases, type HostileCase, UNTHROTTLED } from './hostile-cases';

/** The `Authorization` header: schemes, spacing, sizes, bytes Node refuses, look-alike headers. */

const WALLETS = '/api/v1/wallets/';

/** One character of `key` replaced, keeping its shape. */
function oneCharOff(key: string, index: number): string {
  const char = key.charAt(index);
  return key.slice(0, index) + (char === 'A' ? 'B' : 'A') + key.slice(index + 1);
}

const cases: HostileCase[] = [
  {
    name: 'no Authorization on a secret-key route: 401 missing_credentials',
    request: () => ({ path: WALLETS }),
    status: 401,
    code: 'missing_credentials',
    message: 'Authentication required',
    upstream: false,
    then: (result) => {
      expect(result.headers['www-authenticate']).toBe('Bearer');
    },
  },
  {
    name: '"Bearer" with nothing after it: 401',
    request: () => ({ path: WALLETS, headers: { authorization: 'Bearer' } }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: '"Bearer " with a trailing space only (raw): 401',
    request: () => ({ raw: { target: WALLETS, headers: [['Authorization', 'Bearer ']] } }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'an empty Authorization header (raw): 401',
    request: () => ({ raw: { target: WALLETS, headers: [['Authorization', '']] } }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'lower-case "bearer" with a valid secret key is accepted',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { authorization: `bearer ${keys.admin.secretKey}` },
    }),
    status: 200,
    code: null,
    upstream: true,
  },
  {
    name: 'upper-case "BEARER" with a valid secret key is accepted',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { authorization: `BEARER ${keys.admin.secretKey}` },
    }),
    status: 200,
    code: null,
    upstream: true,
  },
  {
    name: 'mixed-case "bEaReR" with a valid token is accepted',
    request: (ctx) => ({ path: WALLETS, headers: { authorization: `bEaReR ${ctx.token()}` } }),
    status: 200,
    code: null,
    upstream: true,
  },
  {
    name: 'white space after the value is trimmed by HTTP, so the key is accepted (raw)',
    request: ({ keys }) => ({
      raw: { target: WALLETS, headers: [['Authorization', `Bearer ${keys.admin.secretKey}   `]] },
    }),
    status: 200,
    code: null,
    upstream: true,
  },
  {
    name: 'a tab instead of the space after Bearer: 401',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { authorization: `Bearer\t${keys.admin.secretKey}` },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'Basic with the key pair base64-encoded: 401',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: {
        authorization: `Basic ${Buffer.from(`${keys.admin.publishableKey}:${keys.admin.secretKey}`).toString('base64')}`,
      },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: '"Token <secret>": 401',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { authorization: `Token ${keys.admin.secretKey}` },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a bare secret key with no scheme: 401',
    request: ({ keys }) => ({ path: WALLETS, headers: { authorization: keys.admin.secretKey } }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a valid key followed by a second word: 401',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { authorization: `Bearer ${keys.admin.secretKey} extra` },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'two credentials joined with a comma in one header: 401',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { authorization: `Bearer ${keys.level1.secretKey}, Bearer ${keys.admin.secretKey}` },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'the key in double quotes: 401',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { authorization: `Bearer "${keys.admin.secretKey}"` },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'an Authorization value just over the length cap: 401 before any lookup',
    request: () => ({ path: WALLETS, headers: bearer('a'.repeat(MAX_TOKEN_LENGTH)) }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a 10 KB Authorization value (raw): 401 from the length cap',
    request: () => ({
      raw: { target: WALLETS, headers: [['Authorization', `Bearer ${'k'.repeat(10 * 1024)}`]] },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a 20 KB Authorization value (raw): 431 headers_too_large with the JSON error body',
    request: () => ({
      raw: { target: WALLETS, headers: [['Authorization', `Bearer ${'k'.repeat(20 * 1024)}`]] },
    }),
    status: 431,
    code: 'headers_too_large',
    upstream: false,
  },
  {
    name: 'two Authorization headers carrying the same valid key (raw): 400',
    request: ({ keys }) => ({
      raw: {
        target: WALLETS,
        headers: [
          ['Authorization', `Bearer ${keys.admin.secretKey}`],
          ['Authorization', `Bearer ${keys.admin.secretKey}`],
        ],
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'a valid Authorization header followed by a forged one (raw): 400',
    request: ({ keys }) => ({
      raw: {
        target: WALLETS,
        headers: [
          ['Authorization', `Bearer ${keys.level1.secretKey}`],
          ['authorization', 'Bearer forged-admin-key-0123456789'],
        ],
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'a NUL byte inside the Authorization value (raw): 400 with the JSON error body',
    request: ({ keys }) => ({
      raw: { target: WALLETS, headers: [['Authorization', `Bearer ${keys.admin.secretKey}\0`]] },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'a bare CR used to inject a header (raw): 400 with the JSON error body',
    request: ({ keys }) => ({
      raw: {
        target: WALLETS,
        headers: [
          ['Authorization', `Bearer ${keys.level1.secretKey}\rX-Gateway-Role: administrator`],
        ],
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'an obs-fold continuation line splitting the value (raw): 400 with the JSON error body',
    request: ({ keys }) => ({
      raw: { target: WALLETS, headers: [['Authorization', `Bearer\r\n ${keys.admin.secretKey}`]] },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'lines ending in a bare LF (raw): 400 with the JSON error body',
    request: ({ keys }) => ({
      raw: {
        target: WALLETS,
        headers: [['Authorization', `Bearer ${keys.admin.secretKey}`]],
        eol: '\n',
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'a space before the colon of the header name (raw): 400 with the JSON error body',
    request: ({ keys }) => ({
      raw: { target: WALLETS, headers: [['Authorization ', `Bearer ${keys.admin.secretKey}`]] },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'a valid key with a Latin-1 byte appended (raw): 401',
    request: ({ keys }) => ({
      raw: {
        target: WALLETS,
        headers: [['Authorization', `Bearer ${keys.admin.secretKey}\u00e9`]],
      },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a key whose "s" is a Cyrillic look-alike sent as UTF-8 bytes (raw): 401',
    request: ({ keys }) => ({
      raw: {
        target: WALLETS,
        headers: [
          [
            'Authorization',
            Buffer.from(`Bearer \u0455${keys.admin.secretKey.slice(1)}`, 'utf8').toString('latin1'),
          ],
        ],
      },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a typed key with one character changed fails its checksum: 401',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: bearer(oneCharOff(keys.admin.secretKey, 12)),
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a typed key with its prefix upper-cased: 401',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: bearer(keys.admin.secretKey.replace('sk_test_', 'SK_TEST_')),
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a typed key missing its last character: 401',
    request: ({ keys }) => ({ path: WALLETS, headers: bearer(keys.admin.secretKey.slice(0, -1)) }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a key of another tool with one character changed: 401',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: bearer(oneCharOff(keys.foreign.secretKey, 3)),
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'Proxy-Authorization is never read as a credential: 401 missing_credentials',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { 'proxy-authorization': `Bearer ${keys.admin.secretKey}` },
    }),
    status: 401,
    code: 'missing_credentials',
    upstream: false,
  },
  {
    name: 'a token in a cookie is never read: 401 missing_credentials',
    request: (ctx) => ({
      path: WALLETS,
      headers: { cookie: `token=${ctx.token()}; access_token=${ctx.token()}` },
    }),
    status: 401,
    code: 'missing_credentials',
    upstream: false,
  },
  {
    name: 'X-Api-Key with a secret key is never read: 401 missing_credentials',
    request: ({ keys }) => ({ path: WALLETS, headers: { 'x-api-key': keys.admin.secretKey } }),
    status: 401,
    code: 'missing_credentials',
    upstream: false,
  },
  {
    name: 'Connection naming the gateway identity headers cannot strip them from the upstream request',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: {
        ...bearer(keys.level1.secretKey),
        connection: 'keep-alive, x-gateway-role, x-gateway-key-id, x-request-id',
      },
    }),
    status: 200,
    code: null,
    upstream: true,
    then: (_result, ctx) => {
      const forwarded = ctx.gateway.upstream.requests.at(-1);
      expect(forwarded?.headers['x-gateway-role']).toBe('level-1');
      expect(forwarded?.headers['x-gateway-key-id']).toBe('key_l1');
      expect(forwarded?.headers['x-request-id']).toEqual(expect.any(String));
    },
  },
  {
    name: 'an Upgrade: websocket request is answered as plain HTTP and the upgrade never goes upstream (raw)',
    request: ({ keys }) => ({
      raw: {
        target: WALLETS,
        headers: [
          ['Authorization', `Bearer ${keys.admin.secretKey}`],
          ['Upgrade', 'websocket'],
          ['Sec-WebSocket-Version', '13'],
          ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
        ],
      },
    }),
    status: 200,
    code: null,
    upstream: true,
    then: (_result, ctx) => {
      expect(ctx.gateway.upstream.requests.at(-1)?.headers.upgrade).toBeUndefined();
    },
  },
  {
    name: 'an unknown Expect value (raw): Node answers 417',
    request: ({ keys }) => ({
      raw: {
        method: 'POST',
        target: '/api/v1/payouts/',
        headers: [
          ['Authorization', `Bearer ${keys.admin.secretKey}`],
          ['Expect', 'x-launch-missiles'],
        ],
      },
    }),
    status: 417,
    code: null,
    upstream: false,
  },
  {
    name: 'a negative Content-Length (raw): 400 with the JSON error body',
    request: ({ keys }) => ({
      raw: {
        method: 'POST',
        target: '/api/v1/payouts/',
        headers: [
          ['Authorization', `Bearer ${keys.admin.secretKey}`],
          ['Content-Length', '-1'],
        ],
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
];

describeHostileCases('hostile headers and schemes', cases, UNTHROTTLED);
