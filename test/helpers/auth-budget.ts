import { AuthenticationError } from '../../lib/errors';
import {
  type AuthFailureLimiter,
  type AuthFailureLimiterOptions,
  createAuthFailureLimiter,
} from '../../lib/rate-limit/auth-failures';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { untilShared } from './redis';

/**
 * What the failed-authentication budget's fleet tests share: a credential compared and found
 * wrong, the most comparisons in any span of one window, and a connection to a real Redis whose
 * counters are shared before the first attempt.
 */

/** The comparison of a wrong key: what `attempt()` is given to run. */
export function wrongKey(): never {
  throw new AuthenticationError('invalid_api_key');
}

/** `count` limiters sharing one Redis and prefix, as that many gateways sharing Redis are. */
export function limiterFleet(
  count: number,
  options: AuthFailureLimiterOptions,
): AuthFailureLimiter[] {
  return Array.from({ length: count }, () => createAuthFailureLimiter(options));
}

/**
 * One wrong credential sent to `instance` from `req`'s IP: resolves, once answered, whether it was
 * compared; a comparison's time (`now()`) is pushed to `compared`.
 */
export function guessWrong(
  instance: AuthFailureLimiter,
  req: { readonly clientIp: string },
  compared: number[],
  now: () => number,
): Promise<boolean> {
  return new Promise((answered) => {
    let ran = false;
    instance.queueAttempt(
      req,
      () => {
        ran = true;
        compared.push(now());
        return wrongKey();
      },
      () => {
        answered(ran);
      },
    );
  });
}

/** The most of `times` inside any span of `windowMs` ([t, t + windowMs)). */
export function mostInOneWindow(times: readonly number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let most = 0;
  let from = 0;
  for (let to = 0; to < sorted.length; to++) {
    while ((sorted[from] ?? 0) + windowMs <= (sorted[to] ?? 0)) from++;
    most = Math.max(most, to - from + 1);
  }
  return most;
}

/** The kit's Redis connection to `url`, once its counters are shared (5 s at most). */
export async function sharedConnection(url: string): Promise<LimiterRedisConnection> {
  const connection = createLimiterRedis({ url });
  try {
    await untilShared(connection);
  } catch (error) {
    await connection.close();
    throw error;
  }
  return connection;
}
