import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { createAdminApp } from '../../gateway/admin';
import { sha256 } from '../../lib/keys/key-store';
import { expectErrorBody } from '../helpers/error-body';
import { createFixtures } from '../helpers/fixtures';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import { captureLogs } from '../helpers/logs';
import { type HttpResult, httpRequest } from '../helpers/process';

/**
 * The dashboard's page and what it reads, on an admin listener: the page as `npm run
 * build` made it (dist/dashboard), its script and stylesheet under hashed names cached for a year,
 * nothing inline for the strict policy to block, and nothing else on disk reachable; the session
 * telling the page why it is read-only; and `GET /admin/v1/accounts/:id/decisions`, the chart's
 * data, counting the decisions the gateway made for the account in the current minute.
 */

const ADMIN_TOKEN = randomBytes(32).toString('base64url');
const BUILT = path.join(__dirname, '..', '..', 'dist', 'dashboard');
const READ_ONLY = 'The demo keys are read-only: set TOLLGATE_DATABASE_URL to manage keys here';
const WALLETS = '/api/v1/wallets/';

interface Minute {
  readonly start: string;
  readonly allowed: number;
  readonly limited: number;
  readonly refused: Readonly<Record<string, number>>;
}

function totals(minutes: readonly Minute[]): Omit<Minute, 'start'> {
  const refused: Record<string, number> = {};
  for (const minute of minutes) {
    for (const [code, count] of Object.entries(minute.refused)) {
      refused[code] = (refused[code] ?? 0) + count;
    }
  }
  return {
    allowed: minutes.reduce((sum, minute) => sum + minute.allowed, 0),
    limited: minutes.reduce((sum, minute) => sum + minute.limited, 0),
    refused,
  };
}

