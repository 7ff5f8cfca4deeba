import {
  bearer,
  describeHostileCases,
  type HostileCase,
  securityEvents,
  UNTHROTTLED,
} from './hostile-cases';
import { withLastCharacterChanged } from '../helpers/fixtures';

/**
 * Credentials in the wrong place: publishable keys as Bearer, secret keys where publishable keys
 * go or from a browser (refused and logged as leaked), tokens as publishable keys, two credentials
 * at once, revoked keys, swapped pairs and roles below the route's minimum.
 */

const WALLETS = '/api/v1/wallets/';
const CHECKOUT = '/api/v1/checkout/';
const STATUS = '/api/v1/payment/status/';
const EXCHANGE = '/api/v1/auth/generate-token/';
const PK_HEADER = 'x-service-public-api-key';
const INVALID_PAIR = {
  status: 401,
  code: 'invalid_credentials',
  message: 'Invalid API key or secret',
  upstream: false,
} as const;

type Ctx = Parameters<HostileCase['request']>[0];
type KeyName = keyof Ctx['keys'];

/** Asserts exactly one leaked-key event for the request, naming the key id and never the secret. */
const reportedLeak =
  (reason: string, key: KeyName = 'admin'): HostileCase['then'] =>
  (result, ctx) => {
    const events = securityEvents(ctx.gateway, String(result.headers['x-request-id']));
    expect(events).toEqual([
      expect.objectContaining({
        event: 'security.leaked_secret_key',
        reason,
        key_id: ctx.keys[key].id,
        account_id: ctx.keys[key].accountId,
      }),
    ]);
  };

const noLeakReported: HostileCase['then'] = (result, ctx) => {
  expect(securityEvents(ctx.gateway, String(result.headers['x-request-id']))).toEqual([]);
};

