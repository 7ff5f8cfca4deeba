import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Express, RequestHandler } from 'express';
import express5 from 'express';
import {
  ConfigurationError,
  notFound,
  TokenService,
  type Tollgate,
  tollgate,
  TollgateError,
} from '../../lib';
import { createFixtures, type Fixtures, TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs } from '../helpers/logs';

/**
 * `protect({ idempotency })` in an existing app, on Express 4 and Express 5 (contract section 17,
 * "the kit"): the handler's answer, however it is written (`res.json`, `res.send`, `res.write` and
 * `res.end` in chunks, a bare `res.end()`, a HEAD answer, a handler that throws), is kept as it
 * leaves and replayed byte for byte to a retry with the same key, marked
 * `Idempotent-Replayed: true`, without running the handler again. Real HTTP on loopback.
 */

// An npm alias of express@4 (package.json devDependencies), next to Express 5.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const express4 = require('express4') as typeof express5;

const MAJORS = [
  { label: 'Express 4', express: express4 },
  { label: 'Express 5', express: express5 },
] as const;

const SECRET = 'kit-idempotency-secret-0123456789abcdefghij';
const SCOPES = { payouts: { limit: 10_000, per: 'account' } } as const;

interface Reply {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly bytes: Buffer;
  readonly text: string;
  readonly json: Record<string, unknown> | undefined;
}

