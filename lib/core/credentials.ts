import type { RequestFacts } from './facts';
import {
  authFailuresWith,
  checkOptions,
  isBoolean,
  isFunction,
  isNonEmptyString,
  KEY_STORE,
  listOf,
  type OptionChecks,
  required,
  TOKEN_SERVICE,
} from '../options';
import { containsSecretOrToken } from './credential-scan';
import { AuthenticationError, ConfigurationError, InvalidRequestError } from '../errors';
import { isPlausibleKey, keyPrefixType, keyShape } from '../model/key-format';
import { isExpired, type KeyRecord, type KeyStore } from '../model/key-record';
import { MAX_TOKEN_LENGTH, type TokenService } from '../tokens/tokens';
import type { AuthFailureLimiter } from '../rate-limit/auth-failures';
import { type AuthContext, CREDENTIAL_KINDS, type CredentialKind } from '../model/auth-context';

/**
 * Credential resolution: which credential a request carries, whether the route accepts that kind,
 * and whose key it is. Ambiguous requests (two Authorization headers, a Bearer credential and a
 * publishable key, a publishable key in both header and body) and oversized values are refused
 * before any lookup. Credentials are never read from the query string.
 */

export const DEFAULT_PUBLIC_KEY_HEADER = 'X-Service-Public-API-Key';

/** Something the operator should hear about, e.g. a secret key sent where anyone can read it. */
export interface SecurityEvent {
  readonly event: 'leaked_secret_key';
  readonly keyId: string;
  readonly accountId: string;
  readonly reason: 'sent_as_publishable_key' | 'sent_from_browser' | 'sent_in_query_string';
}

export interface AuthenticateOptions {
  /** Where keys are looked up. */
  keyStore: KeyStore;
  /** Which credentials the route accepts. */
  accept: readonly CredentialKind[];
  /** Verifies tokens; required when `accept` includes `'token'`. */
  tokens?: TokenService;
  /** Name of the publishable-key header. Defaults to `X-Service-Public-API-Key`. */
  publicKeyHeader?: string;
  /**
   * Refuse secret keys on requests that carry browser signals (`Origin`, `Sec-Fetch-*`): a secret
   * key in a browser can move money. Defaults to `true`.
   */
  refuseSecretKeysFromBrowsers?: boolean;
  /** Called for security events; a secret key is never passed, only its key id. */
  onSecurityEvent?: (event: SecurityEvent, req: RequestFacts) => void;
  /**
   * The failed-authentication budget (`createAuthFailureLimiter()`): the credential is compared
   * under it, so a spent budget refuses even the right credential. Defaults to none.
   */
  authFailures?: Pick<AuthFailureLimiter, 'queueAttempt'>;
}

/** The rule of each option of `credentialResolver()`. */
const RESOLVER_OPTION_CHECKS: OptionChecks<Omit<AuthenticateOptions, 'authFailures'>> = {
  keyStore: required(KEY_STORE),
  accept: required(listOf(CREDENTIAL_KINDS)),
  tokens: TOKEN_SERVICE,
  publicKeyHeader: isNonEmptyString,
  refuseSecretKeysFromBrowsers: isBoolean,
  onSecurityEvent: isFunction,
};

/** The rule of each option of `authenticate()`. */
export const AUTHENTICATE_OPTION_CHECKS: OptionChecks<AuthenticateOptions> = {
  ...RESOLVER_OPTION_CHECKS,
  authFailures: authFailuresWith('queueAttempt'),
};

const BEARER_PATTERN = /^bearer ([\x21-\x7e]+)$/i;
const TOKEN_PATTERN = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
/** An HTTP header name (RFC 9110 token). */
export const HEADER_NAME_PATTERN = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;
const KIND_NAMES: Record<CredentialKind, string> = {
  secret: 'a secret key',
  token: 'a token',
  publishable: 'a publishable key',
};

/** A credential as found in the request, before any lookup. */
export type PresentedCredential =
  { kind: 'secret' | 'token'; value: string } | { kind: 'publishable'; value: string };

/**
 * Finds the one credential a request carries. Pure apart from reading `req`; throws
 * `InvalidRequestError` for ambiguity and `AuthenticationError` for absence or a bad shape.
 */
