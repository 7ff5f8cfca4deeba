import type { CredentialKind, Permission, Role } from '../lib';
import type { GatewayScope } from './keys-cli/limit-scopes';

/**
 * The sample gateway's routes: for each, the credentials it accepts, the minimum role, the
 * permission a restricted key needs and the rate-limit scope. `app.ts` builds every
 * route, for its own proxy and for forward authentication, from this table and nothing else.
 */

/** A route's own scope; `payments-publishable` is the cap on its publishable-key requests. */
export type LimitScope = Exclude<GatewayScope, 'payments-publishable'>;

export interface RouteSpec {
  readonly method: 'GET' | 'POST';
  /** Express path; matches with or without the trailing slash. */
  readonly path: string;
  /** `'key-pair'`: the token exchange, which reads the key pair from the body. */
  readonly accept: readonly CredentialKind[] | 'key-pair';
  readonly minimumRole?: Role;
  /**
   * What a restricted key must hold, checked after the role. Publishable keys are never
   * restricted; the token exchange needs none.
   */
  readonly permission?: Permission;
  readonly scope: LimitScope;
  /**
   * The route moves money: a retry with the same `Idempotency-Key` is answered with the first
   * answer, never forwarded again.
   */
  readonly idempotent?: true;
}

const BEARER: readonly CredentialKind[] = ['secret', 'token'];

export const ROUTES: readonly RouteSpec[] = [
  {
    method: 'POST',
    path: '/api/v1/auth/generate-token/',
    accept: 'key-pair',
    scope: 'authenticated',
  },
  {
    method: 'GET',
    path: '/api/v1/wallets/',
    accept: BEARER,
    minimumRole: 'level-1',
    permission: 'wallets:read',
    scope: 'payments',
  },
  {
    method: 'GET',
    path: '/api/v1/transactions/',
    accept: BEARER,
    minimumRole: 'level-1',
    permission: 'transactions:read',
    scope: 'authenticated',
  },
  {
    method: 'GET',
    path: '/api/v1/transactions/:id/',
    accept: BEARER,
    minimumRole: 'level-1',
    permission: 'transactions:read',
    scope: 'authenticated',
  },
  {
    method: 'POST',
    path: '/api/v1/payment/status/',
    accept: ['publishable', 'secret', 'token'],
    permission: 'payments:read',
    scope: 'payments',
  },
  {
    method: 'POST',
    path: '/api/v1/checkout/',
    accept: ['publishable'],
    scope: 'checkout-create',
    idempotent: true,
  },
  { method: 'GET', path: '/api/v1/checkout/:id/', accept: ['publishable'], scope: 'checkout-read' },
  {
    method: 'POST',
    path: '/api/v1/payouts/',
    accept: BEARER,
    minimumRole: 'level-2',
    permission: 'payouts:write',
    scope: 'payments',
    idempotent: true,
  },
  {
    method: 'POST',
    path: '/api/v1/payouts/:id/approve/',
    accept: BEARER,
    minimumRole: 'level-3',
    permission: 'payouts:approve',
    scope: 'payments',
    idempotent: true,
  },
  {
    method: 'POST',
    path: '/api/v1/otp/confirm/',
    accept: BEARER,
    minimumRole: 'level-3',
    permission: 'otp:confirm',
    scope: 'authenticated',
    idempotent: true,
  },
  {
    method: 'POST',
    path: '/api/v1/chargebacks/',
    accept: BEARER,
    minimumRole: 'level-2',
    permission: 'chargebacks:write',
    scope: 'authenticated',
    idempotent: true,
  },
];

/** The paths of the routes that take an `Idempotency-Key`. */
export const IDEMPOTENT_PATHS: readonly string[] = ROUTES.filter((route) => route.idempotent).map(
  (route) => route.path,
);

/** Path parameters are opaque ids; anything else (`..`, `%2F`, spaces) is not a route: 404. */
export const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