function call(
  port: number,
  options: {
    method?: string;
    path: string;
    headers?: Record<string, string>;
    body?: string;
  },
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const payload = options.body === undefined ? undefined : Buffer.from(options.body);
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: options.method ?? 'POST',
        path: options.path,
        agent: false,
        headers: {
          ...options.headers,
          ...(payload === undefined
            ? {}
            : { 'content-type': 'application/json', 'content-length': String(payload.length) }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const bytes = Buffer.concat(chunks);
          const text = bytes.toString('utf8');
          let json: Record<string, unknown> | undefined;
          try {
            json = JSON.parse(text) as Record<string, unknown>;
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, bytes, text, json });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

function expectError(reply: Reply, status: number, code: string): Record<string, unknown> {
  expect({ status: reply.status, json: reply.json }).toEqual({
    status,
    json: {
      status,
      code,
      message: expect.any(String) as unknown,
      request_id: reply.headers['x-request-id'],
    },
  });
  expect(reply.headers['content-type']).toMatch(/^application\/json/);
  return reply.json ?? {};
}

/** The first answer and its retry: the same status, Content-Type and bytes; the retry marked. */
function expectReplayed(first: Reply, retry: Reply): void {
  expect(first.headers['idempotent-replayed']).toBeUndefined();
  expect(retry.headers['idempotent-replayed']).toBe('true');
  expect(retry.status).toBe(first.status);
  expect(retry.headers['content-type']).toBe(first.headers['content-type']);
  expect(retry.bytes.equals(first.bytes)).toBe(true);
  expect(retry.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  expect(retry.headers['x-request-id']).not.toBe(first.headers['x-request-id']);
}

const faults: unknown[] = [];
const onFault = (error: unknown): void => {
  faults.push(error);
};
beforeAll(() => {
  process.on('unhandledRejection', onFault);
  process.on('uncaughtException', onFault);
});
afterAll(() => {
  process.off('unhandledRejection', onFault);
  process.off('uncaughtException', onFault);
  expect(faults).toEqual([]);
});

for (const major of MAJORS) {
  describe(`protect({ idempotency }) on ${major.label}`, () => {
    let fixtures: Fixtures;
    let gate: Tollgate<keyof typeof SCOPES>;
    let server: http.Server;
    let port: number;
    const calls: Record<string, number> = {};
    const count = (name: string): number => (calls[name] = (calls[name] ?? 0) + 1);
    const logs = captureLogs();

    beforeAll(async () => {
      fixtures = createFixtures();
      gate = tollgate({
        keyStore: fixtures.ring,
        tokens: new TokenService({ secret: TOKEN_SECRET }),
        scopes: SCOPES,
        idempotency: { secret: SECRET },
        logger: logs.logger,
      });
      const app: Express = major.express();
      app.use(gate.context());
      const optional = gate.protect({
        accept: ['secret'],
        role: 'level-2',
        limit: 'payouts',
        idempotency: 'optional',
      });
      const required = gate.protect({
        accept: ['secret'],
        limit: 'payouts',
        idempotency: 'required',
      });
      const created: RequestHandler = (req, res) => {
        const n = count('json');
        res
          .status(201)
          .json({ id: `po_${String(n)}`, amount: (req.body as { amount?: number }).amount });
      };
      app.post('/payouts', optional, created);
      app.post('/required', required, created);
      app.post('/chunks', optional, (_req, res) => {
        const n = count('chunks');
        res.status(202);
        res.setHeader('Content-Type', 'text/plain; charset=utf-8');
        res.write('première partie, ');
        res.write(Buffer.from('deuxième partie, '));
        res.write(new Uint8Array(Buffer.from('troisième, ')));
        res.end(`fin ${String(n)}`, 'utf8');
      });
      app.post('/send', optional, (_req, res) => {
        const n = count('send');
        res
          .status(200)
          .type('text/html')
          .send(`<p>payout ${String(n)} — ok</p>`);
      });
      app.post('/bare-end', optional, (_req, res) => {
        count('bare-end');
        res.status(202).end();
      });
      app.all('/head', optional, (_req, res) => {
        const n = count('head');
        res.json({ n });
      });
      app.post('/encoded', optional, (_req, res) => {
        count('encoded');
        res.status(200).setHeader('Content-Type', 'application/octet-stream');
        res.write('cGF5b3V0IA==', 'base64');
        res.end('6f6b', 'hex');
      });
      app.post('/slow', optional, (_req, res) => {
        count('slow');
        setTimeout(() => {
          res.status(201).json({ slow: true });
        }, 300);
      });
      app.post('/large', optional, (_req, res) => {
        count('large');
        res.status(200).type('text/plain').send('x'.repeat(70_000));
      });
      app.post('/ends-twice', optional, (_req, res) => {
        count('ends-twice');
        res.status(201).end('first');
        res.end();
        res.write('late');
      });
      app.post('/fails-after', optional, (_req, res, next) => {
        count('fails-after');
        res.status(201).json({ made: true });
        next(new Error('an audit call failed after the answer'));
      });
      // A handler that forwards the request itself: its first attempt could not connect.
      const upstreamFailure = (requestSent: boolean): TollgateError =>
        Object.assign(
          new TollgateError(502, 'upstream_unavailable', 'The payments service is unavailable'),
          { requestSent },
        );
      app.post('/not-sent', optional, (_req, res, next) => {
        if (count('not-sent') === 1) next(upstreamFailure(false));
        else res.status(201).json({ forwarded: true });
      });
      app.post('/sent', optional, (_req, res, next) => {
        if (count('sent') === 1) next(upstreamFailure(true));
        else res.status(201).json({ forwarded: true });
      });
      app.post('/throws', optional, () => {
        count('throws');
        throw new Error('handler failed');
      });
      const routerA = major.express.Router();
      routerA.post('/payouts', optional, (_req, res) => {
        count('a');
        res.json({ router: 'a' });
      });
      const routerB = major.express.Router();
      routerB.post('/payouts', optional, (_req, res) => {
        count('b');
        res.json({ router: 'b' });
      });
      app.use('/a', routerA);
      app.use('/b', routerB);
      app.use(notFound());
      app.use(gate.errorHandler());
      server = http.createServer(app);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      port = (server.address() as AddressInfo).port;
    });
    afterAll(async () => {
      gate.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
      });
    });

    const as = (key: 'level1' | 'level2' | 'level3', idempotencyKey?: string) => ({
      authorization: `Bearer ${fixtures.keys[key].secretKey}`,
      ...(idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey }),
    });

    it('gives the client and the retries one answer when a handler ends twice or fails after answering', async () => {
      for (const path of ['/ends-twice', '/fails-after']) {
        const headers = as('level2', randomUUID());
        const first = await call(port, { path, headers, body: '{}' });
        expect(first.status).toBe(201);
        expect(first.text).toBe(path === '/ends-twice' ? 'first' : '{"made":true}');
        const retry = await call(port, { path, headers, body: '{}' });
        expectReplayed(first, retry);
        expect(calls[path.slice(1)]).toBe(1);
      }
    });

    it('releases the claim of a request whose error says it was never sent on: the retry runs', async () => {
      const headers = as('level2', randomUUID());
      expectError(
        await call(port, { path: '/not-sent', headers, body: '{}' }),
        502,
        'upstream_unavailable',
      );
      const retry = await call(port, { path: '/not-sent', headers, body: '{}' });
      expect({ status: retry.status, json: retry.json }).toEqual({
        status: 201,
        json: { forwarded: true },
      });
      expect(retry.headers['idempotent-replayed']).toBeUndefined();
      expect(calls['not-sent']).toBe(2);
      // Perhaps sent (no `requestSent: false`): the answer is kept, the handler not run again.
      const sent = as('level2', randomUUID());
      expectError(
        await call(port, { path: '/sent', headers: sent, body: '{}' }),
        502,
        'upstream_unavailable',
      );
      const again = await call(port, { path: '/sent', headers: sent, body: '{}' });
      expectError(again, 502, 'upstream_unavailable');
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(calls.sent).toBe(1);
    });

    it('res.status(201).json(): the retry gets the same bytes, marked, and the handler ran once', async () => {
      const headers = as('level2', randomUUID());
      const body = '{"amount":125}';
      const before = calls.json ?? 0;
      const first = await call(port, { path: '/payouts', headers, body });
      expect({ status: first.status, json: first.json }).toEqual({
        status: 201,
        json: { id: `po_${String(before + 1)}`, amount: 125 },
      });
      const retry = await call(port, { path: '/payouts', headers, body });
      expectReplayed(first, retry);
      const third = await call(port, { path: '/payouts', headers, body });
      expectReplayed(first, third);
      expect(calls.json).toBe(before + 1);
      // Without a key, every request runs the handler.
      await call(port, { path: '/payouts', headers: as('level2'), body });
      await call(port, { path: '/payouts', headers: as('level2'), body });
      expect(calls.json).toBe(before + 3);
    });

    it('the same key with another body or path: 422 idempotency_key_reused, the handler not run', async () => {
      const headers = as('level2', randomUUID());
      await call(port, { path: '/payouts', headers, body: '{"amount":1}' });
      const ran = calls.json;
      expectError(
        await call(port, { path: '/payouts', headers, body: '{"amount":2}' }),
        422,
        'idempotency_key_reused',
      );
      expectError(
        await call(port, { path: '/required', headers, body: '{"amount":1}' }),
        422,
        'idempotency_key_reused',
      );
      expect(calls.json).toBe(ran);
    });

    it('routers mounted at two paths: the same key on the other one is another request, never its answer', async () => {
      const headers = as('level2', randomUUID());
      const first = await call(port, { path: '/a/payouts', headers });
      expect(first.json).toEqual({ router: 'a' });
      const other = await call(port, { path: '/b/payouts', headers });
      expect(other.json).not.toEqual({ router: 'a' });
      expectError(other, 422, 'idempotency_key_reused');
      expect(calls.b).toBeUndefined();
      expectReplayed(first, await call(port, { path: '/a/payouts', headers }));
      expect(calls.a).toBe(1);
    });

    it('an answer written with res.write and res.end in chunks is replayed whole', async () => {
      const headers = as('level2', randomUUID());
      const first = await call(port, { path: '/chunks', headers });
      expect(first.status).toBe(202);
      expect(first.text).toBe(
        `première partie, deuxième partie, troisième, fin ${String(calls.chunks)}`,
      );
      const retry = await call(port, { path: '/chunks', headers });
      expectReplayed(first, retry);
      expect(retry.headers['content-length']).toBe(String(first.bytes.length));
      expect(calls.chunks).toBe(1);
    });

    it('res.send() of a string (res.end(chunk, encoding)) is replayed with its Content-Type', async () => {
      const headers = as('level2', randomUUID());
      const first = await call(port, { path: '/send', headers });
      expect(first.headers['content-type']).toBe('text/html; charset=utf-8');
      expect(first.text).toBe('<p>payout 1 — ok</p>');
      expectReplayed(first, await call(port, { path: '/send', headers }));
      expect(calls.send).toBe(1);
    });

    it('a bare res.end(): the retry gets the status and no body', async () => {
      const headers = as('level2', randomUUID());
      const first = await call(port, { path: '/bare-end', headers });
      expect({ status: first.status, text: first.text }).toEqual({ status: 202, text: '' });
      const retry = await call(port, { path: '/bare-end', headers });
      expectReplayed(first, retry);
      expect(calls['bare-end']).toBe(1);
    });

    it('a HEAD answer is replayed to the HEAD retry; a GET with its key is another request', async () => {
      const headers = as('level2', randomUUID());
      const first = await call(port, { method: 'HEAD', path: '/head', headers });
      expect(first.status).toBe(200);
      expect(first.headers['content-type']).toMatch(/^application\/json/);
      const retry = await call(port, { method: 'HEAD', path: '/head', headers });
      expectReplayed(first, retry);
      expect(calls.head).toBe(1);
      expectError(
        await call(port, { method: 'GET', path: '/head', headers }),
        422,
        'idempotency_key_reused',
      );
      expect(calls.head).toBe(1);
    });

    it('chunks written with their own encodings (base64, hex) are kept as the bytes sent', async () => {
      const headers = as('level2', randomUUID());
      const first = await call(port, { path: '/encoded', headers });
      expect(first.text).toBe('payout ok');
      expectReplayed(first, await call(port, { path: '/encoded', headers }));
      expect(calls.encoded).toBe(1);
    });

    it('a retry while the first is being answered: 409 idempotency_key_in_use with Retry-After: 1, then the answer', async () => {
      const headers = as('level2', randomUUID());
      const pending = call(port, { path: '/slow', headers });
      await new Promise((resolve) => setTimeout(resolve, 100));
      const early = await call(port, { path: '/slow', headers });
      expectError(early, 409, 'idempotency_key_in_use');
      expect(early.headers['retry-after']).toBe('1');
      const first = await pending;
      expect(first.status).toBe(201);
      expectReplayed(first, await call(port, { path: '/slow', headers }));
      expect(calls.slow).toBe(1);
    });

    it('an answer larger than maxAnswerBytes reaches the client whole; its retries are refused 409, naming its status', async () => {
      const headers = as('level2', randomUUID());
      const first = await call(port, { path: '/large', headers });
      expect({ status: first.status, length: first.bytes.length }).toEqual({
        status: 200,
        length: 70_000,
      });
      const retry = await call(port, { path: '/large', headers });
      const body = expectError(retry, 409, 'idempotency_key_in_use');
      expect(String(body.message)).toContain('200');
      expect(calls.large).toBe(1);
    });

    it('a handler that throws: 500 internal_error kept, replayed with the retry’s own request_id', async () => {
      const headers = as('level2', randomUUID());
      const first = await call(port, { path: '/throws', headers });
      const body = expectError(first, 500, 'internal_error');
      expect(first.text).not.toContain('handler failed');
      const retry = await call(port, { path: '/throws', headers });
      const again = expectError(retry, 500, 'internal_error');
      expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(again.message).toBe(body.message);
      expect(again.request_id).not.toBe(body.request_id);
      expect(calls.throws).toBe(1);
    });

    it("'required' without a key: 400 idempotency_key_required; a malformed key: 400 idempotency_key_invalid", async () => {
      const ran = calls.json;
      expectError(
        await call(port, { path: '/required', headers: as('level2'), body: '{}' }),
        400,
        'idempotency_key_required',
      );
      expectError(
        await call(port, { path: '/required', headers: as('level2', 'two words'), body: '{}' }),
        400,
        'idempotency_key_invalid',
      );
      expect(calls.json).toBe(ran);
      const ok = await call(port, {
        path: '/required',
        headers: as('level2', randomUUID()),
        body: '{}',
      });
      expect(ok.status).toBe(201);
    });

    it('a request refused by its role claims nothing: the key then serves a first use', async () => {
      const key = randomUUID();
      expectError(
        await call(port, { path: '/payouts', headers: as('level1', key), body: '{}' }),
        403,
        'insufficient_role',
      );
      const ran = calls.json ?? 0;
      const first = await call(port, { path: '/payouts', headers: as('level2', key), body: '{}' });
      expect({ status: first.status, replayed: first.headers['idempotent-replayed'] }).toEqual({
        status: 201,
        replayed: undefined,
      });
      expect(calls.json).toBe(ran + 1);
    });
  });
}

