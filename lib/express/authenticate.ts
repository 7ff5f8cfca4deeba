import type { RequestHandler } from 'express';
import { checkOptions, isFunction, KEY_STORE, type OptionChecks } from '../options';
import {
  AUTHENTICATE_OPTION_CHECKS,
  type AuthenticateOptions,
  credentialResolver,
  refuseCredentialsInQuery,
  type SecurityEvent,
} from '../core/credentials';
import type { RequestFacts } from '../core/facts';
import type { KeyStore } from '../model/key-record';
import type { AuthFailureLimiter } from '../rate-limit/auth-failures';
import type { AuthContext } from '../types';

/**
 * The credential check as single Express middlewares, for apps that compose their own chain:
 * `authenticate()` and `refuseQueryCredentials()`. `tollgate().protect()` runs the same checks in
 * the decision core, in an order no caller can get wrong.
 */

/**
 * Authenticates the request with one of the credentials the route accepts and sets `req.auth`.
 * Failures go to `next(err)` as `AuthenticationError` (401), `InvalidRequestError` (400) or, when
 * the failed-authentication budget is spent, `RateLimitedError` (429). Synchronous from the budget
 * check to the comparison and its count.
 */
export function authenticate(options: AuthenticateOptions): RequestHandler {
  checkOptions('authenticate()', options, AUTHENTICATE_OPTION_CHECKS);
  const { authFailures, ...resolverOptions } = options;
  return authenticatingMiddleware(credentialResolver(resolverOptions), authFailures);
}

/**
 * A middleware that sets `req.auth` from `resolve`, compared under the failure budget when one is
 * given, and passes a refusal to `next(err)`. Shared by `authenticate()` and
 * `authenticateKeyPair()`.
 */
export function authenticatingMiddleware(
  resolve: (req: RequestFacts) => AuthContext,
  authFailures: Pick<AuthFailureLimiter, 'queueAttempt'> | undefined,
): RequestHandler {
  return function authenticateMiddleware(req, _res, next) {
    if (authFailures !== undefined) {
      authFailures.queueAttempt(
        req,
        () => resolve(req),
        (error, auth) => {
          if (auth !== undefined) req.auth = auth;
          next(error);
        },
      );
      return;
    }
    try {
      req.auth = resolve(req);
    } catch (error) {
      next(error);
      return;
    }
    next();
  };
}

export interface QueryCredentialOptions {
  /** Looks up refused values, to report a secret key sent in a URL as leaked. */
  keyStore?: KeyStore;
  /** Called when a refused value is a known secret key; receives the key id, never the secret. */
  onSecurityEvent?: (event: SecurityEvent, req: RequestFacts) => void;
}

const QUERY_CREDENTIAL_OPTION_CHECKS: OptionChecks<QueryCredentialOptions> = {
  keyStore: KEY_STORE,
  onSecurityEvent: isFunction,
};

/**
 * Refuses with 400 `invalid_request` a request whose query string carries a credential: a
 * parameter of `QUERY_CREDENTIAL_PARAMS`, or any value that looks like a secret key or a token.
 * Mount it before the routes. A known secret key found there is reported as leaked.
 */
export function refuseQueryCredentials(options: QueryCredentialOptions = {}): RequestHandler {
  checkOptions('refuseQueryCredentials()', options, QUERY_CREDENTIAL_OPTION_CHECKS);
  const { keyStore, onSecurityEvent } = options;
  return function refuseQueryCredentialsMiddleware(req, _res, next) {
    try {
      refuseCredentialsInQuery(req, keyStore, onSecurityEvent);
    } catch (error) {
      next(error);
      return;
    }
    next();
  };
}
