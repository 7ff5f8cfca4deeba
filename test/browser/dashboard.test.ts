import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import type { RunningGateway } from '../../gateway/start';
import { type AdminGateway, startAdminGateway } from '../helpers/admin-gateway';
import { describeWithBrowser, requireChromium } from '../helpers/browser';
import { until } from '../helpers/database-gateways';
import { expectErrorBody } from '../helpers/error-body';
import { createFixtures } from '../helpers/fixtures';
import { startGatewayPair } from '../helpers/gateway-pair';
import { captureLogs, type CapturedLogs, findLeaks } from '../helpers/logs';
import { startTestPostgres, type TestPostgres } from '../helpers/postgres';
import { type HttpResult, httpRequest } from '../helpers/process';

/**
 * The operators' dashboard in a real browser: Debian's chromium driven by
 * playwright-core, against two gateways as `npm start` runs them on one PostgreSQL. Every step is
 * done on the page of the first gateway's admin listener, as an operator would, and checked where
 * it matters: on the second gateway's API listener, within 1 s. The page must raise no console
 * error and no CSP violation, pass an axe-core scan without a serious or critical violation, and
 * work with a keyboard alone. Screenshots at 1280 and 390 px are written to `SCREENSHOTS`.
 */

const ADMIN_TOKEN = randomBytes(32).toString('base64url');
const PROPAGATION_LIMIT_MS = 1000;
const ROOT = path.join(__dirname, '..', '..');
/** Where the screenshots go (docs/dashboard.png is copied from here). */
const SCREENSHOTS = path.join(ROOT, 'test-results', 'dashboard');
const WALLETS = '/api/v1/wallets/';
const PAYOUTS = '/api/v1/payouts/';

interface Problem {
  readonly kind: string;
  readonly text: string;
}

interface StoredAccount {
  readonly id: string;
  readonly ip_whitelist: string[] | null;
  readonly limits: Record<string, number> | null;
  readonly keys: { readonly id: string; readonly role: string; readonly revoked: boolean }[];
}

interface MadeKey {
  readonly id: string;
  readonly secret: string;
}

/** What an earlier step made, for a later one. */
function made(key: MadeKey | undefined): MadeKey {
  if (key === undefined) throw new Error('an earlier step did not make this key');
  return key;
}

/**
 * A screenshot of the whole page in a window tall enough for all of the content, which scrolls in
 * its own box between the header and the status line.
 */
async function wholePage(page: Page, file: string): Promise<void> {
  const width = page.viewportSize()?.width ?? 1280;
  const height = await page.evaluate(() => {
    const content = document.querySelector('main');
    const hidden = content === null ? 0 : content.scrollHeight - content.clientHeight;
    return document.documentElement.scrollHeight + hidden;
  });
  await page.setViewportSize({ width, height });
  await page.screenshot({ path: file });
}

