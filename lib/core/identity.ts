import type { AuthContext } from '../model/auth-context';

/**
 * The identity headers an upstream receives for an allowed request, from the gateway's own proxy
 * or from a reverse proxy that asked the forward-auth door. A client's own
 * copies of them are never passed on.
 */
export const IDENTITY_HEADERS = [
  'x-gateway-account-id',
  'x-gateway-key-id',
  'x-gateway-role',
  'x-gateway-credential',
] as const;

export type IdentityHeader = (typeof IDENTITY_HEADERS)[number];

/** The identity headers of `auth`, every one of them always present. */
export function identityHeaders(auth: AuthContext): Record<IdentityHeader, string> {
  return {
    'x-gateway-account-id': auth.accountId,
    'x-gateway-key-id': auth.keyId,
    'x-gateway-role': auth.role,
    'x-gateway-credential': auth.credential,
  };
}