export function presentedCredential(
  req: RequestFacts,
  publicKeyHeader: string,
): PresentedCredential {
  const authorization = singleHeader(req, 'authorization');
  const headerKey = singleHeader(req, publicKeyHeader);
  const bodyKey = bodyPublicKey(req.body);
  if (headerKey !== undefined && bodyKey !== undefined) {
    throw new InvalidRequestError(
      'Send the publishable key in the header or in the body, not both',
    );
  }
  const publishable = headerKey ?? bodyKey;
  if (authorization !== undefined && publishable !== undefined) {
    throw new InvalidRequestError('Send a Bearer credential or a publishable key, not both');
  }
  if (authorization !== undefined) {
    if (authorization.length > MAX_TOKEN_LENGTH) throw new AuthenticationError('invalid_api_key');
    const match = BEARER_PATTERN.exec(authorization);
    const value = match?.[1];
    if (value === undefined) throw new AuthenticationError('invalid_api_key');
    return { kind: TOKEN_PATTERN.test(value) ? 'token' : 'secret', value };
  }
  if (publishable !== undefined) return { kind: 'publishable', value: publishable };
  throw new AuthenticationError('missing_credentials');
}

/** True when the request carries a header only browsers send: `Origin` or any `Sec-Fetch-*`. */
export function hasBrowserSignals(req: Pick<RequestFacts, 'headersDistinct'>): boolean {
  return BROWSER_SIGNALS.some((name) => req.headersDistinct[name] !== undefined);
}

/**
 * Headers that browsers add and servers' HTTP clients do not. `Sec-Fetch-Mode` is left out on
 * purpose: Node's own `fetch` (undici) sends `Sec-Fetch-Mode: cors` on every request.
 */
const BROWSER_SIGNALS = ['origin', 'sec-fetch-site', 'sec-fetch-dest', 'sec-fetch-user'] as const;

function singleHeader(req: RequestFacts, name: string): string | undefined {
  const values = req.headersDistinct[name.toLowerCase()];
  if (values === undefined || values.length === 0) return undefined;
  if (values.length > 1) throw new InvalidRequestError(`Send the ${name} header once`);
  return values[0];
}

function bodyPublicKey(body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null || !Object.hasOwn(body, 'public_key')) {
    return undefined;
  }
  const value = (body as { public_key: unknown }).public_key;
  if (typeof value !== 'string') throw new InvalidRequestError('public_key must be a string');
  return value;
}

/**
 * The credential check of `authenticate()` without Express or the failure budget: finds the
 * request's one credential, checks that the route accepts its kind, and resolves it to the key's
 * identity, or throws the `TollgateError` its refusal is answered with. Options are validated
 * once, here.
 */
export function credentialResolver(
  options: Omit<AuthenticateOptions, 'authFailures'>,
): (req: RequestFacts) => AuthContext {
  checkOptions('credentialResolver()', options, RESOLVER_OPTION_CHECKS);
  const config = resolveOptions(options);
  return (req) => resolveCredential(req, config);
}

function resolveCredential(req: RequestFacts, config: ResolvedOptions): AuthContext {
  const credential = presentedCredential(req, config.publicKeyHeader);
  // A token-shaped value may still be a dotted secret key: a secret-key route looks it up.
  const acceptable =
    config.accept.has(credential.kind) ||
    (credential.kind === 'token' && config.accept.has('secret'));
  if (!acceptable) {
    if (credential.kind === 'publishable') reportLeakedSecretKey(credential.value, req, config);
    throw new AuthenticationError('credential_not_allowed', config.acceptedMessage);
  }
  switch (credential.kind) {
    case 'secret':
      return authenticateSecretKey(credential.value, req, config);
    case 'token':
      return authenticateTokenOrKey(credential.value, req, config);
    case 'publishable':
      return authenticatePublishableKey(credential.value, req, config);
  }
}

type ResolvedOptions = Omit<Required<AuthenticateOptions>, 'accept' | 'tokens' | 'authFailures'> & {
  accept: ReadonlySet<CredentialKind>;
  acceptedMessage: string;
  tokens: TokenService | undefined;
};

