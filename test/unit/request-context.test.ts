import express from 'express';
import request from 'supertest';
import { clientIp, requestId } from '../../lib/express/request-context';

describe('clientIp()', () => {
  /** An app whose trust function counts its calls: Express calls it each time `req.ip` is read. */
  function countingApp() {
    const calls = { trust: 0 };
    const app = express();
    app.set('trust proxy', (address: string, hop: number) => {
      calls.trust++;
      return hop === 0 && (address === '127.0.0.1' || address === '::ffff:127.0.0.1');
    });
    return { app, calls };
  }

  it('computes req.ip once, and later reads give the same address', async () => {
    const { app, calls } = countingApp();
    const seen: unknown[] = [];
    app.use((req, _res, next) => {
      seen.push(req.ip);
      next();
    });
    app.use(clientIp());
    app.get('/', (req, res) => {
      const trustCallsAfterClientIp = calls.trust;
      const reads = [req.ip, req.ip, req.ip];
      res.json({ reads, clientIp: req.clientIp, added: calls.trust - trustCallsAfterClientIp });
    });

    const response = await request(app).get('/').set('X-Forwarded-For', '::ffff:203.0.113.9');
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      reads: ['::ffff:203.0.113.9', '::ffff:203.0.113.9', '::ffff:203.0.113.9'],
      clientIp: '203.0.113.9',
      added: 0,
    });
    expect(seen).toEqual(['::ffff:203.0.113.9']);
  });

  it('still refuses a forwarded value that is not an address, with a 400', async () => {
    const { app } = countingApp();
    app.use(clientIp());
    app.get('/', (_req, res) => res.send('reached'));
    app.use(
      (
        error: { status?: number },
        _req: express.Request,
        res: express.Response,
        _next: unknown,
      ) => {
        res.status(error.status ?? 500).send('refused');
      },
    );
    const response = await request(app).get('/').set('X-Forwarded-For', '167772161');
    expect(response.status).toBe(400);
  });
});

describe('requestId()', () => {
  it("gives each request a fresh id, echoed as X-Request-Id, never the client's", async () => {
    const app = express();
    app.use(requestId());
    app.get('/', (req, res) => res.json({ id: req.requestId }));
    const response = await request(app).get('/').set('X-Request-Id', 'forged');
    const body = response.body as { id: string };
    expect(body.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(response.headers['x-request-id']).toBe(body.id);
  });

  it('keeps the id an earlier requestId() gave, so lines logged before and after agree', async () => {
    const app = express();
    const seen: unknown[] = [];
    app.use(requestId(), (req, _res, next) => {
      seen.push(req.requestId);
      next();
    });
    app.use(requestId());
    app.get('/', (req, res) => res.json({ id: req.requestId }));
    const response = await request(app).get('/');
    const { id } = response.body as { id: string };
    expect(seen).toEqual([id]);
    expect(response.headers['x-request-id']).toBe(id);
  });
});
