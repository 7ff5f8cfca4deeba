import type { NextFunction, Request } from 'express';
import {
  AuthenticationError,
  IpNotWhitelistedError,
  InsufficientRoleError,
  RateLimitedError,
} from '../../../lib/errors';
import { AdmissionStore } from '../../../lib/rate-limit/admission-store';
import {
  authFailureLimiterOn,
  createAuthFailureLimiter,
} from '../../../lib/rate-limit/auth-failures';

/**
 * The failed-authentication budget counting in memory: check, comparison and
 * count in one step; what counts; windows that reset; and a spent budget that a flood of other
 * IPs cannot evict. The black-box tests over sockets, in memory and with Redis, are in
 * test/security/auth-failure-budget.test.ts.
 */

const WINDOW_MS = 60_000;

function requestFrom(ip: string): Request {
  return { clientIp: ip } as unknown as Request;
}

function wrongKey(): never {
  throw new AuthenticationError('invalid_api_key');
}

function clock(start = 1_000_000): { now: () => number; advance: (ms: number) => void } {
  let time = start;
  return {
    now: () => time,
    advance: (ms) => {
      time += ms;
    },
  };
}

/** The error `attempt()` throws, or `undefined` when it returns. */
function outcome(run: () => unknown): unknown {
  try {
    run();
    return undefined;
  } catch (error) {
    return error;
  }
}