function resolveOptions(options: Omit<AuthenticateOptions, 'authFailures'>): ResolvedOptions {
  const accept = new Set(options.accept);
  if (accept.size === 0) {
    throw new ConfigurationError(
      `authenticate(): accept must list one or more of ${CREDENTIAL_KINDS.join(', ')}`,
    );
  }
  if (accept.has('token') && options.tokens === undefined) {
    throw new ConfigurationError(
      "authenticate(): accept includes 'token' but no tokens service was given",
    );
  }
  const publicKeyHeader = options.publicKeyHeader ?? DEFAULT_PUBLIC_KEY_HEADER;
  if (
    !HEADER_NAME_PATTERN.test(publicKeyHeader) ||
    publicKeyHeader.toLowerCase() === 'authorization'
  ) {
    throw new ConfigurationError(
      `authenticate(): invalid publicKeyHeader ${JSON.stringify(publicKeyHeader)}`,
    );
  }
  return {
    keyStore: options.keyStore,
    accept,
    acceptedMessage: `This route accepts ${[...accept].map((kind) => KIND_NAMES[kind]).join(' or ')}`,
    tokens: options.tokens,
    publicKeyHeader,
    refuseSecretKeysFromBrowsers: options.refuseSecretKeysFromBrowsers ?? true,
    onSecurityEvent: options.onSecurityEvent ?? (() => undefined),
  };
}

function authenticateSecretKey(
  secret: string,
  req: RequestFacts,
  config: ResolvedOptions,
): AuthContext {
  if (!isPlausibleKey(secret) || keyPrefixType(secret) === 'publishable') {
    throw new AuthenticationError('invalid_api_key');
  }
  const key = usable(config.keyStore.findBySecretKey(secret));
  if (key === undefined) throw new AuthenticationError('invalid_api_key');
  if (config.refuseSecretKeysFromBrowsers && hasBrowserSignals(req)) {
    config.onSecurityEvent(leaked(key, 'sent_from_browser'), req);
    throw new AuthenticationError(
      'credential_not_allowed',
      'Secret keys must never be used from a browser; use a publishable key or a token from your server',
    );
  }
  return contextOf(unexpired(key), 'secret');
}

/**
 * A Bearer value of the token shape is a token, unless it fails as one and is the secret key of
 * another tool that happens to contain two dots (any key whose digest is in the key store
 * authenticates, whatever its shape, so keys made by other tools keep working). Only then is it
 * looked up as a secret key.
 */
function authenticateTokenOrKey(
  value: string,
  req: RequestFacts,
  config: ResolvedOptions,
): AuthContext {
  if (!config.accept.has('token')) {
    if (usable(config.keyStore.findBySecretKey(value)) !== undefined) {
      return authenticateSecretKey(value, req, config);
    }
    // A guess of the token shape is a wrong credential like any other (counted against the
    // failed-authentication budget);
    // only a real token is told that this route does not take tokens.
    if (config.tokens === undefined) throw new AuthenticationError('invalid_api_key');
    config.tokens.verify(value);
    throw new AuthenticationError('credential_not_allowed', config.acceptedMessage);
  }
  try {
    return authenticateToken(value, config);
  } catch (error) {
    const mayBeKey =
      error instanceof AuthenticationError &&
      error.code === 'invalid_token' &&
      config.accept.has('secret') &&
      keyShape(value) === 'opaque';
    if (!mayBeKey || usable(config.keyStore.findBySecretKey(value)) === undefined) throw error;
    return authenticateSecretKey(value, req, config);
  }
}

function authenticateToken(token: string, config: ResolvedOptions): AuthContext {
  if (config.tokens === undefined) throw new AuthenticationError('invalid_token');
  const claims = config.tokens.verify(token);
  const key = usable(config.keyStore.findById(claims.keyId));
  // A token dies with its key: revoked, expired or moved to another account.
  if (key?.accountId !== claims.accountId || isExpired(key, Date.now())) {
    throw new AuthenticationError('invalid_token');
  }
  return { ...contextOf(key, 'token'), tokenId: claims.tokenId };
}

function authenticatePublishableKey(
  value: string,
  req: RequestFacts,
  config: ResolvedOptions,
): AuthContext {
  if (!isPlausibleKey(value)) throw new AuthenticationError('invalid_api_key');
  const key =
    keyPrefixType(value) === 'secret'
      ? undefined
      : usable(config.keyStore.findByPublishableKey(value));
  if (key !== undefined) return contextOf(unexpired(key), 'publishable');
  // A secret key sent where publishable keys go never authenticates, and is reported as leaked.
  reportLeakedSecretKey(value, req, config);
  throw new AuthenticationError('invalid_api_key');
}

