import type { LimitScopes } from '../../lib';

/**
 * The sample gateway's limit scopes as its key stores check accounts' `limits`: an
 * account may override `payments` and `authenticated`, counted per account; the per-IP scopes
 * (`public`, the name the docs give them, and the gateway's three) are refused, naming why. It
 * lives beside the key command, which ships in the package and validates keys files with it;
 * `tollgate()` checks at start that it matches the scopes `app.ts` declares.
 */
export const GATEWAY_LIMIT_SCOPES: LimitScopes = Object.freeze({
  payments: 'account',
  authenticated: 'account',
  public: 'ip',
  'checkout-create': 'ip',
  'checkout-read': 'ip',
  'payments-publishable': 'ip',
});
