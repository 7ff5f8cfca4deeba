import { timingSafeEqual } from 'node:crypto';
import { parse as parseCookies, serialize as serializeCookie } from 'cookie';
import express, { type Request, type RequestHandler, type Response, type Router } from 'express';
import {
  AuthenticationError,
  InvalidRequestError,
  UnsupportedMediaTypeError,
} from '../lib/internal';
import { ForbiddenOriginError } from './errors';
import { sha256 } from '../lib';
import { type createAuthFailureLimiter, jsonBody, methodNotAllowed } from '../lib/entry/express';
import {
  csrfMatches,
  type DashboardSessions,
  type Session,
  SESSION_COOKIE,
  SESSION_MAX_MS,
} from './dashboard-sessions';

/**
 * Who may use the key-management routes: the bearer of the admin token, or a
 * dashboard session. A session is opened by posting the token to `POST /dashboard/session`; its
 * cookie then stands in for the token. A change made with the cookie must come from the
 * dashboard's own origin with the session's CSRF token, or it answers `403 forbidden_origin`
 * before any other check. Wrong tokens and unknown session cookies spend the same failure budget
 * per client address as failed authentications.
 */

type FailureLimiter = ReturnType<typeof createAuthFailureLimiter>;

/** Methods that change something: the ones a session must prove its origin for. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export interface AdminAccess {
  /** The middleware in front of every key-management route. */
  readonly authorised: RequestHandler;
  /** `POST /dashboard/session`, `GET /dashboard/session`, `POST /dashboard/session/end`. */
  readonly sessionRoutes: Router;
}

/**
 * `audited(action)`: the middleware that writes a request's audit line once it is answered, as
 * the key-management routes' own (admin/index.ts). `readOnly`: why the key-management routes take no
 * change (a keys file), or `null`; the session's answer tells the page.
 */
export function adminAccess(
  tokenSha256: string,
  failures: FailureLimiter,
  sessions: DashboardSessions,
  audited: (action: string) => RequestHandler,
  readOnly: string | null,
): AdminAccess {
  const expected = Buffer.from(tokenSha256, 'hex');
  const tokenMatches = (token: string): boolean => timingSafeEqual(sha256(token), expected);

  const authorised: RequestHandler = function adminAccessMiddleware(req, _res, next) {
    const values = req.headersDistinct.authorization;
    const cookie = values === undefined ? sessionCookie(req) : undefined;
    if (
      cookie !== undefined &&
      !SAFE_METHODS.has(req.method) &&
      !fromDashboard(req, sessions.find(cookie, false))
    ) {
      next(new ForbiddenOriginError());
      return;
    }
    const spent = failures.refusalFor(req);
    if (spent !== undefined) {
      next(spent);
      return;
    }
    let refusal: AuthenticationError;
    if (cookie !== undefined) {
      if (sessions.find(cookie) !== undefined) {
        next();
        return;
      }
      refusal = new AuthenticationError('invalid_token', SESSION_ENDED);
    } else {
      const token = bearerToken(values);
      if (token === undefined) {
        next(
          new AuthenticationError(values === undefined ? 'missing_credentials' : 'invalid_token'),
        );
        return;
      }
      if (tokenMatches(token)) {
        next();
        return;
      }
      refusal = new AuthenticationError('invalid_token');
    }
    failures.record(req, refusal);
    next(refusal);
  };

  const sessionRoutes = express.Router({ caseSensitive: true, strict: false });
  sessionRoutes.post(
    '/dashboard/session',
    audited('dashboard.sign_in'),
    signInBody(),
    (req, res, next) => {
      if (req.headers.origin !== undefined && !sameOrigin(req)) {
        next(new ForbiddenOriginError());
        return;
      }
      const spent = failures.refusalFor(req);
      if (spent !== undefined) {
        next(spent);
        return;
      }
      const token = (req.body as { token?: unknown } | undefined)?.token;
      if (typeof token !== 'string' || !/^[\x21-\x7e]{1,512}$/.test(token)) {
        next(new InvalidRequestError('token: the admin token'));
        return;
      }
      if (!tokenMatches(token)) {
        const refusal = new AuthenticationError('invalid_token');
        failures.record(req, refusal);
        next(refusal);
        return;
      }
      const started = sessions.start();
      setSessionCookie(req, res, started.cookie, SESSION_MAX_MS / 1000);
      if (req.is('application/x-www-form-urlencoded') !== false) {
        res.redirect(303, '/dashboard/');
        return;
      }
      res.json(sessionView(started.session, readOnly));
    },
  );
  sessionRoutes.get('/dashboard/session', audited('dashboard.session'), (req, res, next) => {
    const cookie = sessionCookie(req);
    const session = cookie === undefined ? undefined : sessions.find(cookie);
    if (session === undefined) {
      next(new AuthenticationError('missing_credentials'));
      return;
    }
    res.json(sessionView(session, readOnly));
  });
  sessionRoutes.all('/dashboard/session', methodNotAllowed(['GET', 'POST']));
  sessionRoutes.post('/dashboard/session/end', audited('dashboard.sign_out'), (req, res, next) => {
    const cookie = sessionCookie(req);
    const session = cookie === undefined ? undefined : sessions.find(cookie, false);
    if (!fromDashboard(req, session)) {
      next(new ForbiddenOriginError());
      return;
    }
    if (cookie !== undefined) sessions.end(cookie);
    setSessionCookie(req, res, '', 0);
    res.status(204).end();
  });
  sessionRoutes.all('/dashboard/session/end', methodNotAllowed(['POST']));
  return { authorised, sessionRoutes };
}

