import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { createApp, type GatewayApp } from '../../gateway/app';
import { loadConfig } from '../../gateway/config';
import type { KeyStoreStatus } from '../../gateway/readiness';
import { type RunningGateway, startGateway } from '../../gateway/start';
import { KeyRing } from '../../lib/keys/key-store';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { TokenService } from '../../lib/tokens/tokens';
import { expectErrorBody } from '../helpers/error-body';
import { createFixtures, TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs } from '../helpers/logs';
import { distScript, httpRequest, NodeProcess } from '../helpers/process';
import { freePort } from '../helpers/redis';
import { startRecordingUpstream, type RecordingUpstream } from '../helpers/upstream';

/**
 * `GET /readyz` on the main and the admin listener: ready once keys are loaded and
 * the upstream answers; 503 `not_ready` with the reason otherwise; Redis degraded and a stale key
 * database leave it ready and say so. `/healthz` stays liveness.
 */

const fixtures = createFixtures();
const tokens = new TokenService({ secret: TOKEN_SECRET, ttlSeconds: 1800 });

/** A key ring that reports a status, as `PgKeyStore` and the next key ring do. */
class ReportingRing extends KeyRing {
  status: KeyStoreStatus = { status: 'loading', reason: 'first load running' };
  state(): KeyStoreStatus {
    return this.status;
  }
}

interface ReadyzAnswer {
  readonly status: number;
  readonly headers: Record<string, unknown>;
  readonly body: {
    status?: unknown;
    message?: unknown;
    checks?: Record<string, Record<string, unknown> | undefined>;
    warnings?: unknown;
  };
}

