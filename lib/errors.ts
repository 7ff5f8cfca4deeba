/**
 * Every failure the kit reports is a `TollgateError`: an HTTP status, a stable machine-readable
 * `code` and a message that is safe to show to the client. The error handler (`error-handler.ts`)
 * is the only place that turns one into a response.
 */

export const ERROR_CODES = [
  'invalid_request',
  'missing_credentials',
  'invalid_api_key',
  'invalid_credentials',
  'invalid_token',
  'expired_token',
  'expired_api_key',
  'credential_not_allowed',
  'insufficient_role',
  'insufficient_permission',
  'ip_not_whitelisted',
  'forbidden_origin',
  'not_found',
  'method_not_allowed',
  'conflict',
  'idempotency_key_invalid',
  'idempotency_key_required',
  'idempotency_key_in_use',
  'idempotency_key_reused',
  'idempotency_unavailable',
  'payload_too_large',
  'unsupported_media_type',
  'headers_too_large',
  'rate_limited',
  'upstream_unavailable',
  'upstream_timeout',
  'not_ready',
  'internal_error',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export class TollgateError extends Error {
  override readonly name: string = 'TollgateError';

  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    /** Extra response headers (`Allow`, `Retry-After`, `WWW-Authenticate`). */
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }
}

/** The JSON body of every error: `{"status", "code", "message", "request_id"}`. */
export function errorBody(
  error: TollgateError,
  requestId: string | undefined,
): { status: number; code: ErrorCode; message: string; request_id: string | null; scope?: string } {
  const body = {
    status: error.status,
    code: error.code,
    message: error.message,
    request_id: requestId ?? null,
  };
  // A 429 names the limit that refused, so a client knows which budget it spent.
  return error instanceof RateLimitedError && error.scope !== undefined
    ? { ...body, scope: error.scope }
    : body;
}

export class InvalidRequestError extends TollgateError {
  override readonly name = 'InvalidRequestError';
  constructor(message: string) {
    super(400, 'invalid_request', message);
  }
}

const AUTHENTICATION_MESSAGES = {
  missing_credentials: 'Authentication required',
  invalid_api_key: 'Invalid API key',
  invalid_credentials: 'Invalid API key or secret',
  invalid_token: 'Invalid token',
  expired_token: 'Expired token',
  expired_api_key: 'Expired API key',
  credential_not_allowed: 'This credential is not accepted on this route',
} as const;

/** A 401. `code` says which: missing, wrong API key, wrong pair, bad or expired token, wrong kind. */
export class AuthenticationError extends TollgateError {
  override readonly name = 'AuthenticationError';
  constructor(
    code:
      | 'missing_credentials'
      | 'invalid_api_key'
      | 'invalid_credentials'
      | 'invalid_token'
      | 'expired_token'
      | 'expired_api_key'
      | 'credential_not_allowed',
    message: string = AUTHENTICATION_MESSAGES[code],
  ) {
    super(401, code, message, { 'WWW-Authenticate': 'Bearer' });
  }
}

export class IpNotWhitelistedError extends TollgateError {
  override readonly name = 'IpNotWhitelistedError';
  constructor() {
    super(403, 'ip_not_whitelisted', 'Access denied: IP not whitelisted.');
  }
}

export class InsufficientRoleError extends TollgateError {
  override readonly name = 'InsufficientRoleError';
  constructor(required: string) {
    super(403, 'insufficient_role', `This action requires the role ${required} or higher`);
  }
}

/** A restricted key without the route's permission. */
export class InsufficientPermissionError extends TollgateError {
  override readonly name = 'InsufficientPermissionError';
  constructor(required: string) {
    super(403, 'insufficient_permission', `This action requires the permission ${required}`);
  }
}

export class NotFoundError extends TollgateError {
  override readonly name = 'NotFoundError';
  constructor() {
    super(404, 'not_found', 'Not found');
  }
}

export class MethodNotAllowedError extends TollgateError {
  override readonly name = 'MethodNotAllowedError';
  constructor(allowed: readonly string[]) {
    super(405, 'method_not_allowed', 'Method not allowed', { Allow: allowed.join(', ') });
  }
}

/** A key-management write that the key store cannot take: a keys file is read-only. */
export class ConflictError extends TollgateError {
  override readonly name = 'ConflictError';
  constructor(message: string) {
    super(409, 'conflict', message);
  }
}

/**
 * A roll of a key already rolled: it already expires within the grace period asked for, and its
 * replacement exists.
 */
export class KeyAlreadyRolledError extends ConflictError {
  constructor(keyId: string) {
    super(`Key "${keyId}" is already rolled: roll refused`);
  }
}

