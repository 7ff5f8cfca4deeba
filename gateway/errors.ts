import { TollgateError } from '../lib';

/**
 * The errors only the sample gateway throws: the kit's error handler answers them with the kit's
 * error body, by their `code` (`forbidden_origin`, `upstream_unavailable`, `upstream_timeout`,
 * `not_ready`), as any `TollgateError`.
 */

/**
 * A dashboard change made with the session cookie from another origin, or without the
 * page's CSRF token: refused before any other check.
 */
export class ForbiddenOriginError extends TollgateError {
  override readonly name = 'ForbiddenOriginError';
  constructor() {
    super(
      403,
      'forbidden_origin',
      'A dashboard change must come from the dashboard itself, with its CSRF token',
    );
  }
}

export class UpstreamError extends TollgateError {
  override readonly name = 'UpstreamError';
  constructor(
    kind: 'unavailable' | 'timeout',
    /**
     * `false` only when the request surely never reached the upstream (no connection could be
     * made): the kit then releases an idempotency key's claim, so a retry is forwarded.
     */
    readonly requestSent = true,
  ) {
    super(
      kind === 'timeout' ? 504 : 502,
      kind === 'timeout' ? 'upstream_timeout' : 'upstream_unavailable',
      kind === 'timeout'
        ? 'The payments service did not answer in time'
        : 'The payments service is unavailable',
    );
  }
}

/** `GET /readyz` of the sample gateway: this instance should not be sent traffic yet (503). */
export class NotReadyError extends TollgateError {
  override readonly name = 'NotReadyError';
  constructor(message: string) {
    super(503, 'not_ready', message);
  }
}