/** `GET /readyz` through supertest, typed. */
async function readyz(app: GatewayApp, path = '/readyz'): Promise<ReadyzAnswer> {
  const answer = await request(app).get(path);
  return {
    status: answer.status,
    headers: answer.headers,
    body: answer.body as ReadyzAnswer['body'],
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The 503: the JSON error body (`not_ready`, the reason as message), `checks` and `warnings`. */
function expectNotReady(
  answer: { status: number; headers: Record<string, unknown>; body: unknown },
  message: string,
): Record<string, unknown> {
  expect(answer.status).toBe(503);
  expect(String(answer.headers['content-type'])).toMatch(/^application\/json(;|$)/);
  expect(answer.headers['cache-control']).toBe('no-store');
  const body = answer.body as Record<string, unknown>;
  expect(Object.keys(body).sort()).toEqual([
    'checks',
    'code',
    'message',
    'request_id',
    'status',
    'warnings',
  ]);
  expect(body).toMatchObject({ status: 503, code: 'not_ready', message });
  expect(body.request_id).toMatch(UUID);
  expect(body.request_id).toBe(answer.headers['x-request-id']);
  return body;
}

async function waitFor(
  check: () => Promise<boolean>,
  timeoutMs: number,
): Promise<number | undefined> {
  const started = Date.now();
  while (Date.now() - started <= timeoutMs) {
    if (await check()) return Date.now() - started;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return undefined;
}

describe('/readyz against a real upstream process, on both listeners', () => {
  let directory: string;
  let upstreamPort: number;
  let upstream: NodeProcess | undefined;
  let gateway: RunningGateway;
  let mainPort: number;
  let adminPort: number;

  const startUpstream = async (): Promise<void> => {
    const child = new NodeProcess(distScript('gateway/stub-upstream-server.js'), [], {
      PORT: String(upstreamPort),
      HOST: '127.0.0.1',
    });
    upstream = child;
    const deadline = Date.now() + 10_000;
    while (!child.stdout.includes('listening')) {
      if (!child.running || Date.now() > deadline) {
        throw new Error(`stub upstream did not start: ${child.stderr}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };

  const statusOf = async (port: number): Promise<number> =>
    (await httpRequest({ port, path: '/readyz' })).status;

  beforeAll(async () => {
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-readyz-'));
    const keysFile = path.join(directory, 'keys.json');
    writeFileSync(keysFile, JSON.stringify(fixtures.document));
    upstreamPort = await freePort();
    await startUpstream();
    gateway = await startGateway(
      loadConfig({
        PORT: '0',
        TOLLGATE_ADMIN_PORT: '0',
        TOLLGATE_KEYS_FILE: keysFile,
        TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
        TOLLGATE_UPSTREAM_URL: `http://127.0.0.1:${upstreamPort}`,
      }),
      { logger: captureLogs().logger, print: () => undefined },
    );
    mainPort = Number(new URL(gateway.url).port);
    adminPort = Number(new URL(gateway.adminUrl ?? '').port);
  });
  afterAll(async () => {
    await gateway.stop(0);
    await upstream?.stop();
    rmSync(directory, { recursive: true, force: true });
  });

  it('answers 200 ready with its checks on both listeners while keys are loaded and the upstream answers', async () => {
    for (const port of [mainPort, adminPort]) {
      const result = await httpRequest({ port, path: '/readyz' });
      expect(result.status).toBe(200);
      expect(result.headers['cache-control']).toBe('no-store');
      expect(result.body).toEqual({
        status: 'ready',
        checks: {
          keys: { status: 'ready' },
          upstream: { status: 'up', checked_at: expect.any(String) as unknown },
          rate_limits: { status: 'memory' },
          idempotency: { status: 'memory' },
        },
        warnings: [],
      });
    }
  });

  it('turns 503 within 2 s of the upstream going down, and 200 within 2 s of it coming back; /healthz stays 200', async () => {
    await upstream?.stop();
    const downAfter = await waitFor(async () => (await statusOf(mainPort)) === 503, 2000);
    expect(downAfter).toBeDefined();

    const main = expectNotReady(
      await httpRequest({ port: mainPort, path: '/readyz' }),
      'Not ready: upstream not answering (ECONNREFUSED)',
    );
    expect(main.checks).toMatchObject({ upstream: { status: 'down', reason: 'ECONNREFUSED' } });
    expect((await httpRequest({ port: adminPort, path: '/readyz' })).status).toBe(503);
    const health = await httpRequest({ port: mainPort, path: '/healthz' });
    expect(health.status).toBe(200);

    await startUpstream();
    const upAfter = await waitFor(async () => (await statusOf(mainPort)) === 200, 2000);
    expect(upAfter).toBeDefined();
    expect(await statusOf(adminPort)).toBe(200);
  });

  it('answers other methods 405 with Allow: GET, HEAD', async () => {
    const result = await httpRequest({ port: mainPort, method: 'POST', path: '/readyz' });
    expectErrorBody(result, { status: 405, code: 'method_not_allowed' });
    expect(result.headers.allow).toBe('GET, HEAD');
  });
});

describe('/readyz and the key store and Redis', () => {
  let upstream: RecordingUpstream;
  const apps: GatewayApp[] = [];
  const redisConnections: LimiterRedisConnection[] = [];

  const appWith = async (
    keyStore: KeyRing,
    redis?: LimiterRedisConnection,
  ): Promise<GatewayApp> => {
    const app = createApp({
      keyStore,
      tokens,
      upstreamUrl: upstream.url,
      logger: captureLogs().logger,
      redis,
    });
    apps.push(app);
    await app.upstreamChecked;
    return app;
  };

  beforeAll(async () => {
    upstream = await startRecordingUpstream();
  });
  afterAll(async () => {
    for (const app of apps) app.shutdown();
    for (const connection of redisConnections) await connection.close();
    await upstream.close();
  });

  it('answers 503 not_ready until the key store has loaded its first keys, then 200', async () => {
    const ring = new ReportingRing(fixtures.ring.records);
    const app = await appWith(ring);
    const loading = expectNotReady(
      await readyz(app),
      'Not ready: keys not loaded yet (first load running)',
    );
    expect(loading.checks).toMatchObject({
      keys: { status: 'loading', reason: 'first load running' },
      upstream: { status: 'up' },
    });

    ring.status = { status: 'ready', version: '7', lastSyncAt: Date.parse('2026-11-24T10:00:00Z') };
    const ready = await readyz(app);
    expect(ready.status).toBe(200);
    expect(ready.body.checks?.keys).toEqual({
      status: 'ready',
      version: '7',
      last_sync_at: '2026-11-24T10:00:00.000Z',
    });
  });

  it('stays ready while the key database is out of reach, and says why', async () => {
    const ring = new ReportingRing(fixtures.ring.records);
    ring.status = { status: 'stale', reason: 'ECONNREFUSED', version: '3', lastSyncAt: 0 };
    const result = await readyz(await appWith(ring));
    expect(result.status).toBe(200);
    expect(result.body.status).toBe('ready');
    expect(result.body.checks?.keys).toMatchObject({ status: 'stale', reason: 'ECONNREFUSED' });
    expect(result.body.warnings).toEqual([
      'keys: the key store is out of reach (ECONNREFUSED); the last keys loaded stay in force',
    ]);
  });

  it('stays ready while Redis is unreachable, and says limits are counted in memory', async () => {
    const redis = createLimiterRedis({ url: `redis://127.0.0.1:${await freePort()}` });
    redisConnections.push(redis);
    const app = await appWith(fixtures.ring, redis);
    const answered = await waitFor(async () => {
      const result = await readyz(app);
      return result.body.checks?.rate_limits?.reason !== undefined;
    }, 3000);
    expect(answered).toBeDefined();
    const result = await readyz(app);
    expect(result.status).toBe(200);
    expect(result.body.checks?.rate_limits).toEqual({ status: 'degraded', reason: 'ECONNREFUSED' });
    expect(result.body.checks?.idempotency).toEqual({ status: 'degraded' });
    expect(result.body.warnings).toEqual([
      'rate limits: Redis unusable (ECONNREFUSED); counted in process memory',
      'idempotency keys: Redis unusable; requests carrying an Idempotency-Key are refused 503, requests without one are served',
    ]);
    expect((await readyz(app, '/healthz')).body).toEqual({
      status: 'ok',
      rate_limits: 'degraded',
    });
  });
});