const cases: HostileCase[] = [
  {
    name: 'a publishable key in its header on a secret-key route: 401 credential_not_allowed',
    request: ({ keys }) => ({ path: WALLETS, headers: { [PK_HEADER]: keys.admin.publishableKey } }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
    then: noLeakReported,
  },
  {
    name: 'a publishable key as Bearer on a secret-key route: 401',
    request: ({ keys }) => ({ path: WALLETS, headers: bearer(keys.admin.publishableKey) }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a publishable key as Bearer on checkout: 401 credential_not_allowed',
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: bearer(keys.admin.publishableKey),
    }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
  },
  {
    name: 'a secret key as Bearer on checkout: 401 credential_not_allowed',
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: bearer(keys.admin.secretKey),
    }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
  },
  {
    name: 'a secret key in the publishable-key header on checkout: 401, logged as leaked',
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: { [PK_HEADER]: keys.admin.secretKey },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
    then: reportedLeak('sent_as_publishable_key'),
  },
  {
    name: 'a secret key in the public_key body field on checkout: 401, logged as leaked',
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      body: { public_key: keys.level2.secretKey },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
    then: reportedLeak('sent_as_publishable_key', 'level2'),
  },
  {
    name: 'a secret key in the publishable-key header on payment status: 401, logged as leaked',
    request: ({ keys }) => ({
      method: 'POST',
      path: STATUS,
      headers: { [PK_HEADER]: keys.admin.secretKey },
      body: { invoice_id: 'inv_1' },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
    then: reportedLeak('sent_as_publishable_key'),
  },
  {
    name: 'a secret key in the publishable-key header on a secret-key route: 401, logged as leaked',
    request: ({ keys }) => ({ path: WALLETS, headers: { [PK_HEADER]: keys.admin.secretKey } }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
    then: reportedLeak('sent_as_publishable_key'),
  },
  {
    name: "another tool's secret key in public_key: 401, logged as leaked",
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      body: { public_key: keys.foreign.secretKey },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
    then: reportedLeak('sent_as_publishable_key', 'foreign'),
  },
  {
    name: 'a secret key with an Origin header: 401, logged as leaked from a browser',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { ...bearer(keys.admin.secretKey), origin: 'https://shop.example' },
    }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
    then: reportedLeak('sent_from_browser'),
  },
  {
    name: "a secret key with only Sec-Fetch-Mode: cors, as Node's own fetch sends: allowed",
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { ...bearer(keys.admin.secretKey), 'sec-fetch-mode': 'cors' },
    }),
    status: 200,
    code: null,
    upstream: true,
  },
  {
    name: 'a secret key with Sec-Fetch-Site and Sec-Fetch-Dest: 401, logged as leaked from a browser',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: {
        ...bearer(keys.admin.secretKey),
        'sec-fetch-mode': 'cors',
        'sec-fetch-site': 'cross-site',
        'sec-fetch-dest': 'empty',
      },
    }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
    then: reportedLeak('sent_from_browser'),
  },
  {
    name: 'a secret key with only Sec-Fetch-User: 401, logged as leaked from a browser',
    request: ({ keys }) => ({
      path: WALLETS,
      headers: { ...bearer(keys.admin.secretKey), 'sec-fetch-user': '?1' },
    }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
    then: reportedLeak('sent_from_browser'),
  },
  {
    name: 'the key pair exchange from a browser: 401, logged as leaked',
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      headers: { origin: 'https://shop.example', 'sec-fetch-site': 'cross-site' },
      body: { api_key: keys.level3.publishableKey, api_secret: keys.level3.secretKey },
    }),
    status: 401,
    code: 'credential_not_allowed',
    upstream: false,
    then: reportedLeak('sent_from_browser', 'level3'),
  },
  {
    name: 'a token from a browser is not a leaked secret key: allowed',
    request: (ctx) => ({
      path: WALLETS,
      headers: { ...bearer(ctx.token()), origin: 'https://dashboard.example' },
    }),
    status: 200,
    code: null,
    upstream: true,
    then: noLeakReported,
  },
  {
    name: 'an unknown secret-looking key with an Origin header: 401, nothing to report',
    request: () => ({
      path: WALLETS,
      headers: { ...bearer('sk_test_unknown_0123456789abcdef'), origin: 'https://shop.example' },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
    then: noLeakReported,
  },
  {
    name: 'a token as public_key: 401',
    request: (ctx) => ({ method: 'POST', path: CHECKOUT, body: { public_key: ctx.token() } }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a token in the publishable-key header: 401',
    request: (ctx) => ({ method: 'POST', path: CHECKOUT, headers: { [PK_HEADER]: ctx.token() } }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: 'a Bearer secret key and a publishable key together: 400',
    request: ({ keys }) => ({
      method: 'POST',
      path: STATUS,
      headers: { ...bearer(keys.admin.secretKey), [PK_HEADER]: keys.admin.publishableKey },
      body: { invoice_id: 'inv_1' },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'a Bearer token with public_key in a GET body: 400',
    request: (ctx) => ({
      path: WALLETS,
      headers: bearer(ctx.token()),
      body: { public_key: ctx.keys.admin.publishableKey },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'the publishable key in the header and in the body: 400',
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: { [PK_HEADER]: keys.admin.publishableKey },
      body: { public_key: keys.level1.publishableKey },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'the publishable-key header twice (raw): 400',
    request: ({ keys }) => ({
      raw: {
        method: 'POST',
        target: CHECKOUT,
        headers: [
          ['X-Service-Public-API-Key', keys.admin.publishableKey],
          ['x-service-public-api-key', keys.level1.publishableKey],
        ],
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: "a revoked key's secret: 401",
    request: ({ keys }) => ({ path: WALLETS, headers: bearer(keys.revoked.secretKey) }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: "a revoked key's publishable key on checkout: 401",
    request: ({ keys }) => ({
      method: 'POST',
      path: CHECKOUT,
      headers: { [PK_HEADER]: keys.revoked.publishableKey },
    }),
    status: 401,
    code: 'invalid_api_key',
    upstream: false,
  },
  {
    name: "a revoked key's pair: the same 401 as any wrong pair",
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.revoked.publishableKey, api_secret: keys.revoked.secretKey },
    }),
    ...INVALID_PAIR,
  },
  {
    name: 'an unknown api_key: the same 401 as a wrong secret',
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: 'pk_test_nobody_0123456789abcdef', api_secret: keys.admin.secretKey },
    }),
    ...INVALID_PAIR,
  },
  {
    name: 'a known api_key with a wrong secret: the same 401 as an unknown key',
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.admin.publishableKey, api_secret: 'sk_test_wrong_0123456789abcdef' },
    }),
    ...INVALID_PAIR,
  },
  {
    name: 'a pair mixed from two keys: 401',
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.admin.publishableKey, api_secret: keys.level1.secretKey },
    }),
    ...INVALID_PAIR,
  },
  {
    name: 'the pair swapped: 401',
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.admin.secretKey, api_secret: keys.admin.publishableKey },
    }),
    ...INVALID_PAIR,
  },
  {
    name: 'the secret key in both fields: 401',
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: { api_key: keys.admin.secretKey, api_secret: keys.admin.secretKey },
    }),
    ...INVALID_PAIR,
  },
  {
    name: 'a typed secret with a wrong checksum in the pair: 401',
    request: ({ keys }) => ({
      method: 'POST',
      path: EXCHANGE,
      body: {
        api_key: keys.admin.publishableKey,
        api_secret: withLastCharacterChanged(keys.admin.secretKey),
      },
    }),
    ...INVALID_PAIR,
  },
  {
    name: 'a level-2 key on a level-3 route: 403 insufficient_role',
    request: ({ keys }) => ({
      method: 'POST',
      path: '/api/v1/payouts/po_1/approve/',
      headers: bearer(keys.level2.secretKey),
    }),
    status: 403,
    code: 'insufficient_role',
    upstream: false,
  },
  {
    name: 'a level-1 token on payout initiation: 403 insufficient_role',
    request: (ctx) => ({
      method: 'POST',
      path: '/api/v1/payouts/',
      headers: bearer(ctx.token(ctx.keys.level1)),
    }),
    status: 403,
    code: 'insufficient_role',
    upstream: false,
  },
  {
    name: 'a level-3 key confirms an OTP',
    request: ({ keys }) => ({
      method: 'POST',
      path: '/api/v1/otp/confirm/',
      headers: bearer(keys.level3.secretKey),
      body: { otp: '123456' },
    }),
    status: 200,
    code: null,
    upstream: true,
    then: (_result, ctx) => {
      expect(ctx.gateway.upstream.requests.at(-1)?.headers['x-gateway-role']).toBe('level-3');
    },
  },
  {
    name: 'a client-sent X-Gateway-Role never reaches the upstream',
    request: ({ keys }) => ({
      method: 'POST',
      path: '/api/v1/chargebacks/',
      headers: {
        ...bearer(keys.level2.secretKey),
        'x-gateway-role': 'administrator',
        'x-gateway-account-id': 'acct_walled',
      },
    }),
    status: 200,
    code: null,
    upstream: true,
    then: (_result, ctx) => {
      const forwarded = ctx.gateway.upstream.requests.at(-1);
      expect(forwarded?.headers['x-gateway-role']).toBe('level-2');
      expect(forwarded?.headers['x-gateway-account-id']).toBe('acct_open');
    },
  },
  {
    name: "another tool's key shape authenticates as itself",
    request: ({ keys }) => ({ path: WALLETS, headers: bearer(keys.foreign.secretKey) }),
    status: 200,
    code: null,
    upstream: true,
  },
  {
    name: 'a secret key on payment status is accepted as a secret key',
    request: ({ keys }) => ({
      method: 'POST',
      path: STATUS,
      headers: bearer(keys.level1.secretKey),
      body: { invoice_id: 'inv_1' },
    }),
    status: 200,
    code: null,
    upstream: true,
    then: (_result, ctx) => {
      expect(ctx.gateway.upstream.requests.at(-1)?.headers['x-gateway-credential']).toBe('secret');
    },
  },
];

describeHostileCases('credential mix-ups', cases, UNTHROTTLED);
