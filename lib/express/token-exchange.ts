import {
  authFailuresWith,
  checkOptions,
  type OptionChecks,
  required,
  TOKEN_SERVICE,
} from '../options';
import type { RequestHandler } from 'express';
import type { SecurityEvent } from '../core/credentials';
import type { RequestFacts } from '../core/facts';
import { KEY_PAIR_RESOLVER_CHECKS, keyPairResolver } from '../core/key-pair';
import { authenticatingMiddleware } from './authenticate';
import { AuthenticationError } from '../errors';
import type { KeyStore } from '../model/key-record';
import type { AuthFailureLimiter } from '../rate-limit/auth-failures';
import type { TokenService } from '../tokens/tokens';

/**
 * `POST /api/v1/auth/generate-token/`: a key pair in the JSON body is exchanged for a short-lived
 * token. Split in two so the IP whitelist and the rate limit can run between them:
 * `authenticateKeyPair()` sets `req.auth`, `issueToken()` answers.
 */

export interface KeyPairOptions {
  keyStore: KeyStore;
  /**
   * Refuse the exchange when the request carries browser signals (`Origin`, `Sec-Fetch-*`): the
   * secret key is in a browser, where it can move money. Defaults to `true`.
   */
  refuseSecretKeysFromBrowsers?: boolean;
  /** Called for security events (a secret key seen in a browser); receives the key id only. */
  onSecurityEvent?: (event: SecurityEvent, req: RequestFacts) => void;
  /**
   * The failed-authentication budget (`createAuthFailureLimiter()`): the pair is compared under
   * it, so a spent budget refuses even the right pair. Defaults to none.
   */
  authFailures?: Pick<AuthFailureLimiter, 'queueAttempt'>;
}

const KEY_PAIR_OPTION_CHECKS: OptionChecks<KeyPairOptions> = {
  ...KEY_PAIR_RESOLVER_CHECKS,
  authFailures: authFailuresWith('queueAttempt'),
};

/**
 * Reads `{"api_key", "api_secret"}` (a JSON object with two non-empty strings, else 400) and sets
 * `req.auth` from the key pair. A wrong pair, an unknown or a revoked key: the same 401
 * `invalid_credentials`, in the same time. Mount a JSON body parser before it. Synchronous from the
 * budget check to the comparison and its count.
 */
export function authenticateKeyPair(options: KeyPairOptions): RequestHandler {
  checkOptions('authenticateKeyPair()', options, KEY_PAIR_OPTION_CHECKS);
  const { authFailures, ...resolverOptions } = options;
  return authenticatingMiddleware(keyPairResolver(resolverOptions), authFailures);
}

export interface IssueTokenOptions {
  tokens: TokenService;
}

const ISSUE_TOKEN_OPTION_CHECKS: OptionChecks<IssueTokenOptions> = {
  tokens: required(TOKEN_SERVICE),
};

/** Answers `200 {"token", "token_type": "Bearer", "expires_in"}` for the key pair in `req.auth`. */
export function issueToken(options: IssueTokenOptions): RequestHandler {
  checkOptions('issueToken()', options, ISSUE_TOKEN_OPTION_CHECKS);
  const { tokens } = options;
  return function issueTokenHandler(req, res, next) {
    const auth = req.auth;
    if (auth === undefined) {
      next(new AuthenticationError('invalid_credentials'));
      return;
    }
    const issued = tokens.issue({ id: auth.keyId, accountId: auth.accountId, role: auth.role });
    res.set('Cache-Control', 'no-store');
    res.json({ token: issued.token, token_type: 'Bearer', expires_in: issued.expiresIn });
  };
}
