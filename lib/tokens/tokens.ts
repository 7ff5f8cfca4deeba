import { createSecretKey, type KeyObject, randomUUID } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { AuthenticationError, ConfigurationError } from '../errors';
import {
  check,
  checkOptions,
  isFunction,
  type OptionChecks,
  required,
  wholeNumber,
} from '../options';
import type { KeyRecord } from '../model/key-record';
import { isRole, type Role } from '../model/roles';

/**
 * Short-lived access tokens: HS256 JWTs minted from a key pair. `verify()` is the one place a token
 * is checked, and closes what jsonwebtoken leaves open: the algorithm is pinned, `exp`/`iat` must be
 * numbers, `iat` may not lie in the future, the lifetime may not exceed the configured TTL, the
 * payload must be an object of the expected shape, and the error never echoes a library message.
 */

export const DEFAULT_TOKEN_TTL_SECONDS = 1800;
export const MIN_TOKEN_SECRET_BYTES = 32;
/** Longer `Authorization` values are refused before any parsing. */
export const MAX_TOKEN_LENGTH = 2048;

const ISSUER = 'tollgate';
const ALGORITHM = 'HS256';
const MAX_TTL_SECONDS = 24 * 60 * 60;
/** Verified tokens remembered by default (see `verifiedTokenCacheSize`). */
export const DEFAULT_VERIFIED_TOKEN_CACHE_SIZE = 10_000;
const MAX_VERIFIED_TOKEN_CACHE_SIZE = 1_000_000;

export interface TokenServiceOptions {
  /** The HMAC secret, at least 32 bytes. */
  secret: string | Buffer;
  /** Token lifetime in seconds. Defaults to 1800 (30 minutes). */
  ttlSeconds?: number;
  /** Allowed clock skew in seconds for `iat`/`nbf`/`exp`. Defaults to 0. */
  clockToleranceSeconds?: number;
  /** The current time in milliseconds. Defaults to `Date.now`; tests freeze it. */
  now?: () => number;
  /**
   * How many verified tokens to remember, by their exact text, so that the next presentation of
   * the same token skips the signature check (its times are still checked against `now`, and the
   * caller still looks its key up). The oldest is forgotten first. Defaults to 10 000; 0 turns
   * the cache off.
   */
  verifiedTokenCacheSize?: number;
}

/** What a verified token says. Authorisation uses the key record, never the token's `role`. */
export interface TokenClaims {
  readonly keyId: string;
  readonly accountId: string;
  readonly role: Role;
  readonly tokenId: string;
  readonly issuedAt: number;
  readonly expiresAt: number;
}

export interface IssuedToken {
  readonly token: string;
  readonly expiresIn: number;
  readonly tokenId: string;
}

/** A token that passed every check, with the times to check again on each presentation. */
interface VerifiedToken {
  readonly claims: TokenClaims;
  /** `nbf` when the payload has one (tokens minted here have none). */
  readonly notBefore: number | undefined;
}

interface TokenPayload {
  sub: string;
  acct: string;
  role: Role;
  jti: string;
  iat: number;
  exp: number;
  iss: string;
}

const TOKEN_SERVICE_OPTION_CHECKS: OptionChecks<TokenServiceOptions> = {
  secret: required(
    check(
      `a string or Buffer of at least ${MIN_TOKEN_SECRET_BYTES} bytes`,
      (value) => typeof value === 'string' || Buffer.isBuffer(value),
    ),
  ),
  ttlSeconds: wholeNumber(1, MAX_TTL_SECONDS),
  clockToleranceSeconds: wholeNumber(0, 300),
  now: isFunction,
  verifiedTokenCacheSize: wholeNumber(0, MAX_VERIFIED_TOKEN_CACHE_SIZE),
};

export class TokenService {
  readonly ttlSeconds: number;
  private readonly secret: KeyObject;
  private readonly clockTolerance: number;
  private readonly now: () => number;
  /** Verified tokens by exact text, oldest first; failures are never remembered. */
  private readonly verified = new Map<string, VerifiedToken>();
  private readonly verifiedCapacity: number;

  constructor(options: TokenServiceOptions) {
    checkOptions('TokenService', options, TOKEN_SERVICE_OPTION_CHECKS);
    const secret = Buffer.isBuffer(options.secret)
      ? Buffer.from(options.secret)
      : Buffer.from(options.secret, 'utf8');
    if (secret.length < MIN_TOKEN_SECRET_BYTES) {
      throw new ConfigurationError(
        `TokenService: the token secret must be at least ${MIN_TOKEN_SECRET_BYTES} bytes`,
      );
    }
    const ttl = options.ttlSeconds ?? DEFAULT_TOKEN_TTL_SECONDS;
    const tolerance = options.clockToleranceSeconds ?? 0;
    // A KeyObject, not the raw bytes: given bytes, jsonwebtoken first tries (and fails) to parse
    // them as a PEM/DER public or private key on every call, a CPU cost on every token.
    this.secret = createSecretKey(secret);
    this.ttlSeconds = ttl;
    this.clockTolerance = tolerance;
    this.now = options.now ?? Date.now;
    const capacity = options.verifiedTokenCacheSize ?? DEFAULT_VERIFIED_TOKEN_CACHE_SIZE;
    this.verifiedCapacity = capacity;
  }

  issue(key: Pick<KeyRecord, 'id' | 'accountId' | 'role'>): IssuedToken {
    const iat = Math.floor(this.now() / 1000);
    const tokenId = randomUUID();
    const payload: TokenPayload = {
      sub: key.id,
      acct: key.accountId,
      role: key.role,
      jti: tokenId,
      iat,
      exp: iat + this.ttlSeconds,
      iss: ISSUER,
    };
    const token = jwt.sign(payload, this.secret, { algorithm: ALGORITHM });
    return { token, expiresIn: this.ttlSeconds, tokenId };
  }

