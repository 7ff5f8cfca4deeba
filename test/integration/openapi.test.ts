import { readFileSync } from 'node:fs';
import express from 'express';
import request from 'supertest';
import { createAdminApp, type AdminAppOptions } from '../../gateway/admin';
import { ADMIN_ROUTES } from '../../gateway/admin/routes';
import {
  ANSWER_CHECKS_VARIABLE,
  checkedErrorHandler,
  forwardAuthAnswerCheck,
} from '../../gateway/openapi/answer-check';
import { apiDescription, DOCUMENT_PATH } from '../../gateway/openapi/document';
import { ERROR_CODES } from '../../lib';
import { InvalidRequestError } from '../../lib/errors';
import { errorHandler } from '../../lib/entry/express';
import { sha256 } from '../../lib/keys/key-store';
import { expectErrorBody } from '../helpers/error-body';
import { createFixtures } from '../helpers/fixtures';
import { captureLogs } from '../helpers/logs';

/**
 * The API description (`openapi/tollgate-admin.json`): it names every admin route and error code
 * the code has; the admin listener serves it; the answer checks turn an answer it does not allow
 * into a 500 with a log line naming the route; and the admin requests it refuses are 400s in the
 * error body, in its words.
 */

const ADMIN_TOKEN = 'openapi-admin-token-0123456789abcdef';
const READ_ONLY = 'Keys come from a keys file';
const description = apiDescription();

function adminApp(overrides: Partial<AdminAppOptions> = {}) {
  const fixtures = createFixtures();
  const logs = captureLogs();
  const app = createAdminApp({
    directory: fixtures.ring,
    tokenSha256: sha256(ADMIN_TOKEN).toString('hex'),
    logger: logs.logger,
    readOnlyReason: READ_ONLY,
    ...overrides,
  });
  return { app, logs };
}

const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };

describe('the API description', () => {
  it('is OpenAPI 3.1 and describes every admin route, and only those', () => {
    expect(description.document.openapi).toMatch(/^3\.1\./);
    const described = Object.entries(description.document.paths)
      .filter(([path]) => path.startsWith('/admin/v1/') && path !== '/admin/v1/openapi.json')
      .flatMap(([path, operations]) =>
        Object.keys(operations).map((method) => `${method.toUpperCase()} ${path}`),
      )
      .sort();
    const routes = ADMIN_ROUTES.map(
      (route) => `${route.method} ${route.path.replace(/:([a-z]+)/g, '{$1}')}`,
    ).sort();
    expect(described).toEqual(routes);
  });

  it("lists exactly the kit's error codes", () => {
    const schema = description.at('#/components/schemas/ErrorCode') as { enum: string[] };
    expect([...schema.enum].sort()).toEqual([...ERROR_CODES].sort());
  });

  it('is switched on for every app the tests start', () => {
    expect(process.env[ANSWER_CHECKS_VARIABLE]).toBe('1');
  });
});

describe('GET /admin/v1/openapi.json', () => {
  it('serves the description as it is in the repository, without the admin token', async () => {
    const { app } = adminApp();
    const answer = await request(app).get('/admin/v1/openapi.json');
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toMatch(/^application\/json/);
    expect(answer.headers['cache-control']).toBe('no-store');
    expect(answer.body).toEqual(JSON.parse(readFileSync(DOCUMENT_PATH, 'utf8')));
    const posted = await request(app).post('/admin/v1/openapi.json').set(auth);
    expectErrorBody(posted, { status: 405, code: 'method_not_allowed' });
  });

  it('answers 404 where key management is off (no admin token)', async () => {
    const { app } = adminApp({ tokenSha256: undefined });
    expectErrorBody(await request(app).get('/admin/v1/openapi.json'), {
      status: 404,
      code: 'not_found',
    });
  });
});

