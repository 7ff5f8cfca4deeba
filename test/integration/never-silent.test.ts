import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import express, { type Express } from 'express';
import request from 'supertest';
import { tollgate } from '../../lib';
import { createFixtures } from '../helpers/fixtures';

/**
 * A misconfiguration found while serving is never silent: without a logger it is written once
 * per distinct problem to stderr as a process warning with a `TOLLGATE_…` code, besides the 500;
 * with a logger, it goes to the logger only. And a list given as a route's `ipWhitelist` is the
 * route's own whitelist. Requests come from 127.0.0.1.
 */

const fixtures = createFixtures();
const keyStore = fixtures.ring;
const secret = fixtures.keys.level2.secretKey;
const run = promisify(execFile);

interface Heard {
  readonly code: string | undefined;
  readonly message: string;
}

interface Outcome {
  readonly statuses: number[];
  readonly heard: Heard[];
  /** What the scenario's logger received, when it pushes to \`logged\`. */
  readonly logged: object[];
}

const KIT = join(__dirname, '../../dist/lib/index.js');
const EXPRESS_ENTRY = join(__dirname, '../../dist/lib/entry/express.js');

/**
 * Runs `scenario` (the body of an async function given `kit`, `express`, `secret`, `logged` and `get(app,
 * path, headers)`, which answers the status) in a Node process of its own, and returns the statuses
 * it answered and the `TOLLGATE_…` warnings that process heard: the test sandbox's own `process`
 * does not receive Node's warnings.
 */
async function inOwnProcess(scenario: string): Promise<Outcome> {
  const script = `
    const http = require('node:http');
    const kit = { ...require(${JSON.stringify(KIT)}), ...require(${JSON.stringify(EXPRESS_ENTRY)}) };
    const express = require('express');
    const secret = ${JSON.stringify(secret)};
    const heard = [];
    const logged = [];
    process.on('warning', (w) => { if (String(w.code).startsWith('TOLLGATE_')) heard.push({ code: w.code, message: w.message }); });
    const statuses = [];
    const get = (app, path, headers = {}) => new Promise((resolve, reject) => {
      const server = http.createServer(app).listen(0, '127.0.0.1', () => {
        fetch('http://127.0.0.1:' + server.address().port + path, { headers }).then(
          (response) => { statuses.push(response.status); server.close(); resolve(response.status); },
          (error) => { server.close(); reject(error); });
      });
    });
    (async () => {
      ${scenario}
      await new Promise((resolve) => setImmediate(resolve));
      process.stdout.write(JSON.stringify({ statuses, heard, logged }));
    })().catch((error) => { console.error(error); process.exit(1); });
  `;
  const { stdout } = await run(process.execPath, ['-e', script], { cwd: join(__dirname, '../..') });
  return JSON.parse(stdout) as Outcome;
}

describe('a misconfiguration with no logger', () => {
  it('is written once to stderr with its code, besides every 500', async () => {
    const { statuses, heard } = await inOwnProcess(`
      const app = express();
      app.use(kit.requestId(), kit.clientIp());
      const keyStore = new kit.KeyRing([]);
      app.get('/orders', kit.requireRole('level-2'), kit.authenticate({ keyStore, accept: ['secret'] }), (req, res) => res.json({}));
      app.use(kit.errorHandler());
      for (let i = 0; i < 3; i++) await get(app, '/orders', { Authorization: 'Bearer ' + secret });
    `);
    expect(statuses).toEqual([500, 500, 500]);
    expect(heard).toEqual([
      {
        code: 'TOLLGATE_REQUIREROLE_BEFORE_AUTHENTICATE',
        message:
          'requireRole() ran before authenticate(): there is no role to check; the request was answered 500 internal_error',
      },
    ]);
  });

  it('an unexpected error is told once by its class, never by its message', async () => {
    const { statuses, heard } = await inOwnProcess(`
      const app = express();
      app.get('/boom', () => { throw new RangeError('the database at postgres://user:' + secret + '@db refused'); });
      app.use(kit.errorHandler());
      await get(app, '/boom');
      await get(app, '/boom');
    `);
    expect(statuses).toEqual([500, 500]);
    expect(heard).toEqual([
      {
        code: 'TOLLGATE_UNEXPECTED_ERROR',
        message:
          'a request failed with an unexpected RangeError, answered 500 internal_error; give the kit a logger to see each one',
      },
    ]);
    expect(JSON.stringify(heard)).not.toContain(secret);
  });

  it("app.set('trust proxy', true) is told once, through tollgate().context()", async () => {
    const { statuses, heard } = await inOwnProcess(`
      const gate = kit.tollgate({ keyStore: new kit.KeyRing([]), scopes: { orders: { limit: 10 } } });
      const app = express();
      app.set('trust proxy', true);
      app.use(gate.context());
      app.get('/', (req, res) => res.json({}));
      await get(app, '/');
      await get(app, '/');
      gate.close();
    `);
    expect(statuses).toEqual([200, 200]);
    expect(heard.map(({ code }) => code)).toEqual(['TOLLGATE_TRUST_PROXY']);
  });
});

