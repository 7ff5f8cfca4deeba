import type { RequestHandler } from 'express';
import type { RequestFacts } from './core/facts';
import { contextOf, hasBrowserSignals, leaked, type SecurityEvent } from './credentials';
import { AuthenticationError, ConfigurationError, InvalidRequestError } from './errors';
import { isPlausibleKey } from './key-format';
import type { KeyStore } from './key-store';
import type { AuthFailureLimiter } from './rate-limit/auth-failures';
import type { TokenService } from './tokens';
import type { AuthContext } from './types';

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

/**
 * The key-pair check of `authenticateKeyPair()` without Express or the failure budget: reads the
 * pair from the parsed body and resolves it to the key's identity, or throws the contract's error.
 */
export function keyPairResolver(
  options: Omit<KeyPairOptions, 'authFailures'>,
): (req: RequestFacts) => AuthContext {
  if (typeof options.keyStore !== 'object') {
    throw new ConfigurationError('authenticateKeyPair(): keyStore is required');
  }
  const { keyStore } = options;
  const refuseFromBrowsers = options.refuseSecretKeysFromBrowsers ?? true;
  const onSecurityEvent = options.onSecurityEvent ?? (() => undefined);
  return (req) => {
    const { apiKey, apiSecret } = readKeyPair(req.body);
    if (req.headersDistinct.authorization !== undefined) {
      throw new InvalidRequestError(
        'Send the key pair in the body only, without an Authorization header',
      );
    }
    // A value that cannot be a key (wrong length or characters, a typed key with a wrong checksum)
    // is refused before any lookup.
    const key =
      isPlausibleKey(apiKey) && isPlausibleKey(apiSecret)
        ? keyStore.findByKeyPair(apiKey, apiSecret)
        : undefined;
    if (key === undefined || key.revoked) throw new AuthenticationError('invalid_credentials');
    if (refuseFromBrowsers && hasBrowserSignals(req)) {
      onSecurityEvent(leaked(key, 'sent_from_browser'), req);
      throw new AuthenticationError(
        'credential_not_allowed',
        'Secret keys must never be used from a browser; exchange them for a token on your server',
      );
    }
    return contextOf(key, 'secret');
  };
}

/**
 * Reads `{"api_key", "api_secret"}` (a JSON object with two non-empty strings, else 400) and sets
 * `req.auth` from the key pair. A wrong pair, an unknown or a revoked key: the same 401
 * `invalid_credentials`, in the same time. Mount a JSON body parser before it. Synchronous from the
 * budget check to the comparison and its count.
 */
export function authenticateKeyPair(options: KeyPairOptions): RequestHandler {
  const compare = keyPairResolver(options);
  const { authFailures } = options;
  return function authenticateKeyPairMiddleware(req, _res, next) {
    if (authFailures !== undefined) {
      authFailures.queueAttempt(
        req,
        () => compare(req),
        (error, auth) => {
          if (auth !== undefined) req.auth = auth;
          next(error);
        },
      );
      return;
    }
    try {
      req.auth = compare(req);
    } catch (error) {
      next(error);
      return;
    }
    next();
  };
}

function readKeyPair(body: unknown): { apiKey: string; apiSecret: string } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new InvalidRequestError('The body must be a JSON object with api_key and api_secret');
  }
  const apiKey = Object.hasOwn(body, 'api_key')
    ? (body as { api_key: unknown }).api_key
    : undefined;
  const apiSecret = Object.hasOwn(body, 'api_secret')
    ? (body as { api_secret: unknown }).api_secret
    : undefined;
  if (typeof apiKey !== 'string' || apiKey.length === 0) {
    throw new InvalidRequestError('api_key must be a non-empty string');
  }
  if (typeof apiSecret !== 'string' || apiSecret.length === 0) {
    throw new InvalidRequestError('api_secret must be a non-empty string');
  }
  return { apiKey, apiSecret };
}

export interface IssueTokenOptions {
  tokens: TokenService;
}

/** Answers `200 {"token", "token_type": "Bearer", "expires_in"}` for the key pair in `req.auth`. */
export function issueToken(options: IssueTokenOptions): RequestHandler {
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