describe('protect({ idempotency }) configuration', () => {
  const fixtures = createFixtures();
  const build = (withIdempotency: boolean): Tollgate<keyof typeof SCOPES> =>
    tollgate({
      keyStore: fixtures.ring,
      scopes: SCOPES,
      ...(withIdempotency ? { idempotency: { secret: SECRET } } : {}),
    });

  it('throws ConfigurationError at protect() for a bad value or a misspelt option', () => {
    const gate = build(true);
    try {
      const protect = (options: unknown): RequestHandler =>
        gate.protect(options as Parameters<typeof gate.protect>[0]);
      expect(() => protect({ accept: ['secret'], limit: 'payouts', idempotency: 'yes' })).toThrow(
        ConfigurationError,
      );
      expect(() => protect({ accept: ['secret'], limit: 'payouts', idempotency: true })).toThrow(
        ConfigurationError,
      );
      expect(() =>
        protect({ accept: ['secret'], limit: 'payouts', idempotencey: 'optional' }),
      ).toThrow(ConfigurationError);
      expect(() =>
        protect({ accept: ['secret'], limit: 'payouts', idempotent: 'required' }),
      ).toThrow(ConfigurationError);
      expect(() =>
        protect({ accept: ['secret'], limit: 'payouts', idempotency: 'optional' }),
      ).not.toThrow();
    } finally {
      gate.close();
    }
  });

  it('throws ConfigurationError for idempotency on protect() when tollgate() has no idempotency option', () => {
    const gate = build(false);
    try {
      expect(() =>
        gate.protect({ accept: ['secret'], limit: 'payouts', idempotency: 'optional' }),
      ).toThrow(ConfigurationError);
      expect(() =>
        gate.protect({ accept: ['secret'], limit: 'payouts', idempotency: 'optional' }),
      ).toThrow(/idempotency/);
    } finally {
      gate.close();
    }
  });

  it('throws ConfigurationError for body: false with idempotency', () => {
    const gate = build(true);
    try {
      expect(() =>
        gate.protect({
          accept: ['secret'],
          limit: 'payouts',
          idempotency: 'required',
          body: false,
        }),
      ).toThrow(ConfigurationError);
      expect(() =>
        gate.protect({ accept: ['secret'], limit: 'payouts', idempotency: 'required', body: true }),
      ).not.toThrow();
    } finally {
      gate.close();
    }
  });

  it('throws ConfigurationError for a secret shorter than 32 bytes', () => {
    expect(() =>
      tollgate({ keyStore: fixtures.ring, scopes: SCOPES, idempotency: { secret: 'short' } }),
    ).toThrow(ConfigurationError);
  });
});
