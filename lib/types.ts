import type { RequestSpan } from './core/tracing';
import type { AuthContext } from './model/auth-context';

export type { AuthContext, CredentialKind } from './model/auth-context';
export { CREDENTIAL_KINDS } from './model/auth-context';
export type { Logger } from './model/logger';

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
