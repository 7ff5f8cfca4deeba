import type { IpWhitelist } from './ip-whitelist';
import type { Role } from './roles';

/** How a request proved who it is. */
export type CredentialKind = 'secret' | 'token' | 'publishable';

export const CREDENTIAL_KINDS: readonly CredentialKind[] = ['secret', 'token', 'publishable'];

/** The identity of an authenticated request, always taken from the server's key record. */
export interface AuthContext {
  readonly accountId: string;
  readonly keyId: string;
  /** The key's current role (for tokens too: a role change applies to tokens already issued). */
  readonly role: Role;
  readonly credential: CredentialKind;
  /** The `jti` of the token, when the credential is a token. */
  readonly tokenId?: string;
  /** The account's whitelist; `undefined` when its secret-key requests are not restricted. */
  readonly ipWhitelist?: IpWhitelist | undefined;
  /** The account's own limits per scope; `undefined`: the defaults. */
  readonly limits?: Readonly<Record<string, number>> | undefined;
  /** The key's permissions when it is restricted; `undefined`: not restricted. */
  readonly permissions?: ReadonlySet<string> | undefined;
}