  /**
   * Throws `AuthenticationError` `expired_token` after `exp`, `invalid_token` for anything else.
   *
   * A token verified before (the same text, so the same signature, header and payload) is answered
   * from memory: everything that does not depend on the time was checked then, and what does
   * (`exp`, `iat`, `nbf`) is checked again now, in jsonwebtoken's order, so the answer is the one a
   * full verification would give. Whether its key still exists, is revoked or changed role is the
   * caller's to look up on every request, as before.
   */
  verify(token: string): TokenClaims {
    if (token.length > MAX_TOKEN_LENGTH) throw invalidToken();
    const nowSeconds = Math.floor(this.now() / 1000);
    const known = this.verified.get(token);
    if (known !== undefined) return this.stillValid(token, known, nowSeconds);
    let decoded: jwt.Jwt;
    try {
      decoded = jwt.verify(token, this.secret, {
        algorithms: [ALGORITHM],
        issuer: ISSUER,
        clockTimestamp: nowSeconds,
        clockTolerance: this.clockTolerance,
        complete: true,
      });
    } catch (error) {
      // TokenExpiredError extends JsonWebTokenError: test it first. It is only thrown once the
      // signature has been checked, so a forged token never reads as merely expired; and it is
      // thrown before the issuer or the payload are looked at, so only a token this service could
      // have minted reads as expired (a malformed one, however signed, is invalid).
      if (
        error instanceof jwt.TokenExpiredError &&
        this.claimsOf(jwt.decode(token, { complete: true }), nowSeconds) !== undefined
      ) {
        throw new AuthenticationError('expired_token');
      }
      throw invalidToken();
    }
    const claims = this.claimsOf(decoded, nowSeconds);
    if (claims === undefined) throw invalidToken();
    this.remember(token, claims, decoded.payload);
    return claims;
  }

  /** How many verified tokens are remembered now (at most `verifiedTokenCacheSize`), for tests. */
  cachedTokenCount(): number {
    return this.verified.size;
  }

  /** The time checks of `jwt.verify` and `claimsOf`, for a token that passed all the others. */
  private stillValid(token: string, known: VerifiedToken, nowSeconds: number): TokenClaims {
    const latest = nowSeconds + this.clockTolerance;
    // jsonwebtoken refuses a future `nbf` before it looks at `exp`; an `iat` in the future makes
    // the token invalid whether or not it has expired (claimsOf, on both paths of verify()).
    if (
      (known.notBefore !== undefined && known.notBefore > latest) ||
      known.claims.issuedAt > latest
    ) {
      throw invalidToken();
    }
    if (nowSeconds >= known.claims.expiresAt + this.clockTolerance) {
      this.verified.delete(token);
      throw new AuthenticationError('expired_token');
    }
    return known.claims;
  }

  private remember(token: string, claims: TokenClaims, payload: jwt.JwtPayload | string): void {
    if (this.verifiedCapacity === 0) return;
    if (this.verified.size >= this.verifiedCapacity) {
      const oldest = this.verified.keys().next();
      if (oldest.done !== true) this.verified.delete(oldest.value);
    }
    const nbf = typeof payload === 'object' ? (payload.nbf as unknown) : undefined;
    this.verified.set(token, {
      claims: Object.freeze(claims),
      notBefore: typeof nbf === 'number' ? nbf : undefined,
    });
  }

  /** The claims of a decoded token, when it has the shape this service mints; expiry is not checked. */
  private claimsOf(decoded: jwt.Jwt | null, nowSeconds: number): TokenClaims | undefined {
    if (decoded === null || !isPlainHeader(decoded.header)) return undefined;
    if (typeof decoded.payload !== 'object' || decoded.payload.iss !== ISSUER) return undefined;
    const claims = readPayload(decoded.payload);
    if (claims === undefined) return undefined;
    const lifetime = claims.expiresAt - claims.issuedAt;
    if (
      claims.issuedAt > nowSeconds + this.clockTolerance ||
      lifetime <= 0 ||
      lifetime > this.ttlSeconds
    ) {
      return undefined;
    }
    return claims;
  }
}

/**
 * The JOSE header this service mints: `alg` and, optionally, `typ: "JWT"`, nothing else.
 * `crit`, `b64`, `kid`, `jku`, `x5u` and the like ask a verifier for behaviour it may not
 * have; a token carrying one was not minted here.
 */
function isPlainHeader(header: jwt.JwtHeader): boolean {
  for (const name of Object.keys(header)) {
    if (name !== 'alg' && name !== 'typ') return false;
  }
  return header.typ === undefined || header.typ === 'JWT';
}

function invalidToken(): AuthenticationError {
  return new AuthenticationError('invalid_token');
}

function readPayload(payload: jwt.JwtPayload | string): TokenClaims | undefined {
  if (typeof payload !== 'object' || Array.isArray(payload)) return undefined;
  const { sub, acct, role, jti, iat, exp } = payload as Partial<
    Record<keyof TokenPayload, unknown>
  >;
  if (
    typeof sub !== 'string' ||
    typeof acct !== 'string' ||
    typeof jti !== 'string' ||
    !isRole(role) ||
    !Number.isSafeInteger(iat) ||
    !Number.isSafeInteger(exp)
  ) {
    return undefined;
  }
  return {
    keyId: sub,
    accountId: acct,
    role,
    tokenId: jti,
    issuedAt: iat as number,
    expiresAt: exp as number,
  };
}
