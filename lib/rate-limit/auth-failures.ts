import type { ErrorRequestHandler, Request, RequestHandler, Response } from 'express';
import { ipKeyGenerator } from 'express-rate-limit';
import { ConfigurationError, GatewayError, RateLimitedError } from '../errors';
import { DEFAULT_PREFIX, DEFAULT_WINDOW_MS, type LimiterRedis, retryAfterSeconds } from './limiter';
import type { ResilientStore } from './resilient-store';
import { createScopeStore } from './scope-store';

/**
 * Throttles credential guessing: wrong keys, pairs and tokens (401) and whitelist refusals (403
 * `ip_not_whitelisted`) are counted per client IP, and an IP past the limit is refused with 429 on
 * every authentication attempt, right or wrong, until its window resets. A successful request
 * costs nothing: only failures are counted, and the refusal is decided from this instance's
 * memory. With a shared Redis the failures of all instances count together, and an instance that
 * has not yet seen the block learns it at the IP's next failure there (one more checked attempt
 * per instance and window, at most).
 *
 * Mount `guard` before the authentication middlewares and `recordFailure` as an error handler
 * after them (on the route, or after the router).
 */

export interface AuthFailureLimiterOptions {
  /** Failed attempts allowed per IP per window. Defaults to 20. */
  limit?: number;
  /** Defaults to 60 000 ms. */
  windowMs?: number;
  redis?: LimiterRedis | undefined;
  /** Defaults to `tollgate:rl:`; `auth-failures:` is appended. */
  prefix?: string;
  expectedInstances?: number;
}

export interface AuthFailureLimiter {
  readonly guard: RequestHandler;
  readonly recordFailure: ErrorRequestHandler;
  readonly store: ResilientStore;
}

export const DEFAULT_AUTH_FAILURE_LIMIT = 20;
const NAME = 'auth-failures';

export function createAuthFailureLimiter(
  options: AuthFailureLimiterOptions = {},
): AuthFailureLimiter {
  const limit = options.limit ?? DEFAULT_AUTH_FAILURE_LIMIT;
  const windowMs = options.windowMs ?? DEFAULT_WINDOW_MS;
  if (!Number.isInteger(limit) || limit < 1) {
    throw new ConfigurationError(
      'createAuthFailureLimiter(): limit must be a whole number of at least 1',
    );
  }
  const prefix = `${options.prefix ?? DEFAULT_PREFIX}${NAME}:`;
  const store = createScopeStore({
    prefix,
    // The store blocks a key once its count exceeds its limit. `limit - 1` blocks it as soon as
    // the limit-th failure is counted, so no attempt after the allowed failures is evaluated.
    limit: limit - 1,
    redis: options.redis,
    expectedInstances: options.expectedInstances,
  });
  void store.init({ windowMs } as Parameters<ResilientStore['init']>[0]);
  const policy = `"${NAME}"; q=${limit}; w=${Math.ceil(windowMs / 1000)}`;

  const refuse = (res: Response, until: number): RateLimitedError => {
    const seconds = retryAfterSeconds(until, windowMs);
    res.append('RateLimit-Policy', policy);
    res.append('RateLimit', `"${NAME}"; r=0; t=${seconds}`);
    return new RateLimitedError(seconds);
  };

  const guard: RequestHandler = function authFailureGuard(req, res, next) {
    const until = store.blockedUntil(keyOf(req));
    next(until === undefined ? undefined : refuse(res, until));
  };

  const recordFailure: ErrorRequestHandler = function recordAuthFailure(error, req, res, next) {
    if (!countsAsFailure(error)) {
      next(error);
      return;
    }
    store.increment(keyOf(req)).then(
      (result) => {
        next(
          result.totalHits > limit
            ? refuse(res, result.resetTime?.getTime() ?? Date.now() + windowMs)
            : error,
        );
      },
      () => {
        next(error);
      },
    );
  };

  return { guard, recordFailure, store };
}

function keyOf(req: Request): string {
  return ipKeyGenerator(req.clientIp ?? req.ip ?? 'unknown', 56);
}

/** Wrong or forged credentials, and whitelist refusals; not a missing or expired credential. */
const COUNTED_CODES: ReadonlySet<string> = new Set([
  'invalid_api_key',
  'invalid_credentials',
  'invalid_token',
  'ip_not_whitelisted',
]);

function countsAsFailure(error: unknown): boolean {
  return error instanceof GatewayError && COUNTED_CODES.has(error.code);
}