/** axe-core's serious and critical violations on `page` as it is now. */
async function axeViolations(page: Page): Promise<string[]> {
  // Evaluated by the browser's debugger, which the page's CSP does not govern.
  await page.evaluate(readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8'));
  return page.evaluate(async () => {
    const axe = (
      window as unknown as {
        axe: {
          run(): Promise<{ violations: { id: string; impact: string | null; nodes: unknown[] }[] }>;
        };
      }
    ).axe;
    const { violations } = await axe.run();
    return violations
      .filter((violation) => violation.impact === 'serious' || violation.impact === 'critical')
      .map((violation) => `${violation.impact}: ${violation.id} (${violation.nodes.length})`);
  });
}

/** Chromium's console line for an answer of 400 or more to a request the page made. */
const FAILED_LOAD = /^Failed to load resource: the server responded with a status of (\d+)/;

describeWithBrowser('the dashboard in chromium, two gateways on one PostgreSQL', () => {
  let server: TestPostgres;
  let first: RunningGateway;
  let second: RunningGateway;
  let logs: CapturedLogs;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let origin: string;
  /** Console errors, page errors and CSP violations of the dashboard's page. */
  const problems: Problem[] = [];
  /** The statuses of Chromium's console lines for failed answers (each also in `failedAnswers`). */
  const failedLoads: string[] = [];
  /** Answers of 400 and above the page was given: each must be one a step provoked on purpose. */
  const failedAnswers: string[] = [];
  const figures: Record<string, number> = {};

  const portOf = (url: string | undefined): number => Number(new URL(url ?? 'http://x:1').port);
  const admin = (method: string, route: string, json?: unknown): Promise<HttpResult> =>
    httpRequest({
      port: portOf(first.adminUrl),
      method,
      path: route,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      ...(json === undefined ? {} : { json }),
    });
  /**
   * A request to the second gateway's API. Each step sends from a loopback address of its own
   * (`from`): polling for a key not yet known there spends that address's failed-authentication
   * budget, not the next step's.
   */
  const onSecond = (
    route: string,
    secret: string,
    options: { method?: string; json?: unknown; from?: string } = {},
  ): Promise<HttpResult> =>
    httpRequest({
      port: portOf(second.url),
      path: route,
      headers: { authorization: `Bearer ${secret}` },
      ...options,
    });
  /**
   * Waits until the second gateway answers `status` (and `code`) to `request()` (failing after
   * 5 s), and records under `label` the ms from `since` (the click that made the change).
   */
  const inForce = async (
    label: string,
    since: number,
    status: number,
    code: string | undefined,
    request: () => Promise<HttpResult>,
  ): Promise<HttpResult> => {
    const answer = await until(
      figures,
      undefined,
      (candidate) =>
        candidate.status === status && (code === undefined || candidate.body?.code === code),
      request,
    );
    figures[label] = performance.now() - since;
    return answer;
  };
  const storedAccount = async (id: string): Promise<StoredAccount | undefined> => {
    const listed = await admin('GET', '/admin/v1/accounts');
    expect(listed.status).toBe(200);
    return (listed.body?.accounts as StoredAccount[]).find((account) => account.id === id);
  };

  /** The page's status line, once it says `text`. */
  const announced = (text: string | RegExp): Promise<void> =>
    expectText(page.locator('#live'), text);
  const expectText = async (
    locator: ReturnType<Page['locator']>,
    text: string | RegExp,
  ): Promise<void> => {
    await locator.filter({ hasText: text }).first().waitFor({ timeout: 5000 });
  };
  const focused = (): Promise<{ text: string; label: string; row: string }> =>
    page.evaluate(() => {
      const active = document.activeElement;
      return {
        text: active?.textContent.trim() ?? '',
        label:
          active instanceof HTMLElement && 'labels' in active
            ? ([...((active as HTMLInputElement).labels ?? [])][0]?.textContent ?? '')
            : '',
        row: active?.closest('tr')?.querySelector('th code')?.textContent ?? '',
      };
    });
  /** Presses Tab until `wanted` holds for the focused element (at most 300 presses). */
  const tabTo = async (
    wanted: (element: { text: string; label: string; row: string }) => boolean,
  ): Promise<void> => {
    for (let presses = 0; presses < 300; presses++) {
      await page.keyboard.press('Tab');
      if (wanted(await focused())) return;
    }
    throw new Error('Tab never reached the element wanted');
  };
  const selectAccount = async (id: string): Promise<void> => {
    await page.getByRole('button', { name: new RegExp(`^${id} `) }).click();
    await page.getByRole('heading', { name: `Account ${id}` }).waitFor();
  };
  /** A page whose console errors, page errors and CSP violations go into `problems`. */
  const watchedPage = async (
    owner: BrowserContext,
    viewport: { width: number; height: number },
  ): Promise<Page> => {
    const opened = await owner.newPage();
    await opened.setViewportSize(viewport);
    await opened.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (event) => {
        console.error(`CSP violation: ${event.violatedDirective} ${event.blockedURI}`);
      });
    });
    opened.on('console', (message) => {
      if (message.type() !== 'error') return;
      const failed = FAILED_LOAD.exec(message.text());
      if (failed === null) problems.push({ kind: 'console', text: message.text() });
      else failedLoads.push(String(failed[1]));
    });
    opened.on('pageerror', (error) => problems.push({ kind: 'pageerror', text: error.message }));
    opened.on('response', (response) => {
      if (response.status() >= 400) {
        failedAnswers.push(`${response.status()} ${new URL(response.url()).pathname}`);
      }
    });
    return opened;
  };
  const keyRow = (id: string): ReturnType<Page['locator']> =>
    page.locator('tr', { has: page.locator('th code', { hasText: new RegExp(`^${id}$`) }) });

  beforeAll(async () => {
    const executablePath = requireChromium();
    server = await startTestPostgres();
    logs = captureLogs();
    ({ first, second } = await startGatewayPair(server, 'dashboard', ADMIN_TOKEN, logs.logger));
    origin = `http://127.0.0.1:${portOf(first.adminUrl)}`;
    // One account made with the admin API, so that the list has something before the page adds.
    expect((await admin('POST', '/admin/v1/accounts', { id: 'acct_existing' })).status).toBe(201);

    browser = await chromium.launch({ executablePath });
    context = await browser.newContext();
    page = await watchedPage(context, { width: 1280, height: 900 });
    mkdirSync(SCREENSHOTS, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    await browser.close();
    await second.stop(500);
    await first.stop(500);
    server.destroy();
    process.stdout.write(
      `[dashboard] screenshots in ${SCREENSHOTS}; in force on the second gateway after: ${Object.entries(
        figures,
      )
        .map(([label, ms]) => `${label} ${ms.toFixed(0)} ms`)
        .join(', ')}\n`,
    );
  });

  it('shows the sign-in form at once, and signs in with the keyboard alone', async () => {
    await page.goto(`${origin}/dashboard`);
    expect(new URL(page.url()).pathname).toBe('/dashboard/');
    await page.getByLabel('Admin token').waitFor();
    expect(await focused()).toMatchObject({ label: 'Admin token' });
    await page.keyboard.type(ADMIN_TOKEN);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Accounts' }).waitFor();
    await announced('Signed in.');
    // The cookie is the session; the page kept no token anywhere it can read.
    const cookies = await context.cookies();
    expect(cookies.map((cookie) => [cookie.name, cookie.httpOnly, cookie.sameSite])).toEqual([
      ['tollgate_session', true, 'Strict'],
    ]);
    const stored = await page.evaluate(() =>
      JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)]),
    );
    expect(stored).not.toContain(ADMIN_TOKEN);
    expect(await page.content()).not.toContain(ADMIN_TOKEN);
  });

  it('lists the accounts, creates one, and a key whose secret is shown once', async () => {
    await expectText(page.locator('.account-list'), 'acct_existing');
    await page.getByLabel('New account id').fill('acct_shop');
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.getByRole('heading', { name: 'Account acct_shop' }).waitFor();
    expect(await storedAccount('acct_shop')).toMatchObject({ ip_whitelist: null });

    await page.getByLabel('Role of the new key').selectOption('level-1');
    // A double click makes one key: the button is disabled while its request runs.
    const clickedAt = performance.now();
    await page.getByRole('button', { name: 'Create key' }).dblclick();
    await announced(/^Key key_\w+ created\.$/);
    const secret = await page.getByRole('textbox', { name: 'Secret key' }).inputValue();
    expect(secret).toMatch(/^sk_test_/);
    expect(await focused()).toMatchObject({ text: 'Copy secret' });
    await inForce('create', clickedAt, 200, undefined, () =>
      onSecond(WALLETS, secret, { from: '127.0.1.1' }),
    );
    expect(figures.create).toBeLessThan(PROPAGATION_LIMIT_MS);
    const stored = (await storedAccount('acct_shop'))?.keys ?? [];
    expect(stored).toHaveLength(1);
    const keyId = String(stored[0]?.id);
    await expectText(keyRow(keyId), 'level-1');

    // Shown once: after a reload the page has no secret, and the server never gives it again.
    await page.reload();
    await page.getByRole('heading', { name: 'Accounts' }).waitFor();
    expect(await page.content()).not.toContain(secret);
    expect((await admin('GET', '/admin/v1/accounts')).text).not.toContain(secret);
    keys.first = { id: keyId, secret };
  });

  const keys: Record<string, MadeKey> = {};

  it('changes a key’s role; the second gateway applies it within 1 s', async () => {
    const { id, secret } = made(keys.first);
    const payout = (): Promise<HttpResult> =>
      onSecond(PAYOUTS, secret, { method: 'POST', json: { amount: 1 }, from: '127.0.1.2' });
    expectErrorBody(await payout(), { status: 403, code: 'insufficient_role' });
    await selectAccount('acct_shop');
    await page.getByLabel(`Role of ${id}`).selectOption('level-2');
    const clickedAt = performance.now();
    await page.getByRole('button', { name: 'Change role' }).click();
    await announced(`Key ${id} is now level-2.`);
    const allowed = await until(figures, undefined, (answer) => answer.status !== 403, payout);
    figures.role = performance.now() - clickedAt;
    expect(allowed.status).toBeLessThan(300);
    expect(figures.role).toBeLessThan(PROPAGATION_LIMIT_MS);
    await expectText(keyRow(id), 'level-2');
  });

  it('refuses a bad CIDR beside its entry and saves nothing; a good one is enforced', async () => {
    const { secret } = made(keys.first);
    await page.getByRole('button', { name: 'Add entry' }).click();
    const entry = page.getByLabel('Address or CIDR range').last();
    await entry.fill('10.0.0.0/33');
    await page.getByRole('button', { name: 'Save whitelist' }).click();
    await announced(/^Not saved: entry 1: /);
    expect(await entry.getAttribute('aria-invalid')).toBe('true');
    const beside = page.locator(`#${await entry.getAttribute('aria-describedby')}`);
    expect(await beside.textContent()).toMatch(/\S/);
    expect(await storedAccount('acct_shop')).toMatchObject({ ip_whitelist: null });
    expect((await onSecond(WALLETS, secret, { from: '127.0.1.3' })).status).toBe(200);

    await entry.fill('127.0.0.2');
    const savedAt = performance.now();
    await page.getByRole('button', { name: 'Save whitelist' }).click();
    await announced('Whitelist of acct_shop saved.');
    expect((await storedAccount('acct_shop'))?.ip_whitelist).toEqual(['127.0.0.2/32']);
    await inForce('whitelist', savedAt, 403, 'ip_not_whitelisted', () =>
      onSecond(WALLETS, secret, { from: '127.0.1.3' }),
    );
    expect(figures.whitelist).toBeLessThan(PROPAGATION_LIMIT_MS);
    expect((await onSecond(WALLETS, secret, { from: '127.0.0.2' })).status).toBe(200);

    const liftedAt = performance.now();
    await page.getByRole('button', { name: 'Lift restriction' }).click();
    await announced('Whitelist of acct_shop lifted.');
    await inForce('lift', liftedAt, 200, undefined, () =>
      onSecond(WALLETS, secret, { from: '127.0.1.4' }),
    );
    expect(figures.lift).toBeLessThan(PROPAGATION_LIMIT_MS);
  });

  it('rolls a key with a 2 s grace: the old key then answers 401 expired_api_key', async () => {
    const { id, secret } = made(keys.first);
    await page.getByLabel(`Grace seconds for ${id}`).fill('2');
    const rolledAt = performance.now();
    await page.getByRole('button', { name: 'Roll' }).click();
    await announced(new RegExp(`^Key ${id} rolled: the new key is `));
    // Still in its grace, a moment after the roll.
    expect((await onSecond(WALLETS, secret, { from: '127.0.1.6' })).status).toBe(200);
    const fresh = await page.getByRole('textbox', { name: 'Secret key' }).inputValue();
    expect(fresh).toMatch(/^sk_test_/);
    expect(fresh).not.toBe(secret);
    await inForce('roll (new key)', rolledAt, 200, undefined, () =>
      onSecond(WALLETS, fresh, { from: '127.0.1.5' }),
    );
    expect(figures['roll (new key)']).toBeLessThan(PROPAGATION_LIMIT_MS);
    await inForce('roll (old key expired)', rolledAt, 401, 'expired_api_key', () =>
      onSecond(WALLETS, secret, { from: '127.0.1.6' }),
    );
    expect(performance.now() - rolledAt).toBeGreaterThan(1500);
    const stored = (await storedAccount('acct_shop'))?.keys ?? [];
    const freshId = stored.map((key) => key.id).find((candidate) => candidate !== id);
    keys.rolled = { id: String(freshId), secret: fresh };
  });

  it('revokes a key with the keyboard alone, after a confirmation naming it', async () => {
    const { id, secret } = made(keys.rolled);
    await page.reload();
    await page.getByRole('heading', { name: 'Accounts' }).waitFor();
    await page.locator('body').focus();
    await tabTo((element) => element.text.startsWith('acct_shop'));
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Account acct_shop' }).waitFor();
    await tabTo((element) => element.text === 'Revoke…' && element.row === id);
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog', { name: `Revoke key ${id}?` });
    await dialog.waitFor();
    expect(await focused()).toMatchObject({ text: 'Cancel' });
    await page.screenshot({ path: path.join(SCREENSHOTS, 'revoke-1280.png') });
    await page.keyboard.press('Tab');
    expect(await focused()).toMatchObject({ text: `Revoke ${id}` });
    const confirmedAt = performance.now();
    await page.keyboard.press('Enter');
    await announced(`Key ${id} revoked.`);
    await inForce('revoke', confirmedAt, 401, undefined, () =>
      onSecond(WALLETS, secret, { from: '127.0.1.7' }),
    );
    expect(figures.revoke).toBeLessThan(PROPAGATION_LIMIT_MS);
    await expectText(keyRow(id), 'revoked');
  });

  it('passes an axe-core scan without a serious or critical violation, signed in and out', async () => {
    await selectAccount('acct_shop');
    await page.locator('.chart-box:not([aria-busy])').waitFor();
    expect(await axeViolations(page)).toEqual([]);
    const phone = await watchedPage(context, { width: 390, height: 844 });
    const signedOutContext = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    try {
      await phone.goto(`${origin}/dashboard/`);
      await phone.getByRole('button', { name: /^acct_shop / }).click();
      await phone.locator('.chart-box:not([aria-busy])').waitFor();
      expect(await axeViolations(phone)).toEqual([]);
      const signedOut = await watchedPage(signedOutContext, { width: 1280, height: 900 });
      await signedOut.goto(`${origin}/dashboard/`);
      await signedOut.getByLabel('Admin token').waitFor();
      expect(await axeViolations(signedOut)).toEqual([]);
    } finally {
      await phone.close();
      await signedOutContext.close();
    }
  });

  it('shows the account’s limits and its last 15 minutes of decisions on this instance', async () => {
    // Traffic through the first gateway, whose admin listener serves the page: 5 allowed, 2
    // refused for their role.
    const created = await admin('POST', '/admin/v1/accounts/acct_shop/keys', { role: 'level-1' });
    expect(created.status).toBe(201);
    const secret = String(created.body?.secret_key);
    keys.traffic = { id: String(created.body?.id), secret };
    const onFirst = (route: string, method = 'GET'): Promise<HttpResult> =>
      httpRequest({
        port: portOf(first.url),
        method,
        path: route,
        headers: { authorization: `Bearer ${secret}` },
        from: '127.0.1.8',
        ...(method === 'POST' ? { json: { amount: 1 } } : {}),
      });
    await until(
      figures,
      undefined,
      (answer) => answer.status === 200,
      () => onFirst(WALLETS),
    );
    for (let i = 0; i < 4; i++) expect((await onFirst(WALLETS)).status).toBe(200);
    for (let i = 0; i < 2; i++) {
      expectErrorBody(await onFirst(PAYOUTS, 'POST'), { status: 403, code: 'insufficient_role' });
    }

    await page.reload();
    await selectAccount('acct_shop');
    await page.locator('.usage:not([aria-busy]) table').waitFor();
    const scopes = await page.locator('.usage-table tbody th').allTextContents();
    expect(scopes.sort()).toEqual(['authenticated', 'payments']);
    await expectText(
      page.locator('.usage-table tbody tr', { hasText: 'payments' }),
      /\d+ of \d+ left/,
    );

    await page.locator('.chart-box:not([aria-busy])').waitFor();
    const rows = page.locator('.chart-box table tbody tr');
    expect(await rows.count()).toBe(15);
    const cells = await rows.evaluateAll((trs) =>
      trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
    );
    const allowed = cells.reduce((sum, row) => sum + Number(row[0]), 0);
    const refused = cells.map((row) => row[2]).filter((text) => text !== '0');
    expect(allowed).toBeGreaterThanOrEqual(5);
    expect(refused.join(', ')).toMatch(/^insufficient_role \d+(, insufficient_role \d+)?$/);
    expect(await page.locator('.chart-box svg rect.bar-allowed').count()).toBeGreaterThan(0);
    expect(await page.locator('.chart-box .refused-codes').textContent()).toBe(
      'Refused, by code: insufficient_role 2.',
    );
  });

  it('saves an account’s own limit; the second gateway applies it within 1 s', async () => {
    const { secret } = made(keys.traffic);
    const policy = async (): Promise<HttpResult> =>
      onSecond(WALLETS, secret, { from: '127.0.1.9' });
    expect((await policy()).headers['ratelimit-policy']).toMatch(/^"payments"; q=1500;/);
    await page.getByLabel('Own limit per minute for payments').fill('7');
    const savedAt = performance.now();
    await page.getByRole('button', { name: 'Save limits' }).click();
    await announced('Limits of acct_shop saved.');
    expect((await storedAccount('acct_shop'))?.limits).toEqual({ payments: 7 });
    await until(
      figures,
      undefined,
      (answer) => String(answer.headers['ratelimit-policy']).startsWith('"payments"; q=7;'),
      policy,
    );
    figures.limits = performance.now() - savedAt;
    expect(figures.limits).toBeLessThan(PROPAGATION_LIMIT_MS);
    await expectText(page.locator('.usage-table tbody tr', { hasText: 'payments' }), / of 7 left/);
  });

  it('sends the page back to sign-in when its session has ended elsewhere', async () => {
    const cookie = (await context.cookies()).find((found) => found.name === 'tollgate_session');
    const headers = { cookie: `tollgate_session=${cookie?.value ?? ''}`, origin };
    const current = await httpRequest({
      port: portOf(first.adminUrl),
      path: '/dashboard/session',
      headers,
    });
    const ended = await httpRequest({
      port: portOf(first.adminUrl),
      method: 'POST',
      path: '/dashboard/session/end',
      headers: { ...headers, 'x-csrf-token': String(current.body?.csrf_token) },
    });
    expect(ended.status).toBeLessThan(300);
    const { id } = made(keys.traffic);
    await page.getByLabel(`Role of ${id}`).selectOption('level-3');
    await keyRow(id).getByRole('button', { name: 'Change role' }).click();
    await announced('Your session has ended. Sign in again.');
    await page.getByLabel('Admin token').waitFor();
    expect((await storedAccount('acct_shop'))?.keys.find((key) => key.id === id)?.role).toBe(
      'level-1',
    );
    await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Accounts' }).waitFor();
  });

  it('writes screenshots at 1280 and 390 px', async () => {
    await selectAccount('acct_shop');
    await page.locator('.chart-box:not([aria-busy])').waitFor();
    await wholePage(page, path.join(SCREENSHOTS, 'dashboard-1280.png'));
    const phone = await watchedPage(context, { width: 390, height: 844 });
    try {
      await phone.goto(`${origin}/dashboard/`);
      await phone.getByRole('button', { name: /^acct_shop / }).click();
      await phone.locator('.chart-box:not([aria-busy])').waitFor();
      const overflow = await phone.evaluate(
        () => document.documentElement.scrollWidth - document.documentElement.clientWidth,
      );
      const wide = await phone.evaluate(() =>
        [...document.querySelectorAll('body *')]
          .filter((element) => element.getBoundingClientRect().right > window.innerWidth + 0.5)
          .filter((element) => element.closest('.table-scroll, .visually-hidden') === null)
          .map((element) => `${element.tagName}.${element.className}`),
      );
      expect({ overflow, wide }).toEqual({ overflow: 0, wide: [] });
      await wholePage(phone, path.join(SCREENSHOTS, 'dashboard-390.png'));
    } finally {
      await phone.close();
    }
  });

  it('at 390 px the status line, saying two lines, covers nothing of the page', async () => {
    const phone = await watchedPage(context, { width: 390, height: 844 });
    try {
      await phone.goto(`${origin}/dashboard/`);
      await phone.getByRole('button', { name: /^acct_shop / }).click();
      await phone.locator('.chart-box:not([aria-busy])').waitFor();
      // A message as long as a roll's, which wraps at this width.
      await phone.evaluate(() => {
        const live = document.getElementById('live');
        if (live !== null) {
          live.textContent =
            'Rolled key key_0123456789abcdef: it stops working at 2026-11-27T01:00:00.000Z.';
        }
      });
      const covered = await phone.evaluate(() => {
        const status = document.getElementById('live')?.getBoundingClientRect();
        const content = document.querySelector('main');
        if (status === undefined || content === null) return { found: false };
        // Every element as drawn: clipped to the content's box and to the window.
        const clip = content.getBoundingClientRect();
        const drawnOver = (element: Element): boolean => {
          const box = element.getBoundingClientRect();
          const top = Math.max(box.top, clip.top, 0);
          const bottom = Math.min(box.bottom, clip.bottom, window.innerHeight);
          const left = Math.max(box.left, clip.left, status.left);
          const right = Math.min(box.right, clip.right, status.right);
          return (
            right - left > 0.5 && Math.min(bottom, status.bottom) - Math.max(top, status.top) > 0.5
          );
        };
        return {
          found: true,
          statusHeight: Math.round(status.height),
          longerThanWindow: content.scrollHeight > content.clientHeight,
          // One scrolling box, the content's: the window itself does not scroll.
          windowScrolls: document.documentElement.scrollHeight > window.innerHeight,
          under: [...content.querySelectorAll('*')]
            .filter(drawnOver)
            .map((element) => `${element.tagName}.${element.className}`),
        };
      });
      expect(covered).toMatchObject({
        found: true,
        longerThanWindow: true,
        windowScrolls: false,
        under: [],
      });
      // Two lines of text at least: the message wraps and the line grows, still over nothing.
      expect((covered as { statusHeight: number }).statusHeight).toBeGreaterThan(40);
    } finally {
      await phone.close();
    }
  });

  it('refuses a change sent from another origin with 403 forbidden_origin', async () => {
    const { id } = made(keys.first);
    // A page on another port of the same host: same site, so the browser sends the cookie.
    const evil = http.createServer((_req, res) => {
      res.setHeader('Content-Type', 'text/html');
      res.end(
        `<form method="post" action="${origin}/admin/v1/keys/${id}/revoke"><button>go</button></form>`,
      );
    });
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
    const attacker = await context.newPage();
    try {
      await attacker.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
      const [answer] = await Promise.all([
        attacker.waitForResponse((response) => response.url().endsWith(`/keys/${id}/revoke`)),
        attacker.getByRole('button', { name: 'go' }).click(),
      ]);
      expect(answer.status()).toBe(403);
      expect(((await answer.json()) as { code?: string }).code).toBe('forbidden_origin');
    } finally {
      await attacker.close();
      await new Promise((resolve) => evil.close(resolve));
    }
    const stored = (await storedAccount('acct_shop'))?.keys ?? [];
    expect(stored.find((key) => key.id === id)?.revoked).toBe(false);
  });

  it('signs out: the cookie is gone and the sign-in form is back', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('Admin token').waitFor();
    await announced('Signed out.');
    expect((await context.cookies()).map((cookie) => cookie.name)).toEqual([]);
  });

  it('raised no console error and no CSP violation, and failed only where a step meant it to', () => {
    expect(problems).toEqual([]);
    // The bad CIDR; the change made after the session ended elsewhere, and the page's question
    // whether it still had one. Before the first sign-in, no question for a session there was not.
    expect(failedAnswers).toEqual([
      '400 /admin/v1/accounts/acct_shop/ip-whitelist',
      `403 /admin/v1/keys/${made(keys.traffic).id}`,
      '401 /dashboard/session',
    ]);
    expect(failedLoads).toEqual(['400', '403', '401']);
    const secrets = [ADMIN_TOKEN, ...Object.values(keys).map((key) => key.secret)];
    expect(findLeaks(logs.lines.join('\n'), secrets)).toEqual([]);
  });
});

