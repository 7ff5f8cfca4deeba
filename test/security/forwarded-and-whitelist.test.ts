import { bearer, describeHostileCases, type HostileCase, UNTHROTTLED } from './hostile-cases';

/**
 * Client addresses and IP whitelists. `acct_walled` admits 127.0.0.2, 127.0.10.0/24 and
 * 2001:db8::/32; loopback lets a test bind those as real source addresses. Without a trusted proxy
 * every forwarding header is ignored; with one, the right-most untrusted address is the client and
 * a forwarded value that is not an IP address is refused.
 */

const WALLETS = '/api/v1/wallets/';
const DENIED = {
  status: 403,
  code: 'ip_not_whitelisted',
  message: 'Access denied: IP not whitelisted.',
  upstream: false,
} as const;
const ALLOWED = { status: 200, code: null, upstream: true } as const;
const BAD_ADDRESS = { status: 400, code: 'invalid_request', upstream: false } as const;

type Ctx = Parameters<HostileCase['request']>[0];
const walled = (ctx: Ctx, headers: Record<string, string> = {}, from?: string) => ({
  path: WALLETS,
  headers: { ...bearer(ctx.keys.walled.secretKey), ...headers },
  ...(from === undefined ? {} : { from }),
});

const noProxy: HostileCase[] = [
  {
    name: 'a whitelisted key from 127.0.0.1, outside its list: 403',
    request: (ctx) => walled(ctx),
    ...DENIED,
  },
  {
    name: 'the same key from 127.0.0.2, on its list: allowed',
    request: (ctx) => walled(ctx, {}, '127.0.0.2'),
    ...ALLOWED,
  },
  {
    name: 'the same key from 127.0.10.7, inside its /24: allowed',
    request: (ctx) => walled(ctx, {}, '127.0.10.7'),
    ...ALLOWED,
  },
  {
    name: 'the same key from 127.0.11.1, just outside the /24: 403',
    request: (ctx) => walled(ctx, {}, '127.0.11.1'),
    ...DENIED,
  },
  {
    name: 'a spoofed X-Forwarded-For naming a whitelisted address, no proxy trusted: 403',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '127.0.0.2' }),
    ...DENIED,
  },
  {
    name: 'a spoofed X-Real-IP: 403',
    request: (ctx) => walled(ctx, { 'x-real-ip': '127.0.0.2' }),
    ...DENIED,
  },
  {
    name: 'a spoofed Forwarded: for=…: 403',
    request: (ctx) => walled(ctx, { forwarded: 'for=127.0.0.2;proto=https' }),
    ...DENIED,
  },
  {
    name: 'spoofed X-Client-IP, True-Client-IP and CF-Connecting-IP: 403',
    request: (ctx) =>
      walled(ctx, {
        'x-client-ip': '127.0.0.2',
        'true-client-ip': '127.0.0.2',
        'cf-connecting-ip': '127.0.0.2',
      }),
    ...DENIED,
  },
  {
    name: 'garbage in X-Forwarded-For is ignored when no proxy is trusted',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { ...bearer(keys.admin.secretKey), 'x-forwarded-for': 'garbage' },
    }),
    ...ALLOWED,
  },
  {
    name: 'the key pair exchange of a whitelisted account from outside its list: 403',
    request: ({ keys }) => ({
      method: 'POST',
      path: '/api/v1/auth/generate-token/',
      body: { api_key: keys.walled.publishableKey, api_secret: keys.walled.secretKey },
    }),
    ...DENIED,
  },
  {
    name: 'the key pair exchange from a whitelisted address: allowed',
    request: ({ keys }) => ({
      method: 'POST',
      path: '/api/v1/auth/generate-token/',
      body: { api_key: keys.walled.publishableKey, api_secret: keys.walled.secretKey },
      from: '127.0.10.200',
    }),
    status: 200,
    code: null,
    upstream: false,
    answerHoldsToken: true,
  },
  {
    name: "the account's publishable key is not IP-restricted",
    request: ({ keys }) => ({
      method: 'POST',
      path: '/api/v1/checkout/',
      headers: { 'x-service-public-api-key': keys.walled.publishableKey },
    }),
    ...ALLOWED,
  },
  {
    name: 'a whitelist refusal reveals nothing of the whitelist',
    request: (ctx) => walled(ctx, {}, '127.0.0.3'),
    ...DENIED,
    then: (result) => {
      expect(result.text).not.toMatch(/127\.0\.(0\.2|10)|2001:db8/);
    },
  },
];