const SESSION_ENDED = 'The dashboard session has ended; sign in again';

/**
 * Sets (or, with an empty value and no age, clears) the session cookie: `HttpOnly`,
 * `SameSite=Strict`, `Path=/`, and `Secure` when served over TLS, so neither a script nor another
 * site can use it.
 */
function setSessionCookie(req: Request, res: Response, value: string, maxAgeSeconds: number): void {
  res.setHeader(
    'Set-Cookie',
    serializeCookie(SESSION_COOKIE, value, {
      httpOnly: true,
      sameSite: 'strict',
      path: '/',
      secure: req.secure,
      maxAge: maxAgeSeconds,
    }),
  );
}

/** The session cookie's value, when the request carries one. */
function sessionCookie(req: Request): string | undefined {
  const header = req.headers.cookie;
  if (header === undefined) return undefined;
  const value = parseCookies(header)[SESSION_COOKIE];
  return value === undefined || value === '' ? undefined : value;
}

/** A change made by the dashboard page itself: its own origin, and the session's CSRF token. */
function fromDashboard(req: Request, session: Session | undefined): boolean {
  if (session === undefined || !sameOrigin(req)) return false;
  const sent = req.headersDistinct['x-csrf-token'];
  return sent?.length === 1 && csrfMatches(session, sent[0]);
}

/** The `Origin` header names this listener as the browser reached it (`Host`, scheme). */
function sameOrigin(req: Request): boolean {
  const origin = req.headersDistinct.origin;
  const host = req.headers.host;
  return origin?.length === 1 && host !== undefined && origin[0] === `${req.protocol}://${host}`;
}

function bearerToken(values: readonly string[] | undefined): string | undefined {
  if (values?.length !== 1) return undefined;
  return /^bearer ([\x21-\x7e]{1,512})$/i.exec(values[0] ?? '')?.[1];
}

/** The sign-in body: JSON `{"token"}`, or the form field `token`; 415 for anything else. */
function signInBody(): RequestHandler {
  const json = jsonBody({ limit: '4kb' });
  const form = express.urlencoded({ extended: false, limit: '4kb', parameterLimit: 4 });
  return function signInBodyMiddleware(req, res, next) {
    if (req.is('application/x-www-form-urlencoded') !== false) {
      // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment -- req is the IncomingMessage Node created
      form(req, res, (error?: unknown) => {
        next(error === undefined ? undefined : new InvalidRequestError('The form is not valid'));
      });
      return;
    }
    if (req.is('application/json') === false) {
      next(new UnsupportedMediaTypeError());
      return;
    }
    json(req, res, next);
  };
}

function sessionView(
  session: Session,
  readOnly: string | null,
): { csrf_token: string; expires_at: string; read_only: string | null } {
  return {
    csrf_token: session.csrfToken,
    expires_at: new Date(session.expiresAt).toISOString(),
    read_only: readOnly,
  };
}
