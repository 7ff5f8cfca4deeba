import type { IpWhitelist } from './core/ip-whitelist';
import type { Role } from './core/roles';
import type { RequestSpan } from './core/tracing';

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

/** The logging the kit needs; a pino logger fits. Objects logged never hold a secret. */
export interface Logger {
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
  /** Lets per-request logging skip building its fields when the level is off (pino has it). */
  isLevelEnabled?(level: 'info' | 'warn' | 'error'): boolean;
}

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /** Set by `authenticate()` once the request's credential has been verified. */
      auth?: AuthContext;
      /** The canonical client address (`::ffff:` prefix removed), set by `clientIp()`. */
      clientIp?: string;
      /** A per-request id, set by `requestId()`; also sent as `X-Request-Id`. */
      requestId?: string;
      /** The request body as received, set by `jsonBody()` so a proxy can forward it unchanged. */
      rawBody?: Buffer;
      /** The request's span while tracing is on, set by `context()` or the first door. */
      tollgateSpan?: RequestSpan;
    }
  }
}