/** The test client connects from 127.0.0.1, playing the trusted proxy. */
const trustedAddress: HostileCase[] = [
  {
    name: 'the proxy forwards a whitelisted client: allowed',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '127.0.0.2' }),
    ...ALLOWED,
  },
  {
    name: 'a client-sent whitelisted address before the real one the proxy appended: the right-most wins, 403',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '127.0.0.2, 127.0.0.9' }),
    ...DENIED,
  },
  {
    name: 'a client-sent foreign address before the real whitelisted one: allowed',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '203.0.113.7, 127.0.0.2' }),
    ...ALLOWED,
  },
  {
    name: 'a forwarded "garbage": 400, never a rate-limit key',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': 'garbage' }),
    ...BAD_ADDRESS,
  },
  {
    name: 'a forwarded address with a port: 400',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '127.0.0.2:443' }),
    ...BAD_ADDRESS,
  },
  {
    name: 'a forwarded integer address: 400',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '2130706434' }),
    ...BAD_ADDRESS,
  },
  {
    name: 'a forwarded octal address: 400',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '0177.0.0.2' }),
    ...BAD_ADDRESS,
  },
  {
    name: 'a forwarded short address: 400',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '127.2' }),
    ...BAD_ADDRESS,
  },
  {
    name: 'a forwarded bracketed IPv6 address: 400',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '[2001:db8::1]' }),
    ...BAD_ADDRESS,
  },
  {
    name: 'a forwarded IPv4-mapped whitelisted address: allowed',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '::ffff:127.0.0.2' }),
    ...ALLOWED,
  },
  {
    name: 'a forwarded address in the whitelisted IPv6 range: allowed',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '2001:db8:0:1::5' }),
    ...ALLOWED,
  },
  {
    name: 'a forwarded IPv6 address outside the range: 403',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '2001:db9::1' }),
    ...DENIED,
  },
  {
    name: 'a forwarded link-local address with a zone id: the zone is dropped, 403',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': 'fe80::1%eth0' }),
    ...DENIED,
    then: (_result, ctx) => {
      const lines = ctx.gateway.logs.lines.filter((line) => line.includes('fe80::1'));
      expect(lines.length).toBeGreaterThan(0);
      expect(lines.join('\n')).not.toContain('%eth0');
    },
  },
  {
    name: 'X-Real-IP is ignored even behind a trusted proxy: 403',
    request: (ctx) => walled(ctx, { 'x-real-ip': '127.0.0.2' }),
    ...DENIED,
  },
  {
    name: 'Forwarded: for=… is ignored even behind a trusted proxy: 403',
    request: (ctx) => walled(ctx, { forwarded: 'for=127.0.0.2' }),
    ...DENIED,
  },
  {
    name: 'an untrusted socket address cannot forward anything: 403',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '127.0.0.2' }, '127.0.0.3'),
    ...DENIED,
  },
];

const oneHop: HostileCase[] = [
  {
    name: 'one trusted hop: the address the proxy appended is the client, allowed',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '127.0.0.2' }),
    ...ALLOWED,
  },
  {
    name: 'one trusted hop: a client-sent whitelisted address before the real one, 403',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '127.0.0.2, 127.0.0.9' }),
    ...DENIED,
  },
  {
    name: 'one trusted hop: a forwarded "1.2.3.4:80", 400',
    request: (ctx) => walled(ctx, { 'x-forwarded-for': '1.2.3.4:80' }),
    ...BAD_ADDRESS,
  },
];

const dualStack: HostileCase[] = [
  {
    name: 'dual stack: an IPv4 client seen as ::ffff:127.0.0.2 matches its IPv4 entry',
    request: (ctx) => walled(ctx, {}, '127.0.0.2'),
    ...ALLOWED,
  },
  {
    name: 'dual stack: ::ffff:127.0.0.1 does not',
    request: (ctx) => walled(ctx, {}, '127.0.0.1'),
    ...DENIED,
  },
  {
    name: 'dual stack: the IPv6 loopback ::1 is not on the list',
    request: (ctx) => walled(ctx, {}, '::1'),
    ...DENIED,
  },
];

describeHostileCases('client addresses without a trusted proxy', noProxy, UNTHROTTLED);
describeHostileCases('client addresses behind a proxy trusted by address', trustedAddress, {
  ...UNTHROTTLED,
  trustProxy: ['127.0.0.1'],
});
describeHostileCases('client addresses behind one trusted hop', oneHop, {
  ...UNTHROTTLED,
  trustProxy: 1,
});
describeHostileCases('client addresses on a dual-stack listener', dualStack, {
  ...UNTHROTTLED,
  host: '::',
});
