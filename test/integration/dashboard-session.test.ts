import { randomBytes } from 'node:crypto';
import { type AdminGateway, startAdminGateway } from '../helpers/admin-gateway';
import { expectErrorBody } from '../helpers/error-body';
import { createFixtures } from '../helpers/fixtures';
import { captureLogs, type CapturedLogs, findLeaks } from '../helpers/logs';
import { type HttpResult, httpRequest } from '../helpers/process';

/**
 * The dashboard's sign-in and its protections, on the admin listener as `npm start`
 * runs it (a keys file: the routes read, writes answer 409 once they are let through): the admin
 * token posted once for an `HttpOnly`, `SameSite=Strict` cookie that stands in for it, sign-out,
 * wrong tokens throttled, and every change made with the cookie refused with `403
 * forbidden_origin`, before any other check, unless it comes from the dashboard's own origin with
 * the session's CSRF token.
 */

const ADMIN_TOKEN = randomBytes(32).toString('base64url');
const CONTENT_SECURITY_POLICY =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
  "frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

interface SignedIn {
  readonly cookie: string;
  readonly csrf: string;
}

describe('dashboard sessions on the admin listener', () => {
  const fixtures = createFixtures();
  let started: AdminGateway;
  let logs: CapturedLogs;
  let port: number;
  let origin: string;

  const request = (
    method: string,
    route: string,
    options: {
      headers?: Record<string, string>;
      json?: unknown;
      form?: Record<string, string>;
      from?: string;
    } = {},
  ): Promise<HttpResult> => httpRequest({ port, method, path: route, ...options });

  const signIn = async (from?: string): Promise<SignedIn> => {
    const answer = await request('POST', '/dashboard/session', {
      json: { token: ADMIN_TOKEN },
      headers: { origin },
      ...(from === undefined ? {} : { from }),
    });
    expect(answer.status).toBe(200);
    const cookie = /^tollgate_session=([^;]+)/.exec(setCookie(answer))?.[1] ?? '';
    return { cookie: `tollgate_session=${cookie}`, csrf: String(answer.body?.csrf_token) };
  };

  /** A change with the session cookie, from `from` (the dashboard's origin by default). */
  const change = (
    session: SignedIn,
    options: { origin?: string | null; csrf?: string | null; json?: unknown } = {},
  ): Promise<HttpResult> => {
    const headers: Record<string, string> = { cookie: session.cookie };
    const sentOrigin = options.origin === undefined ? origin : options.origin;
    const sentCsrf = options.csrf === undefined ? session.csrf : options.csrf;
    if (sentOrigin !== null) headers.origin = sentOrigin;
    if (sentCsrf !== null) headers['x-csrf-token'] = sentCsrf;
    return request('POST', '/admin/v1/keys/key_l1/revoke', {
      headers,
      ...(options.json === undefined ? {} : { json: options.json }),
    });
  };

  beforeAll(async () => {
    logs = captureLogs();
    started = await startAdminGateway(fixtures.document, ADMIN_TOKEN, logs.logger);
    port = started.adminPort;
    origin = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    await started.stop();
  });

  it('opens a session for the admin token: an HttpOnly, SameSite=Strict cookie, never the token', async () => {
    const answer = await request('POST', '/dashboard/session', {
      json: { token: ADMIN_TOKEN },
      headers: { origin },
    });
    expect(answer.status).toBe(200);
    const cookie = setCookie(answer);
    expect(cookie).toMatch(/^tollgate_session=[A-Za-z0-9_-]{43}; /);
    expect(cookie.split('; ').slice(1).sort()).toEqual([
      'HttpOnly',
      'Max-Age=28800',
      'Path=/',
      'SameSite=Strict',
    ]);
    expect(answer.text).not.toContain(ADMIN_TOKEN);
    expect(answer.body?.csrf_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const idleMs = Date.parse(String(answer.body?.expires_at)) - Date.now();
    expect(idleMs).toBeGreaterThan(14 * 60_000);
    expect(idleMs).toBeLessThanOrEqual(15 * 60_000);
  });

  it('takes the form field too, and sends the browser to the dashboard', async () => {
    const answer = await request('POST', '/dashboard/session', {
      form: { token: ADMIN_TOKEN },
      headers: { origin },
    });
    expect(answer.status).toBe(303);
    expect(answer.headers.location).toBe('/dashboard/');
    expect(setCookie(answer)).toMatch(/^tollgate_session=/);
  });

  it('refuses a wrong token and a missing one, opening nothing', async () => {
    const wrong = await request('POST', '/dashboard/session', {
      json: { token: 'not-the-admin-token' },
      from: '127.0.0.21',
    });
    expectErrorBody(wrong, { status: 401, code: 'invalid_token' });
    expect(wrong.headers['set-cookie']).toBeUndefined();
    expectErrorBody(await request('POST', '/dashboard/session', { json: {}, from: '127.0.0.21' }), {
      status: 400,
      code: 'invalid_request',
    });
  });

  it('throttles wrong tokens per address, like failed authentications', async () => {
    const from = '127.0.0.22';
    const statuses: number[] = [];
    for (let attempt = 0; attempt < 21; attempt++) {
      statuses.push(
        (await request('POST', '/dashboard/session', { json: { token: `wrong-${attempt}` }, from }))
          .status,
      );
    }
    expect(statuses.slice(0, 20).every((status) => status === 401)).toBe(true);
    expect(statuses[20]).toBe(429);
    // the budget is the address's: even the right token waits
    const right = await request('POST', '/dashboard/session', {
      json: { token: ADMIN_TOKEN },
      from,
    });
    expectErrorBody(right, { status: 429, code: 'rate_limited' });
  });

  it('refuses a sign-in posted from another origin', async () => {
    const answer = await request('POST', '/dashboard/session', {
      json: { token: ADMIN_TOKEN },
      headers: { origin: 'https://attacker.example' },
    });
    expectErrorBody(answer, { status: 403, code: 'forbidden_origin' });
    expect(answer.headers['set-cookie']).toBeUndefined();
  });

  it('lets the cookie stand in for the token on the key-management routes', async () => {
    const session = await signIn();
    const listed = await request('GET', '/admin/v1/accounts', {
      headers: { cookie: session.cookie },
    });
    expect(listed.status).toBe(200);
    expect((listed.body?.accounts as unknown[]).length).toBeGreaterThan(0);
    const again = await request('GET', '/dashboard/session', {
      headers: { cookie: session.cookie },
    });
    expect(again.status).toBe(200);
    expect(again.body?.csrf_token).toBe(session.csrf);
    expectErrorBody(
      await request('GET', '/admin/v1/accounts', {
        headers: { cookie: 'tollgate_session=not-a-session' },
        from: '127.0.0.23',
      }),
      { status: 401, code: 'invalid_token' },
    );
    expectErrorBody(await request('GET', '/dashboard/session'), {
      status: 401,
      code: 'missing_credentials',
    });
  });

  const refusedChanges: [string, { origin?: string | null; csrf?: string | null }][] = [
    ['without an Origin', { origin: null }],
    ['from another origin', { origin: 'https://attacker.example' }],
    ['from a look-alike origin', { origin: 'http://127.0.0.1' }],
    ['without the CSRF token', { csrf: null }],
    ['with a wrong CSRF token', { csrf: 'A'.repeat(43) }],
    ['with the CSRF token of another session', { csrf: 'other' }],
  ];
  it.each(refusedChanges)(
    'refuses a change made with the cookie %s: 403 forbidden_origin, before any other check',
    async (_what, options) => {
      const session = await signIn();
      const csrf = options.csrf === 'other' ? (await signIn()).csrf : options.csrf;
      // an unknown body field would be a 400, and the keys file a 409: the origin check is first
      const answer = await change(session, { ...options, csrf, json: { unknown: true } });
      expectErrorBody(answer, { status: 403, code: 'forbidden_origin' });
    },
  );

  it('lets a change through from the dashboard with its CSRF token (the keys file then answers 409)', async () => {
    const session = await signIn();
    expectErrorBody(await change(session), { status: 409, code: 'conflict' });
  });

  it('signs out: the cookie is cleared and no longer accepted', async () => {
    const session = await signIn();
    const foreign = await request('POST', '/dashboard/session/end', {
      headers: {
        cookie: session.cookie,
        origin: 'https://attacker.example',
        'x-csrf-token': session.csrf,
      },
    });
    expectErrorBody(foreign, { status: 403, code: 'forbidden_origin' });
    const ended = await request('POST', '/dashboard/session/end', {
      headers: { cookie: session.cookie, origin, 'x-csrf-token': session.csrf },
    });
    expect(ended.status).toBe(204);
    expect(setCookie(ended)).toMatch(/^tollgate_session=; Max-Age=0; /);
    expectErrorBody(
      await request('GET', '/admin/v1/accounts', { headers: { cookie: session.cookie } }),
      { status: 401, code: 'invalid_token' },
    );
  });

  it('sends the dashboard headers on every answer of the listener', async () => {
    const session = await signIn();
    for (const answer of [
      await request('GET', '/dashboard/session', { headers: { cookie: session.cookie } }),
      await request('GET', '/admin/v1/accounts', { headers: { cookie: session.cookie } }),
      await request('GET', '/admin/v1/accounts'),
    ]) {
      expect(answer.headers['content-security-policy']).toBe(CONTENT_SECURITY_POLICY);
      expect(answer.headers['x-frame-options']).toBe('DENY');
      expect(answer.headers['cache-control']).toBe('no-store');
      expect(answer.headers['referrer-policy']).toBe('no-referrer');
    }
  });

  it('audits sign-in and sign-out, and never logs the token, the cookie or the CSRF token', async () => {
    const session = await signIn();
    await request('POST', '/dashboard/session/end', {
      headers: { cookie: session.cookie, origin, 'x-csrf-token': session.csrf },
    });
    const audits = logs.entries().filter((entry) => entry.event === 'admin.audit');
    expect(audits.map((entry) => entry.action)).toEqual(
      expect.arrayContaining(['dashboard.sign_in', 'dashboard.sign_out']),
    );
    const secrets = [ADMIN_TOKEN, session.cookie.split('=')[1] ?? '', session.csrf];
    expect(findLeaks(logs.lines.join('\n'), secrets)).toEqual([]);
  });
});

function setCookie(answer: HttpResult): string {
  const cookies = answer.headers['set-cookie'] ?? [];
  expect(cookies).toHaveLength(1);
  return cookies[0] ?? '';
}
