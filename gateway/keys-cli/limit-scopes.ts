import type { LimitScopes, ScopeKey } from '../../lib';

/**
 * The sample gateway's limit scopes, each counted per account or per client address: the one list
 * of them, which the routes, the limits, shadow mode, the metrics and the key stores' checks all
 * take. It lives beside the key command, which ships in the package and validates keys files with
 * it.
 */
export const GATEWAY_SCOPES = {
  payments: 'account',
  authenticated: 'account',
  'checkout-create': 'ip',
  'checkout-read': 'ip',
  'payments-publishable': 'ip',
} as const satisfies Record<string, ScopeKey>;

export type GatewayScope = keyof typeof GATEWAY_SCOPES;

/** The scope names, in the order of their declaration. */
export const GATEWAY_SCOPE_NAMES = Object.freeze(
  Object.keys(GATEWAY_SCOPES),
) as readonly GatewayScope[];

/**
 * The scopes as the gateway's key stores check accounts' `limits`: an account may
 * override the per-account ones; the per-IP ones (and `public`, the name the docs give them) are
 * refused, naming why. `tollgate()` checks at start that it matches the scopes the gateway counts.
 */
export const GATEWAY_LIMIT_SCOPES: LimitScopes = Object.freeze({ ...GATEWAY_SCOPES, public: 'ip' });