describeWithBrowser('the dashboard in chromium on a keys file: read-only, and says why', () => {
  const fixtures = createFixtures();
  let started: AdminGateway;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];

  beforeAll(async () => {
    const executablePath = requireChromium();
    started = await startAdminGateway(fixtures.document, ADMIN_TOKEN, captureLogs().logger);
    browser = await chromium.launch({ executablePath });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(message.text());
    });
    page.on('pageerror', (error) => problems.push(error.message));
  }, 60_000);
  afterAll(async () => {
    await browser.close();
    await started.stop();
  });

  it('lists accounts and keys with the reason it changes nothing, and offers no change', async () => {
    await page.goto(`http://127.0.0.1:${started.adminPort}/dashboard/`);
    await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('note').filter({ hasText: 'TOLLGATE_DATABASE_URL' }).waitFor();
    await page.getByRole('button', { name: /^acct_open / }).click();
    await page.getByRole('heading', { name: 'Account acct_open' }).waitFor();
    const keyIds = await page.locator('table.keys tbody th code').allTextContents();
    expect(keyIds.sort()).toEqual(
      fixtures.document.accounts
        .find((account) => account.id === 'acct_open')
        ?.keys.map((key) => key.id)
        .sort(),
    );
    await page.locator('.usage:not([aria-busy]) table').waitFor();
    for (const name of [
      'Create account',
      'Create key',
      'Change role',
      'Roll',
      'Revoke…',
      'Save whitelist',
      'Save limits',
    ]) {
      expect(await page.getByRole('button', { name }).count()).toBe(0);
    }
    await page.getByRole('button', { name: /^acct_walled / }).click();
    await expectVisible(page, 'Secret-key requests only from: 127.0.0.2/32');
    expect(problems).toEqual([]);
  });
});

async function expectVisible(page: Page, text: string): Promise<void> {
  await page.getByText(text, { exact: false }).first().waitFor({ timeout: 5000 });
}