describe('answer checks', () => {
  // An answer of the wrong shape: `limit` as text, where the description says a whole number.
  const wrongUsage: AdminAppOptions['usage'] = () =>
    Promise.resolve([
      { scope: 'payments', limit: 'many' as unknown as number, remaining: 1, resetSeconds: 3 },
    ]);

  it('turn an answer the description does not allow into 500 internal_error, logged with the route', async () => {
    const { app, logs } = adminApp({ usage: wrongUsage, checkAnswers: true });
    const answer = await request(app).get('/admin/v1/accounts/acct_open/usage').set(auth);
    expectErrorBody(answer, { status: 500, code: 'internal_error', message: 'Internal error' });
    const mismatch = logs.entries().find((entry) => entry.event === 'openapi.answer_mismatch');
    expect(mismatch).toMatchObject({
      route: 'GET /admin/v1/accounts/{id}/usage',
      status: 200,
      error: expect.stringMatching(/\/scopes\/0\/limit must be integer/) as unknown,
    });
  });

  it('send the same answer unchanged when switched off', async () => {
    const { app } = adminApp({ usage: wrongUsage, checkAnswers: false });
    const answer = await request(app).get('/admin/v1/accounts/acct_open/usage').set(auth);
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({
      account_id: 'acct_open',
      scopes: [{ scope: 'payments', limit: 'many', remaining: 1, reset_seconds: 3 }],
    });
  });

  it('pass the answers the description allows', async () => {
    const { app } = adminApp({ checkAnswers: true });
    const listed = await request(app).get('/admin/v1/accounts').set(auth);
    expect(listed.status).toBe(200);
    expect(listed.body).toHaveProperty('accounts');
  });

  it("hold an error handler's answers to the error body", async () => {
    const logs = captureLogs();
    const { logger } = logs;
    const app = express();
    app.get('/fine', (_req, _res, next) => {
      next(new InvalidRequestError('a fine refusal'));
    });
    app.get('/wrong', () => {
      throw new Error('boom');
    });
    const handler = errorHandler({ logger });
    // A handler that answers an error in a shape of its own.
    app.use(
      checkedErrorHandler(
        (error: unknown, req, res, next) => {
          if (req.path === '/wrong') res.status(400).json({ error: 'not the error body' });
          else handler(error, req, res, next);
        },
        description,
        logger,
      ),
    );
    const fine = await request(app).get('/fine');
    expect(fine.status).toBe(400);
    expect(fine.body).toMatchObject({ code: 'invalid_request', message: 'a fine refusal' });
    const wrong = await request(app).get('/wrong');
    expect(wrong.status).toBe(500);
    expect(wrong.body).toMatchObject({ status: 500, code: 'internal_error' });
    expect(logs.entries().some((entry) => entry.event === 'openapi.answer_mismatch')).toBe(true);
  });

  it("hold the forward-auth door's answers to their operations: an allowed answer has no body", async () => {
    const { logger } = captureLogs();
    const app = express();
    app.use('/authz', forwardAuthAnswerCheck(description, logger, '/authz'));
    app.get('/authz/forward-auth', (req, res) => {
      res.setHeader('Cache-Control', 'no-store');
      res.status(200).end(req.query.body === undefined ? '' : 'allowed');
    });
    expect((await request(app).get('/authz/forward-auth')).status).toBe(200);
    const wrong = await request(app).get('/authz/forward-auth?body=1');
    expect(wrong.status).toBe(500);
    expect(wrong.body).toMatchObject({ code: 'internal_error' });
  });
});

describe('admin requests checked against the description', () => {
  it.each<[string, string, unknown, string | RegExp]>([
    [
      'POST',
      '/admin/v1/accounts',
      { id: 'acct_x', ipWhitelist: [] },
      'unknown field "ipWhitelist"; expected id, ip_whitelist, limits',
    ],
    ['POST', '/admin/v1/accounts', {}, /^id: 1 to 64 letters/],
    ['POST', '/admin/v1/accounts', { id: "x'; DROP TABLE keys;--" }, /^id: 1 to 64 letters/],
    [
      'PUT',
      '/admin/v1/accounts/acct_open/limits',
      {},
      /^limits: an object of scope name to requests per minute, or null/,
    ],
    [
      'PUT',
      '/admin/v1/accounts/acct_open/limits',
      { limits: { payments: 0 } },
      'limits.payments: a whole number of requests per minute from 1 to 1000000',
    ],
    [
      'PUT',
      '/admin/v1/accounts/acct_open/limits',
      { limits: [10] },
      /^limits: an object of scope name/,
    ],
    ['PUT', '/admin/v1/accounts/acct_open/ip-whitelist', { entries: [] }, /^entries: a list/],
    [
      'PATCH',
      '/admin/v1/keys/key_l1',
      { role: 'level-9' },
      'role: unknown role "level-9"; expected one of level-1, level-2, level-3, administrator',
    ],
    ['PATCH', '/admin/v1/keys/key_l1', {}, 'role or permissions is required'],
    ['PATCH', '/admin/v1/keys/key_l1', { permissions: [1] }, /^permissions\[0\]: /],
    ['POST', '/admin/v1/keys/key_l1/roll', {}, 'grace_seconds: a whole number from 0 to 604800'],
    [
      'POST',
      '/admin/v1/keys/key_l1/roll',
      { grace_seconds: 604_801 },
      'grace_seconds: a whole number from 0 to 604800',
    ],
    ['POST', '/admin/v1/keys/key_l1/revoke', { now: true }, 'This route takes no body fields'],
  ])('%s %s %j: 400 invalid_request, before the key store', async (method, path, json, message) => {
    const { app } = adminApp();
    const agent = request(app);
    const sent =
      method === 'POST' ? agent.post(path) : method === 'PUT' ? agent.put(path) : agent.patch(path);
    const answer = await sent.set(auth).send(json as object);
    const body = expectErrorBody(answer, { status: 400, code: 'invalid_request' });
    if (typeof message === 'string') expect(body.message).toBe(message);
    else expect(body.message).toMatch(message);
  });

  it('lets a request the description allows reach the key store (a keys file: 409)', async () => {
    const { app } = adminApp();
    const answer = await request(app)
      .put('/admin/v1/accounts/acct_open/limits')
      .set(auth)
      .send({ limits: { payments: 10 } });
    expectErrorBody(answer, { status: 409, code: 'conflict', message: READ_ONLY });
  });

  it('checks the token before the body: a wrong body without the token is a 401', async () => {
    const { app } = adminApp();
    const answer = await request(app).post('/admin/v1/accounts').send({ nonsense: 1 });
    expectErrorBody(answer, { status: 401, code: 'missing_credentials' });
  });
});