describe('createAuthFailureLimiter, counting in memory', () => {
  it('compares and counts wrong credentials up to the limit, then refuses without comparing', () => {
    const limiter = createAuthFailureLimiter({ limit: 3, windowMs: WINDOW_MS });
    const req = requestFrom('203.0.113.1');
    const compare = jest.fn(wrongKey);

    const errors = Array.from({ length: 5 }, () => outcome(() => limiter.attempt(req, compare)));

    expect(compare).toHaveBeenCalledTimes(3);
    expect(errors.slice(0, 3).map((error) => (error as AuthenticationError).code)).toEqual([
      'invalid_api_key',
      'invalid_api_key',
      'invalid_api_key',
    ]);
    for (const error of errors.slice(3)) expect(error).toBeInstanceOf(RateLimitedError);
    const refusal = errors[4] as RateLimitedError;
    expect(refusal.headers).toMatchObject({
      'RateLimit-Policy': '"auth-failures"; q=3; w=60',
      RateLimit: `"auth-failures"; r=0; t=${refusal.retryAfterSeconds}`,
    });
  });

  it('refuses the right credential too once the budget is spent', () => {
    const limiter = createAuthFailureLimiter({ limit: 2, windowMs: WINDOW_MS });
    const req = requestFrom('203.0.113.2');
    outcome(() => limiter.attempt(req, wrongKey));
    outcome(() => limiter.attempt(req, wrongKey));
    const right = jest.fn(() => 'authenticated');

    expect(outcome(() => limiter.attempt(req, right))).toBeInstanceOf(RateLimitedError);
    expect(right).not.toHaveBeenCalled();
  });

  it('counts nothing for a success, a missing credential or a role refusal', () => {
    const limiter = createAuthFailureLimiter({ limit: 1, windowMs: WINDOW_MS });
    const req = requestFrom('203.0.113.3');
    for (let i = 0; i < 5; i++) {
      expect(limiter.attempt(req, () => 'ok')).toBe('ok');
      outcome(() =>
        limiter.attempt(req, () => {
          throw new AuthenticationError('missing_credentials');
        }),
      );
      outcome(() =>
        limiter.attempt(req, () => {
          throw new InsufficientRoleError('level-2');
        }),
      );
    }
    expect(limiter.attempt(req, () => 'still ok')).toBe('still ok');
  });

  it('gives a fresh budget when the window resets, with Retry-After never before the reset', () => {
    const time = clock();
    const limiter = createAuthFailureLimiter({ limit: 1, windowMs: WINDOW_MS, now: time.now });
    const req = requestFrom('203.0.113.4');
    outcome(() => limiter.attempt(req, wrongKey));
    time.advance(WINDOW_MS - 1500);

    const refusal = outcome(() => limiter.attempt(req, () => 'ok')) as RateLimitedError;
    expect(refusal).toBeInstanceOf(RateLimitedError);
    expect(refusal.retryAfterSeconds).toBe(2);

    time.advance(1500);
    expect(limiter.attempt(req, () => 'ok')).toBe('ok');
  });

  it('counts whitelist refusals passed to recordFailure, and an error attempt() counted only once', () => {
    const limiter = createAuthFailureLimiter({ limit: 2, windowMs: WINDOW_MS });
    const req = requestFrom('203.0.113.5');
    const next = jest.fn() as NextFunction;
    const counted = outcome(() => limiter.attempt(req, wrongKey));
    // The same error reaching the error handler after the route is not counted again.
    limiter.recordFailure(counted, req, {}, next);
    expect(limiter.attempt(req, () => 'ok')).toBe('ok');

    limiter.recordFailure(new IpNotWhitelistedError(), req, {}, next);
    expect(outcome(() => limiter.attempt(req, () => 'ok'))).toBeInstanceOf(RateLimitedError);
    expect(next).toHaveBeenCalledTimes(2);
  });

  it('keeps a spent budget while single failures from more IPs than it tracks arrive', () => {
    const limiter = createAuthFailureLimiter({ limit: 3, windowMs: WINDOW_MS, maxTrackedIps: 10 });
    const guesser = requestFrom('198.51.100.1');
    for (let i = 0; i < 3; i++) outcome(() => limiter.attempt(guesser, wrongKey));

    for (let host = 1; host <= 50; host++) {
      outcome(() => limiter.attempt(requestFrom(`192.0.2.${host}`), wrongKey));
    }

    expect(outcome(() => limiter.attempt(guesser, () => 'ok'))).toBeInstanceOf(RateLimitedError);
  });

  it('makes room by dropping expired windows before live ones', () => {
    const time = clock();
    const limiter = createAuthFailureLimiter({
      limit: 2,
      windowMs: WINDOW_MS,
      maxTrackedIps: 3,
      now: time.now,
    });
    const early = [1, 2].map((host) => requestFrom(`192.0.2.${host}`));
    for (const req of early) outcome(() => limiter.attempt(req, wrongKey));
    time.advance(WINDOW_MS / 2);
    const live = requestFrom('198.51.100.2');
    outcome(() => limiter.attempt(live, wrongKey));
    time.advance(WINDOW_MS / 2);
    // The two early windows have expired; two newcomers take their places, not the live one's.
    for (const host of [3, 4])
      outcome(() => limiter.attempt(requestFrom(`192.0.2.${host}`), wrongKey));

    expect(outcome(() => limiter.attempt(live, wrongKey))).toBeInstanceOf(AuthenticationError);
    expect(outcome(() => limiter.attempt(live, () => 'ok'))).toBeInstanceOf(RateLimitedError);
  });

  it('runs a queued attempt at once when no failure is being told to Redis', () => {
    const limiter = createAuthFailureLimiter({ limit: 1, windowMs: WINDOW_MS });
    const req = requestFrom('203.0.113.6');
    const done = jest.fn();

    limiter.queueAttempt(req, wrongKey, done);
    limiter.queueAttempt(req, () => 'ok', done);

    expect(done).toHaveBeenCalledTimes(2);
    expect((done.mock.calls[0] as unknown[])[0]).toBeInstanceOf(AuthenticationError);
    expect((done.mock.calls[1] as unknown[])[0]).toBeInstanceOf(RateLimitedError);
  });

  it('refuses a limit that is not a whole number of at least 1', () => {
    expect(() => createAuthFailureLimiter({ limit: 0 })).toThrow(/limit/);
    expect(() => createAuthFailureLimiter({ limit: 1.5 })).toThrow(/limit/);
  });
});

describe('the budget on an engine it shares', () => {
  it("leaves the engine's counts and timers to its owner: shutdown() stops nothing", async () => {
    const store = new AdmissionStore({ windowMs: 60_000 });
    const counter = store.countersFor('shared:');
    const request = { counter, key: 'account:{acct}', limit: 1, enforced: true };
    expect((await store.admit([request])).refusedAt).toBe(-1);
    authFailureLimiterOn(store, { limit: 5 }).shutdown();
    // The scope's count survived: the second request is refused, not admitted into a fresh window.
    expect((await store.admit([request])).refusedAt).toBe(0);
    store.shutdown();
  });
});
