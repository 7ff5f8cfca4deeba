import type { Request, RequestHandler } from 'express';
import { AuthenticationError, ConfigurationError, InvalidRequestError } from './errors';
import { keyPrefixType, keyShape } from './key-format';
import type { KeyRecord, KeyStore } from './key-store';
import { MAX_TOKEN_LENGTH, type TokenService } from './tokens';
import { type AuthContext, CREDENTIAL_KINDS, type CredentialKind } from './types';

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
  readonly reason: 'sent_as_publishable_key' | 'sent_from_browser';
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
  onSecurityEvent?: (event: SecurityEvent, req: Request) => void;
}

const BEARER_PATTERN = /^bearer ([\x21-\x7e]+)$/i;
const TOKEN_PATTERN = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
const HEADER_NAME_PATTERN = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;
const BROWSER_HEADERS = ['origin', 'sec-fetch-mode', 'sec-fetch-site', 'sec-fetch-dest'] as const;
const KIND_NAMES: Record<CredentialKind, string> = {
  secret: 'a secret key',
  token: 'a token',
  publishable: 'a publishable key',
};

/** A credential as found in the request, before any lookup. */
export type PresentedCredential =
  | { kind: 'secret' | 'token'; value: string }
  | { kind: 'publishable'; value: string };

/**
 * Finds the one credential a request carries. Pure apart from reading `req`; throws
 * `InvalidRequestError` for ambiguity and `AuthenticationError` for absence or a bad shape.
 */
export function presentedCredential(req: Request, publicKeyHeader: string): PresentedCredential {
  const authorization = singleHeader(req, 'authorization');
  const headerKey = singleHeader(req, publicKeyHeader);
  const bodyKey = bodyPublicKey(req.body);
  if (headerKey !== undefined && bodyKey !== undefined) {
    throw new InvalidRequestError('Send the publishable key in the header or in the body, not both');
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

function singleHeader(req: Request, name: string): string | undefined {
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
 * Authenticates the request with one of the credentials the route accepts and sets `req.auth`.
 * Failures go to `next(err)` as `AuthenticationError` (401) or `InvalidRequestError` (400).
 */
export function authenticate(options: AuthenticateOptions): RequestHandler {
  const config = resolveOptions(options);
  return async function authenticateMiddleware(req, _res, next) {
    const credential = presentedCredential(req, config.publicKeyHeader);
    if (!config.accept.has(credential.kind)) {
      throw new AuthenticationError('credential_not_allowed', config.acceptedMessage);
    }
    switch (credential.kind) {
      case 'secret':
        req.auth = await authenticateSecretKey(credential.value, req, config);
        break;
      case 'token':
        req.auth = await authenticateToken(credential.value, config);
        break;
      case 'publishable':
        req.auth = await authenticatePublishableKey(credential.value, req, config);
        break;
    }
    next();
  };
}

type ResolvedOptions = Omit<Required<AuthenticateOptions>, 'accept' | 'tokens'> & {
  accept: ReadonlySet<CredentialKind>;
  acceptedMessage: string;
  tokens: TokenService | undefined;
};

function resolveOptions(options: AuthenticateOptions): ResolvedOptions {
  const accept = new Set(options.accept);
  if (accept.size === 0 || [...accept].some((kind) => !CREDENTIAL_KINDS.includes(kind))) {
    throw new ConfigurationError(
      `authenticate(): accept must list one or more of ${CREDENTIAL_KINDS.join(', ')}`,
    );
  }
  if (accept.has('token') && options.tokens === undefined) {
    throw new ConfigurationError("authenticate(): accept includes 'token' but no tokens service was given");
  }
  const publicKeyHeader = options.publicKeyHeader ?? DEFAULT_PUBLIC_KEY_HEADER;
  if (!HEADER_NAME_PATTERN.test(publicKeyHeader) || publicKeyHeader.toLowerCase() === 'authorization') {
    throw new ConfigurationError(`authenticate(): invalid publicKeyHeader ${JSON.stringify(publicKeyHeader)}`);
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

async function authenticateSecretKey(
  secret: string,
  req: Request,
  config: ResolvedOptions,
): Promise<AuthContext> {
  const shape = keyShape(secret);
  if (shape === 'malformed' || shape === 'corrupt' || keyPrefixType(secret) === 'publishable') {
    throw new AuthenticationError('invalid_api_key');
  }
  const key = usable(await config.keyStore.findBySecretKey(secret));
  if (key === undefined) throw new AuthenticationError('invalid_api_key');
  if (config.refuseSecretKeysFromBrowsers && BROWSER_HEADERS.some((name) => name in req.headers)) {
    config.onSecurityEvent(leaked(key, 'sent_from_browser'), req);
    throw new AuthenticationError(
      'credential_not_allowed',
      'Secret keys must never be used from a browser; use a publishable key or a token from your server',
    );
  }
  return contextOf(key, 'secret');
}

async function authenticateToken(token: string, config: ResolvedOptions): Promise<AuthContext> {
  if (config.tokens === undefined) throw new AuthenticationError('invalid_token');
  const claims = config.tokens.verify(token);
  const key = usable(await config.keyStore.findById(claims.keyId));
  if (key === undefined || key.accountId !== claims.accountId) {
    throw new AuthenticationError('invalid_token');
  }
  return { ...contextOf(key, 'token'), tokenId: claims.tokenId };
}

async function authenticatePublishableKey(
  value: string,
  req: Request,
  config: ResolvedOptions,
): Promise<AuthContext> {
  const shape = keyShape(value);
  if (shape === 'malformed' || shape === 'corrupt') throw new AuthenticationError('invalid_api_key');
  const key = keyPrefixType(value) === 'secret' ? undefined : usable(await config.keyStore.findByPublishableKey(value));
  if (key !== undefined) return contextOf(key, 'publishable');
  // A secret key sent where publishable keys go never authenticates, and is reported as leaked.
  const leakedKey = await config.keyStore.findBySecretKey(value);
  if (leakedKey !== undefined) config.onSecurityEvent(leaked(leakedKey, 'sent_as_publishable_key'), req);
  throw new AuthenticationError('invalid_api_key');
}

function usable(key: KeyRecord | undefined): KeyRecord | undefined {
  return key === undefined || key.revoked ? undefined : key;
}

export function contextOf(key: KeyRecord, credential: CredentialKind): AuthContext {
  return {
    accountId: key.accountId,
    keyId: key.id,
    role: key.role,
    credential,
    ipWhitelist: key.ipWhitelist,
  };
}

function leaked(key: KeyRecord, reason: SecurityEvent['reason']): SecurityEvent {
  return { event: 'leaked_secret_key', keyId: key.id, accountId: key.accountId, reason };
}
