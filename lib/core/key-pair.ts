import {
  checkOptions,
  isBoolean,
  isFunction,
  KEY_STORE,
  type OptionChecks,
  required,
} from '../options';
import { AuthenticationError, InvalidRequestError } from '../errors';
import { isPlausibleKey } from '../model/key-format';
import type { KeyStore } from '../model/key-record';
import type { AuthContext } from '../model/auth-context';
import { contextOf, unexpired, hasBrowserSignals, leaked, type SecurityEvent } from './credentials';
import type { RequestFacts } from './facts';

/**
 * The key pair of the token exchange (`{"api_key", "api_secret"}` in a JSON body), resolved to the
 * key's identity. A wrong pair, an unknown or a revoked key: the same 401 `invalid_credentials`,
 * in the same time.
 */

export interface KeyPairResolverOptions {
  keyStore: KeyStore;
  /**
   * Refuse the exchange when the request carries browser signals (`Origin`, `Sec-Fetch-*`): the
   * secret key is in a browser, where it can move money. Defaults to `true`.
   */
  refuseSecretKeysFromBrowsers?: boolean | undefined;
  /** Called for security events (a secret key seen in a browser); receives the key id only. */
  onSecurityEvent?: ((event: SecurityEvent, req: RequestFacts) => void) | undefined;
}

/** The rule of each option of `keyPairResolver()`. */
export const KEY_PAIR_RESOLVER_CHECKS: OptionChecks<KeyPairResolverOptions> = {
  keyStore: required(KEY_STORE),
  refuseSecretKeysFromBrowsers: isBoolean,
  onSecurityEvent: isFunction,
};

/**
 * The key-pair check of `authenticateKeyPair()` without Express or the failure budget: reads the
 * pair from the parsed body and resolves it to the key's identity, or throws the `TollgateError`
 * its refusal is answered with.
 */
export function keyPairResolver(
  options: KeyPairResolverOptions,
): (req: RequestFacts) => AuthContext {
  checkOptions('keyPairResolver()', options, KEY_PAIR_RESOLVER_CHECKS);
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
    return contextOf(unexpired(key), 'secret');
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
