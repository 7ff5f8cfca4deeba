import { bearer, describeHostileCases, type HostileCase, UNTHROTTLED } from './hostile-cases';

/**
 * Request targets and methods: case variants, doubled slashes, dot segments and their encodings,
 * path parameters that try to escape, absolute-form targets, unknown and overridden methods.
 * Nothing here may reach a protected handler without authentication, or reach the upstream at a
 * path other than the one that was authorised.
 */

const WALLETS = '/api/v1/wallets/';

const notFound = { status: 404, code: 'not_found', upstream: false } as const;
const notAllowed = { status: 405, code: 'method_not_allowed', upstream: false } as const;
const proxied = { status: 200, code: null, upstream: true } as const;

/** Asserts the upstream received exactly `path` (origin-form). */
const upstreamPath =
  (path: string): HostileCase['then'] =>
  (_result, ctx) => {
    expect(ctx.gateway.upstream.requests.at(-1)?.url).toBe(path);
  };

const cases: HostileCase[] = [
  {
    name: '/API/V1/WALLETS/ without credentials: 404, never a protected handler',
    request: () => ({ path: '/API/V1/WALLETS/' }),
    ...notFound,
  },
  {
    name: '/API/V1/WALLETS/ with a valid key still does not reach the upstream: 404',
    request: ({ keys }) => ({ path: '/API/V1/WALLETS/', headers: bearer(keys.admin.secretKey) }),
    ...notFound,
  },
  {
    name: '/Api/v1/Wallets/: 404',
    request: ({ keys }) => ({ path: '/Api/v1/Wallets/', headers: bearer(keys.admin.secretKey) }),
    ...notFound,
  },
  {
    name: '//api/v1/wallets/ (raw): 404',
    request: ({ keys }) => ({
      raw: {
        target: '//api/v1/wallets/',
        headers: [['Authorization', `Bearer ${keys.admin.secretKey}`]],
      },
    }),
    ...notFound,
  },
  {
    name: '/api/v1/wallets/..%2f (raw): 404',
    request: () => ({ raw: { target: '/api/v1/wallets/..%2f' } }),
    ...notFound,
  },
  {
    name: '/api/v1/transactions/../payouts/ is not normalised into another route (raw): 404',
    request: ({ keys }) => ({
      raw: {
        method: 'POST',
        target: '/api/v1/transactions/../payouts/',
        headers: [['Authorization', `Bearer ${keys.level1.secretKey}`]],
      },
    }),
    ...notFound,
  },
  {
    name: 'an encoded ".." as the transaction id: 404',
    request: ({ keys }) => ({
      path: '/api/v1/transactions/%2e%2e/',
      headers: bearer(keys.admin.secretKey),
    }),
    ...notFound,
  },
  {
    name: 'an id that decodes to "../../wallets": 404',
    request: ({ keys }) => ({
      path: '/api/v1/transactions/..%2f..%2fwallets/',
      headers: bearer(keys.admin.secretKey),
    }),
    ...notFound,
  },
  {
    name: 'an id with an encoded slash: 404',
    request: ({ keys }) => ({
      path: '/api/v1/transactions/a%2Fb/',
      headers: bearer(keys.admin.secretKey),
    }),
    ...notFound,
  },
  {
    name: 'an id with an encoded NUL: 404',
    request: ({ keys }) => ({
      path: '/api/v1/transactions/txn%00/',
      headers: bearer(keys.admin.secretKey),
    }),
    ...notFound,
  },
  {
    name: 'an id of 65 characters: 404',
    request: ({ keys }) => ({
      path: `/api/v1/transactions/${'t'.repeat(65)}/`,
      headers: bearer(keys.admin.secretKey),
    }),
    ...notFound,
  },
  {
    name: 'a malformed percent-encoding in the id: 400 with the JSON error body',
    request: ({ keys }) => ({
      path: '/api/v1/transactions/%E0%A4%A/',
      headers: bearer(keys.admin.secretKey),
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'a malformed percent-encoding outside any route: 404',
    request: () => ({ path: '/api/v1/%ZZ/' }),
    ...notFound,
  },
  {
    name: 'a plain transaction id reaches the upstream at exactly its path',
    request: ({ keys }) => ({
      path: '/api/v1/transactions/txn_123/?expand=lines',
      headers: bearer(keys.admin.secretKey),
    }),
    ...proxied,
    then: upstreamPath('/api/v1/transactions/txn_123/?expand=lines'),
  },
  {
    name: 'a matrix parameter on the route: 404',
    request: ({ keys }) => ({
      path: '/api/v1/wallets;jsessionid=x/',
      headers: bearer(keys.admin.secretKey),
    }),
    ...notFound,
  },
  {
    name: 'a trailing dot segment: 404',
    request: ({ keys }) => ({
      raw: {
        target: '/api/v1/wallets/.',
        headers: [['Authorization', `Bearer ${keys.admin.secretKey}`]],
      },
    }),
    ...notFound,
  },
  {
    name: 'a doubled trailing slash: 404',
    request: ({ keys }) => ({ path: '/api/v1/wallets//', headers: bearer(keys.admin.secretKey) }),
    ...notFound,
  },
  {
    name: 'the route without its trailing slash is the same route',
    request: ({ keys }) => ({ path: '/api/v1/wallets', headers: bearer(keys.admin.secretKey) }),
    ...proxied,
    then: upstreamPath('/api/v1/wallets'),
  },
  {
    name: 'a percent-encoded letter in a static segment: 404',
    request: ({ keys }) => ({ path: '/api/v1/%77allets/', headers: bearer(keys.admin.secretKey) }),
    ...notFound,
  },
  {
    name: 'an absolute-form target naming another host (raw) reaches the upstream in origin form only',
    request: ({ keys }) => ({
      raw: {
        target: 'http://evil.example/api/v1/wallets/?page=2',
        headers: [['Authorization', `Bearer ${keys.admin.secretKey}`]],
      },
    }),
    ...proxied,
    then: upstreamPath('/api/v1/wallets/?page=2'),
  },
  {
    name: 'an absolute-form target without credentials (raw): 401',
    request: () => ({ raw: { target: 'http://127.0.0.1/api/v1/wallets/' } }),
    status: 401,
    code: 'missing_credentials',
    upstream: false,
  },
  {
    name: 'an asterisk-form target (raw): 404',
    request: () => ({ raw: { method: 'OPTIONS', target: '*' } }),
    ...notFound,
  },
  {
    name: 'a target with a space (raw): 400 with the JSON error body',
    request: () => ({ raw: { target: '/api/v1/wallets/ HTTP/1.1\r\nX-Injected: 1\r\nX' } }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'a path 8 KB long: 404',
    request: () => ({ path: `/api/v1/${'a'.repeat(8 * 1024)}/` }),
    ...notFound,
  },
  {
    name: 'HEAD without credentials: 401, and no body',
    request: () => ({ method: 'HEAD', path: WALLETS }),
    status: 401,
    code: null,
    upstream: false,
    then: (result) => {
      expect(result.text).toBe('');
    },
  },
  {
    name: 'HEAD with a valid key is forwarded as HEAD',
    request: ({ keys }) => ({
      method: 'HEAD',
      path: WALLETS,
      headers: bearer(keys.admin.secretKey),
    }),
    ...proxied,
    then: (_result, ctx) => {
      expect(ctx.gateway.upstream.requests.at(-1)?.method).toBe('HEAD');
    },
  },
  {
    name: 'OPTIONS on a secret-key route: 405 with Allow',
    request: ({ keys }) => ({
      method: 'OPTIONS',
      path: WALLETS,
      headers: bearer(keys.admin.secretKey),
    }),
    ...notAllowed,
    then: (result) => {
      expect(result.headers.allow).toBe('GET, HEAD');
    },
  },
  {
    name: 'TRACE with a valid key: 405, nothing echoed',
    request: ({ keys }) => ({
      method: 'TRACE',
      path: WALLETS,
      headers: bearer(keys.admin.secretKey),
    }),
    ...notAllowed,
  },
  {
    name: 'CONNECT (raw): Node closes the connection without an answer',
    request: () => ({ raw: { method: 'CONNECT', target: '127.0.0.1:6379' } }),
    status: 0,
    code: null,
    upstream: false,
  },
  {
    name: 'PUT on wallets: 405',
    request: ({ keys }) => ({
      method: 'PUT',
      path: WALLETS,
      headers: bearer(keys.admin.secretKey),
    }),
    ...notAllowed,
  },
  {
    name: 'DELETE on payouts: 405 with Allow POST',
    request: ({ keys }) => ({
      method: 'DELETE',
      path: '/api/v1/payouts/',
      headers: bearer(keys.admin.secretKey),
    }),
    ...notAllowed,
    then: (result) => {
      expect(result.headers.allow).toBe('POST');
    },
  },
  {
    name: 'PROPFIND (raw): 405',
    request: () => ({ raw: { method: 'PROPFIND', target: WALLETS } }),
    ...notAllowed,
  },
  {
    name: 'a lower-case method "get" (raw): 400 with the JSON error body',
    request: () => ({ raw: { method: 'get', target: WALLETS } }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'GET on a POST route with X-HTTP-Method-Override: POST: 405',
    request: ({ keys }) => ({
      path: '/api/v1/payouts/',
      headers: { ...bearer(keys.level2.secretKey), 'x-http-method-override': 'POST' },
    }),
    ...notAllowed,
  },
  {
    name: 'POST on a GET route with X-HTTP-Method-Override: GET: 405',
    request: ({ keys }) => ({
      method: 'POST',
      path: WALLETS,
      headers: {
        ...bearer(keys.admin.secretKey),
        'x-http-method-override': 'GET',
        'x-method-override': 'GET',
      },
    }),
    ...notAllowed,
  },
  {
    name: 'X-Original-URL cannot re-route a public path to a protected one',
    request: () => ({
      path: '/healthz',
      headers: { 'x-original-url': '/api/v1/payouts/', 'x-rewrite-url': '/api/v1/payouts/' },
    }),
    status: 200,
    code: null,
    upstream: false,
  },
  {
    name: 'X-Original-URL cannot re-route a protected path to a public one: 401',
    request: () => ({ path: WALLETS, headers: { 'x-original-url': '/healthz' } }),
    status: 401,
    code: 'missing_credentials',
    upstream: false,
  },
  {
    name: 'the approve route without its trailing slash keeps its role check: 403',
    request: ({ keys }) => ({
      method: 'POST',
      path: '/api/v1/payouts/po_1/approve',
      headers: bearer(keys.level2.secretKey),
    }),
    status: 403,
    code: 'insufficient_role',
    upstream: false,
  },
  {
    name: 'GET on the token exchange: 405',
    request: () => ({ path: '/api/v1/auth/generate-token' }),
    ...notAllowed,
  },
];

describeHostileCases('hostile paths and methods', cases, UNTHROTTLED);