/** A roll of a key that no longer works: revoked, or past its expiry. A new key is the way on. */
export class KeyNotRollableError extends ConflictError {
  constructor(
    keyId: string,
    readonly reason: 'revoked' | 'expired',
  ) {
    super(`Key "${keyId}" ${reason === 'revoked' ? 'is revoked' : 'has expired'}: roll refused`);
  }
}

/** The `Idempotency-Key` header is malformed (empty, too long, other characters, sent twice). */
export class IdempotencyKeyInvalidError extends TollgateError {
  override readonly name = 'IdempotencyKeyInvalidError';
  constructor(message: string) {
    super(400, 'idempotency_key_invalid', message);
  }
}

/** The route makes money move and requires an `Idempotency-Key`, which the request lacks. */
export class IdempotencyKeyRequiredError extends TollgateError {
  override readonly name = 'IdempotencyKeyRequiredError';
  constructor() {
    super(
      400,
      'idempotency_key_required',
      'This route requires an Idempotency-Key header: a unique value per operation, the same on every retry',
    );
  }
}

/**
 * A request with this key is still being answered (`Retry-After: 1`), or its outcome is unknown
 * to the gateway (no `Retry-After`: retrying with the same key will not help).
 */
export class IdempotencyKeyInUseError extends TollgateError {
  override readonly name = 'IdempotencyKeyInUseError';
  constructor(message: string, retryAfterSeconds?: number) {
    super(
      409,
      'idempotency_key_in_use',
      message,
      retryAfterSeconds === undefined ? {} : { 'Retry-After': String(retryAfterSeconds) },
    );
  }
}

/** The key was first used with another request (method, path or body). */
export class IdempotencyKeyReusedError extends TollgateError {
  override readonly name = 'IdempotencyKeyReusedError';
  constructor() {
    super(
      422,
      'idempotency_key_reused',
      'This Idempotency-Key was used with another request: use a new key for a new operation',
    );
  }
}

/** The store of idempotency keys cannot take the request now; nothing was forwarded. */
export class IdempotencyUnavailableError extends TollgateError {
  override readonly name = 'IdempotencyUnavailableError';
  constructor(message = 'Idempotency keys cannot be checked right now; nothing was done, retry') {
    super(503, 'idempotency_unavailable', message, { 'Retry-After': '1' });
  }
}

export class PayloadTooLargeError extends TollgateError {
  override readonly name = 'PayloadTooLargeError';
  constructor() {
    // The body is left unread: close the connection rather than read or skip it.
    super(413, 'payload_too_large', 'Request body too large', { Connection: 'close' });
  }
}

export class HeadersTooLargeError extends TollgateError {
  override readonly name = 'HeadersTooLargeError';
  constructor() {
    super(431, 'headers_too_large', 'Request headers too large', { Connection: 'close' });
  }
}

export class UnsupportedMediaTypeError extends TollgateError {
  override readonly name = 'UnsupportedMediaTypeError';
  constructor(message = 'Content-Type must be application/json') {
    super(415, 'unsupported_media_type', message);
  }
}

export class RateLimitedError extends TollgateError {
  override readonly name = 'RateLimitedError';
  constructor(
    readonly retryAfterSeconds: number,
    /** Further headers of the refusal, e.g. the limit's `RateLimit` and `RateLimit-Policy`. */
    headers: Readonly<Record<string, string>> = {},
    /** The limit that refused: named in the body as `scope`. */
    readonly scope?: string,
  ) {
    super(429, 'rate_limited', 'Too many requests', {
      ...headers,
      'Retry-After': String(retryAfterSeconds),
    });
  }
}

/**
 * Whether `error` says its request surely never reached the upstream (no connection could be
 * made): a `TollgateError` with `requestSent: false`. An `Idempotency-Key`'s claim is then
 * released, not kept, so a retry of the request is forwarded.
 */
export function requestNeverSent(error: unknown): boolean {
  return (
    error instanceof TollgateError && (error as { requestSent?: unknown }).requestSent === false
  );
}

export class InternalError extends TollgateError {
  override readonly name = 'InternalError';
  constructor() {
    super(500, 'internal_error', 'Internal error');
  }
}

/**
 * A middleware of the kit ran without a step it depends on (e.g. `requireRole()` before
 * `authenticate()`): the request fails closed, `500 internal_error` with nothing of this shown to
 * the client, and the error handler logs `name` and `code`, which names the missing step.
 */
export class MisconfigurationError extends Error {
  override readonly name = 'TollgateMisconfiguration';
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Thrown at creation time for invalid options or configuration: fail fast, name the culprit. */
export class ConfigurationError extends TypeError {
  override readonly name = 'ConfigurationError';
}

/**
 * A short, safe description of a fault for logs and readiness: its error code or class name,
 * never a library's full message (which may hold an address, a URL or a credential).
 */
export function faultName(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    if (error instanceof Error) return error.name;
  }
  return 'unknown error';
}
