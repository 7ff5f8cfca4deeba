import {
  csrfMatches,
  DashboardSessions,
  SESSION_IDLE_MS,
  SESSION_MAX_MS,
} from '../../gateway/dashboard-sessions';

/** The sessions' lifetimes (15 minutes idle, 8 hours at most), on a clock the test moves. */
describe('DashboardSessions', () => {
  let now: number;
  let sessions: DashboardSessions;
  beforeEach(() => {
    now = Date.UTC(2026, 10, 25, 9, 0, 0);
    sessions = new DashboardSessions(() => now);
  });

  it('finds a session by its cookie, with its own CSRF token and its idle deadline', () => {
    const first = sessions.start();
    const second = sessions.start();
    expect(first.cookie).not.toBe(second.cookie);
    expect(first.session.csrfToken).not.toBe(second.session.csrfToken);
    expect(sessions.find(first.cookie)?.csrfToken).toBe(first.session.csrfToken);
    expect(first.session.expiresAt).toBe(now + SESSION_IDLE_MS);
    expect(sessions.find('tollgate-no-such-session')).toBeUndefined();
  });

  it('ends after 15 minutes without a request; each request restarts the idle time', () => {
    const { cookie } = sessions.start();
    now += SESSION_IDLE_MS - 1;
    expect(sessions.find(cookie)).toBeDefined();
    now += SESSION_IDLE_MS - 1;
    expect(sessions.find(cookie)?.expiresAt).toBe(now + SESSION_IDLE_MS);
    now += SESSION_IDLE_MS;
    expect(sessions.find(cookie)).toBeUndefined();
    expect(sessions.size).toBe(0);
  });

  it('a look without touching does not restart the idle time', () => {
    const { cookie } = sessions.start();
    now += SESSION_IDLE_MS - 1;
    expect(sessions.find(cookie, false)).toBeDefined();
    now += 1;
    expect(sessions.find(cookie, false)).toBeUndefined();
  });

  it('ends 8 hours after it began, however busy', () => {
    const { cookie } = sessions.start();
    const began = now;
    while (now + 10 * 60_000 < began + SESSION_MAX_MS) {
      now += 10 * 60_000;
      expect(sessions.find(cookie)).toBeDefined();
    }
    expect(sessions.find(cookie)?.expiresAt).toBe(began + SESSION_MAX_MS);
    now = began + SESSION_MAX_MS;
    expect(sessions.find(cookie)).toBeUndefined();
  });

  it('ends at sign-out', () => {
    const { cookie } = sessions.start();
    sessions.end(cookie);
    expect(sessions.find(cookie)).toBeUndefined();
  });

  it('keeps at most 1,000 sessions, ending the oldest first', () => {
    const first = sessions.start();
    const second = sessions.start();
    for (let i = 0; i < 998; i++) sessions.start();
    expect(sessions.size).toBe(1000);
    sessions.start();
    expect(sessions.size).toBe(1000);
    expect(sessions.find(first.cookie)).toBeUndefined();
    expect(sessions.find(second.cookie)).toBeDefined();
  });

  it('compares the CSRF token whole', () => {
    const { session } = sessions.start();
    expect(csrfMatches(session, session.csrfToken)).toBe(true);
    expect(csrfMatches(session, session.csrfToken.slice(1))).toBe(false);
    expect(csrfMatches(session, `${session.csrfToken}x`)).toBe(false);
    expect(csrfMatches(session, undefined)).toBe(false);
    expect(csrfMatches(session, '')).toBe(false);
  });
});