describe('a misconfiguration with a logger', () => {
  it('goes to the logger, and not to stderr', async () => {
    const { statuses, heard, logged } = await inOwnProcess(`
      const logger = { info() {}, warn() {}, error: (fields) => logged.push(fields) };
      const app = express();
      app.use(kit.requestId(), kit.clientIp());
      const keyStore = new kit.KeyRing([]);
      app.get('/orders', kit.requireRole('level-2'), kit.authenticate({ keyStore, accept: ['secret'] }), (req, res) => res.json({}));
      app.use(kit.errorHandler({ logger }));
      await get(app, '/orders', { Authorization: 'Bearer ' + secret });
    `);
    expect(statuses).toEqual([500]);
    expect(heard).toEqual([]);
    expect(logged).toEqual([
      {
        request_id: expect.any(String) as unknown,
        error: { name: 'TollgateMisconfiguration', code: 'requireRole_before_authenticate' },
      },
    ]);
  });
});

describe('a list given as a route ipWhitelist', () => {
  function appWith(ipWhitelist: boolean | readonly string[]): { app: Express; close: () => void } {
    const gate = tollgate({ keyStore, scopes: { orders: { limit: 100 } } });
    const app = express();
    app.use(gate.context());
    app.get(
      '/orders',
      gate.protect({ accept: ['secret'], ipWhitelist, limit: 'orders' }),
      (_req, res) => {
        res.json({ ok: true });
      },
    );
    app.use(gate.errorHandler());
    return {
      app,
      close: () => {
        gate.close();
      },
    };
  }

  it('refuses a client outside it, though its account has no whitelist', async () => {
    const { app, close } = appWith(['10.0.0.0/8']);
    const response = await request(app).get('/orders').set('Authorization', `Bearer ${secret}`);
    close();
    expect(response.status).toBe(403);
    expect(response.body).toMatchObject({ code: 'ip_not_whitelisted' });
  });

  it('lets a client inside it pass', async () => {
    const { app, close } = appWith(['127.0.0.0/8']);
    const response = await request(app).get('/orders').set('Authorization', `Bearer ${secret}`);
    close();
    expect(response.status).toBe(200);
  });

  it('still applies the account whitelist to a client inside the route list', async () => {
    const { app, close } = appWith(['127.0.0.0/8']);
    const response = await request(app)
      .get('/orders')
      .set('Authorization', `Bearer ${fixtures.keys.walled.secretKey}`);
    close();
    expect(response.status).toBe(403);
    expect(response.body).toMatchObject({ code: 'ip_not_whitelisted' });
  });

  it('refuses a bad entry or an empty list when the route is declared', () => {
    expect(() => appWith(['10.0.0.0/33'])).toThrow(
      'protect("orders") ipWhitelist[0] "10.0.0.0/33" has an invalid prefix length (0 to 32)',
    );
    expect(() => appWith([])).toThrow(/protect\("orders"\) ipWhitelist: is empty/);
  });
});