/** Reports `value` as a leaked secret key when it is one (sent as a publishable key). */
function reportLeakedSecretKey(value: string, req: RequestFacts, config: ResolvedOptions): void {
  if (!isPlausibleKey(value)) return;
  const leakedKey = config.keyStore.findBySecretKey(value);
  if (leakedKey !== undefined)
    config.onSecurityEvent(leaked(leakedKey, 'sent_as_publishable_key'), req);
}

function usable(key: KeyRecord | undefined): KeyRecord | undefined {
  return key === undefined || key.revoked ? undefined : key;
}

/** `key`, or `401 expired_api_key` once it is past its `expiresAt`. */
export function unexpired(key: KeyRecord): KeyRecord {
  if (isExpired(key, Date.now())) throw new AuthenticationError('expired_api_key');
  return key;
}

export function contextOf(key: KeyRecord, credential: CredentialKind): AuthContext {
  return {
    accountId: key.accountId,
    keyId: key.id,
    role: key.role,
    credential,
    ipWhitelist: key.ipWhitelist,
    limits: key.limits,
    permissions: key.permissions,
  };
}

export function leaked(key: KeyRecord, reason: SecurityEvent['reason']): SecurityEvent {
  return { event: 'leaked_secret_key', keyId: key.id, accountId: key.accountId, reason };
}

/**
 * Query parameters that carry credentials in other APIs (compared lower-case, `-` as `_`, without
 * an `[…]` suffix). None is ever read: a request naming one is refused, so the credential is not
 * forwarded upstream either, where URLs end up in access logs.
 */
export const QUERY_CREDENTIAL_PARAMS: ReadonlySet<string> = new Set([
  'api_key',
  'apikey',
  'api_secret',
  'secret',
  'secret_key',
  'token',
  'access_token',
  'public_key',
  'authorization',
]);

/**
 * Throws `400 invalid_request` when the request's query string carries a credential (a parameter
 * of `QUERY_CREDENTIAL_PARAMS`, or any value shaped like a secret key or a token), after reporting
 * each refused value that is a known secret key as leaked.
 */
export function refuseCredentialsInQuery(
  req: RequestFacts,
  keyStore: KeyStore | undefined,
  onSecurityEvent: ((event: SecurityEvent, req: RequestFacts) => void) | undefined,
): void {
  const url = req.originalUrl;
  // An app that refuses query credentials before its routes has cleared this URL already.
  if (!url.includes('?') || clearedUrls.get(req) === url) return;
  const refused = credentialsInQuery(url);
  if (refused.length === 0) {
    clearedUrls.set(req, url);
    return;
  }
  if (keyStore !== undefined && onSecurityEvent !== undefined) {
    for (const value of refused) {
      const key = isPlausibleKey(value) ? keyStore.findBySecretKey(value) : undefined;
      if (key !== undefined) onSecurityEvent(leaked(key, 'sent_in_query_string'), req);
    }
  }
  throw new InvalidRequestError(
    'Credentials are never accepted in the query string; send them in the Authorization header',
  );
}

/** Each request's URL found free of credentials, so a second check of the same URL is not a second scan. */
const clearedUrls = new WeakMap<RequestFacts, string>();

/** The values of the credential-carrying parameters of `url`'s query string. */
export function credentialsInQuery(url: string): string[] {
  const start = url.indexOf('?');
  if (start === -1) return [];
  const refused: string[] = [];
  // `;` separates parameters for some upstream frameworks: read it as `&` so none hides behind it.
  for (const [name, value] of new URLSearchParams(url.slice(start + 1).replaceAll(';', '&'))) {
    const normalised = withoutBracketSuffix(name.trim().toLowerCase()).replaceAll('-', '_');
    if (QUERY_CREDENTIAL_PARAMS.has(normalised) || containsSecretOrToken(value))
      refused.push(value);
  }
  return refused;
}

/** `name` without an `[…]` suffix (`api_key[0]` is `api_key`), found in one scan. */
function withoutBracketSuffix(name: string): string {
  const bracket = name.indexOf('[');
  return bracket === -1 ? name : name.slice(0, bracket);
}
