import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * The dashboard's sessions: made when an operator posts the admin token, then named
 * by an `HttpOnly` cookie that the key-management routes accept in place of the token. A session
 * ends after 15 minutes without a request, 8 hours after it began, or when signed out; each has
 * its own CSRF token, which the page sends with every change. They live in this process's memory:
 * a restart, or another instance behind the same address, asks for the token again. The cookie's
 * value is never kept, only its SHA-256, so a memory dump holds no usable session.
 */

export interface Session {
  /** The page's CSRF token, sent back in `X-CSRF-Token` with every change. */
  readonly csrfToken: string;
  readonly startedAt: number;
  /** When it ends unless used again before: idle limit or total limit, whichever is first. */
  readonly expiresAt: number;
}

export const SESSION_COOKIE = 'tollgate_session';
export const SESSION_IDLE_MS = 15 * 60 * 1000;
export const SESSION_MAX_MS = 8 * 60 * 60 * 1000;
/** Sessions kept at most; past it the oldest ends first. */
const MAX_SESSIONS = 1000;

interface Stored {
  readonly csrfToken: string;
  readonly startedAt: number;
  lastUsedAt: number;
}

export class DashboardSessions {
  private readonly sessions = new Map<string, Stored>();

  constructor(private readonly now: () => number = Date.now) {}

  /** A new session: the cookie value to send once, and the session. */
  start(): { readonly cookie: string; readonly session: Session } {
    this.forgetEnded();
    while (this.sessions.size >= MAX_SESSIONS) {
      const oldest = this.sessions.keys().next().value;
      if (oldest === undefined) break;
      this.sessions.delete(oldest);
    }
    const cookie = randomBytes(32).toString('base64url');
    const now = this.now();
    const stored: Stored = {
      csrfToken: randomBytes(32).toString('base64url'),
      startedAt: now,
      lastUsedAt: now,
    };
    this.sessions.set(digest(cookie), stored);
    return { cookie, session: view(stored) };
  }

  /**
   * The session a cookie value names, its idle time restarted (`touch`); `undefined` when there is
   * none, or it has ended (it is forgotten then).
   */
  find(cookie: string, touch = true): Session | undefined {
    const key = digest(cookie);
    const stored = this.sessions.get(key);
    if (stored === undefined) return undefined;
    const now = this.now();
    if (ended(stored, now)) {
      this.sessions.delete(key);
      return undefined;
    }
    if (touch) stored.lastUsedAt = now;
    return view(stored);
  }

  end(cookie: string): void {
    this.sessions.delete(digest(cookie));
  }

  get size(): number {
    return this.sessions.size;
  }

  private forgetEnded(): void {
    const now = this.now();
    for (const [key, stored] of this.sessions) {
      if (ended(stored, now)) this.sessions.delete(key);
    }
  }
}

/** True when `sent` is the session's CSRF token (compared in constant time). */
export function csrfMatches(session: Session, sent: string | undefined): boolean {
  if (sent === undefined) return false;
  const expected = Buffer.from(session.csrfToken);
  const given = Buffer.from(sent);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

function ended(stored: Stored, now: number): boolean {
  return now - stored.lastUsedAt >= SESSION_IDLE_MS || now - stored.startedAt >= SESSION_MAX_MS;
}

function view(stored: Stored): Session {
  return {
    csrfToken: stored.csrfToken,
    startedAt: stored.startedAt,
    expiresAt: Math.min(stored.lastUsedAt + SESSION_IDLE_MS, stored.startedAt + SESSION_MAX_MS),
  };
}

function digest(cookie: string): string {
  return createHash('sha256').update(cookie).digest('hex');
}