describe('the dashboard page and its data on the admin listener', () => {
  const fixtures = createFixtures();
  let gateway: TestGateway;
  let admin: http.Server;
  let port: number;

  const get = (route: string, headers: Record<string, string> = {}): Promise<HttpResult> =>
    httpRequest({ port, path: route, headers });

  beforeAll(async () => {
    gateway = await startTestGateway({ fixtures, limits: { payments: 3 } });
    const adminApp = createAdminApp({
      directory: fixtures.ring,
      tokenSha256: sha256(ADMIN_TOKEN).toString('hex'),
      logger: captureLogs().logger,
      readOnlyReason: READ_ONLY,
      usage: (accountId, limits) => gateway.app.usage(accountId, limits),
      decisions: (accountId) => gateway.app.decisions(accountId),
    });
    admin = adminApp.listen(0, '127.0.0.1');
    await new Promise((resolve) => admin.once('listening', resolve));
    port = (admin.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => admin.close(resolve));
    await gateway.close();
  });

  it('serves the built page, never stored, under the strict policy, with nothing inline', async () => {
    const page = await get('/dashboard/');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(page.headers['cache-control']).toBe('no-store');
    expect(page.headers['content-security-policy']).toBe(
      "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    );
    expect(page.headers['x-frame-options']).toBe('DENY');
    expect(page.headers['referrer-policy']).toBe('no-referrer');
    expect(page.text).toBe(readFileSync(path.join(BUILT, 'index.html'), 'utf8'));
    // Every script has a src on this listener; no inline style or handler for the policy to block.
    const scripts = [...page.text.matchAll(/<script\b([^>]*)>([^<]*)<\/script>/g)];
    expect(scripts.length).toBeGreaterThan(0);
    for (const [, attributes, body] of scripts) {
      expect(attributes).toMatch(/ src="\/dashboard\/assets\/main-[A-Z0-9]+\.js"/);
      expect(body).toBe('');
    }
    expect(page.text).not.toMatch(/<style|\sstyle=|\son[a-z]+=|https?:\/\//i);
  });

  it('sends /dashboard to /dashboard/, and answers 405 to a change of the page', async () => {
    const bare = await get('/dashboard');
    expect(bare.status).toBe(308);
    expect(bare.headers.location).toBe('/dashboard/');
    expectErrorBody(await httpRequest({ port, method: 'POST', path: '/dashboard/', json: {} }), {
      status: 405,
      code: 'method_not_allowed',
    });
  });

  it('serves each built asset with its type, cached for a year under its hashed name', async () => {
    const names = readdirSync(path.join(BUILT, 'assets'));
    expect(names.map((name) => path.extname(name)).sort()).toEqual(['.css', '.js']);
    const page = (await get('/dashboard/')).text;
    for (const name of names) {
      expect(page).toContain(`/dashboard/assets/${name}`);
      const asset = await get(`/dashboard/assets/${name}`);
      expect(asset.status).toBe(200);
      expect(asset.headers['cache-control']).toBe('public, max-age=31536000, immutable');
      expect(asset.headers['content-type']).toBe(
        name.endsWith('.js') ? 'text/javascript; charset=utf-8' : 'text/css; charset=utf-8',
      );
      expect(asset.headers['x-content-type-options']).toBe('nosniff');
      expect(asset.text).toBe(readFileSync(path.join(BUILT, 'assets', name), 'utf8'));
    }
  });

  it('serves nothing else from disk: unknown names and climbs out of the folder are 404', async () => {
    for (const route of [
      '/dashboard/assets/main.js',
      '/dashboard/assets/..%2Findex.html',
      '/dashboard/assets/../../package.json',
      '/dashboard/assets/%2e%2e%2f%2e%2e%2fpackage.json',
      '/dashboard/index.html',
      '/dashboard/main.ts',
    ]) {
      const answer = await get(route);
      expectErrorBody(answer, { status: 404, code: 'not_found' });
      expect(answer.text).not.toContain('"name": "tollgate"');
    }
  });

  it('tells a signed-in page why it is read-only', async () => {
    const origin = `http://127.0.0.1:${port}`;
    const signedIn = await httpRequest({
      port,
      method: 'POST',
      path: '/dashboard/session',
      json: { token: ADMIN_TOKEN },
      headers: { origin },
    });
    expect(signedIn.status).toBe(200);
    expect(signedIn.body?.read_only).toBe(READ_ONLY);
    const cookie = /^tollgate_session=[^;]+/.exec(String(signedIn.headers['set-cookie']))?.[0];
    const session = await get('/dashboard/session', { cookie: String(cookie) });
    expect(session.status).toBe(200);
    expect(session.body?.read_only).toBe(READ_ONLY);
  });

  it('answers an account’s decisions of the last 15 minutes, this minute’s counted by outcome', async () => {
    const { keys } = fixtures;
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      statuses.push(
        (await gateway.send({ path: WALLETS, headers: bearer(keys.admin.secretKey) })).status,
      );
    }
    const payout = await gateway.send({
      method: 'POST',
      path: '/api/v1/payouts/',
      headers: bearer(keys.level1.secretKey),
      body: { amount: 1 },
    });
    const walled = await gateway.send({ path: WALLETS, headers: bearer(keys.walled.secretKey) });
    const unknown = await gateway.send({ path: WALLETS, headers: bearer('sk_test_not_a_key') });
    expect([...statuses, payout.status, walled.status, unknown.status]).toEqual([
      200, 200, 200, 429, 403, 403, 401,
    ]);

    const answer = await get('/admin/v1/accounts/acct_open/decisions', bearer(ADMIN_TOKEN));
    expect(answer.status).toBe(200);
    const minutes = answer.body?.minutes as Minute[];
    expect(answer.body?.account_id).toBe('acct_open');
    expect(minutes).toHaveLength(15);
    const starts = minutes.map((minute) => Date.parse(minute.start));
    expect(starts.slice(1).map((start, i) => start - (starts[i] ?? 0))).toEqual(
      Array(14).fill(60_000),
    );
    expect(Date.now() - (starts[14] ?? 0)).toBeLessThan(60_000 + 5_000);
    // Summed over the 15 minutes, so that a minute turning during the test changes nothing. The
    // payout is refused for its role, which is checked before its limit.
    expect(totals(minutes)).toEqual({ allowed: 3, limited: 1, refused: { insufficient_role: 1 } });
    const walledMinutes = await get(
      '/admin/v1/accounts/acct_walled/decisions',
      bearer(ADMIN_TOKEN),
    );
    expect(totals(walledMinutes.body?.minutes as Minute[])).toEqual({
      allowed: 0,
      limited: 0,
      refused: { ip_not_whitelisted: 1 },
    });
  });

  it('answers 404 for an unknown account, and 401 without the admin token', async () => {
    expectErrorBody(await get('/admin/v1/accounts/acct_nobody/decisions', bearer(ADMIN_TOKEN)), {
      status: 404,
      code: 'not_found',
    });
    expectErrorBody(await get('/admin/v1/accounts/acct_open/decisions'), {
      status: 401,
      code: 'missing_credentials',
    });
  });
});
