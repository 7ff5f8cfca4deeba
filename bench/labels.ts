import { PAYOUTS_PATH } from './idempotency';

/** The paths, addresses and names the cases share. */

export const WALLETS_PATH = '/api/v1/wallets/';
export const CHECKOUT_PATH = '/api/v1/checkout/';
/**
 * Every bench account's whitelist: loopback (wrk), the forward-auth case's client address and the
 * RSS cases' 10/8, among ranges a payments customer would list. The gateway and the naive
 * composition both check it on every secret-key request.
 */
export const WHITELIST = ['203.0.113.0/24', '2001:db8::/32', '10.0.0.0/8', '127.0.0.1'];
/** The client address the forward-auth case's proxy reports in `X-Forwarded-For`. */
const FORWARDED_CLIENT = '203.0.113.10';

export const FORWARD_AUTH_PATH = '/authz/auth-request';
/** nginx's auth_request subrequest for a client's `GET /api/v1/wallets/` (test/helpers/forward-auth.ts). */
export const FORWARD_AUTH_HEADERS: Readonly<Record<string, string>> = {
  'X-Original-Method': 'GET',
  'X-Original-URI': WALLETS_PATH,
  'X-Forwarded-For': FORWARDED_CLIENT,
};

/** The cases' names in the tables. */
export const TARGETS = {
  upstream: '(a) stub upstream, direct',
  floor: '(d) Express 5 alone (floor)',
  bornFloor: "(d') Express 5 alone, expressServerOptions",
  proxy: '(g) Express 5 + http-proxy-middleware, no auth',
  hops: "(g') Express 5 + one Redis command + the gateway's proxy, no check",
  naive: '(h) naive composition, Redis limits',
  forwardAuth: '(i) gateway forward-auth (auth-request), Redis limits',
  paced: '(c) gateway, Redis limits',
  memory: '(b) gateway, in-memory limits',
  redis: '(c) gateway, Redis limits',
  wrongLeft: '(e) gateway, wrong key, budget left',
  wrongSpent: '(f) gateway, wrong key, budget spent',
  payoutsMemory: `(k) gateway, in-memory limits, POST ${PAYOUTS_PATH}`,
  payoutsRedis: `(k) gateway, Redis limits, POST ${PAYOUTS_PATH}`,
} as const;

export const WRONG_KEY = 'unknown secret key';

/** The cases run side by side in rounds for the target ratios. */
export type RoundCase = 'floor' | 'born-floor' | 'naive' | 'redis-secret' | 'forward-auth';
export const ROUND_LABELS: Readonly<Record<RoundCase, string>> = {
  floor: TARGETS.floor,
  'born-floor': TARGETS.bornFloor,
  naive: TARGETS.naive,
  'redis-secret': `${TARGETS.redis}, secret key`,
  'forward-auth': TARGETS.forwardAuth,
};

/** Requests a second of the latency cases. */
export const PACED_RATE = 1000;
