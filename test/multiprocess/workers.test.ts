import { createHash, generateKeyPairSync, randomUUID, sign } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import http from 'node:http';
import type { Socket } from 'node:net';
import { DEFAULT_LIMITS, loadConfig } from '../../gateway/config';
import { type RunningHost, startHost } from '../../gateway/workers/host';
import { captureLogs } from '../helpers/logs';
import { portSharing, currentPlatform } from '../../gateway/workers/plan';
import { freePort } from '../helpers/redis';
import { type RecordingUpstream, startRecordingUpstream } from '../helpers/upstream';
import {
  assertBuilt,
  closeClient,
  type GatewayProcess,
  hammer,
  type KeysFile,
  requestOnce,
  type RequestSpec,
  startGatewayProcess,
  statusCounts,
  stopAll,
  waitUntil,
  writeKeysFile,
} from './harness';
import { distScript, runNode } from '../helpers/process';
import { docBlock } from '../helpers/doc-blocks';
import { Pool } from 'pg';
import { PgKeyStore } from '../../lib/entry/postgres';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';

/**
 * The gateway serving one port from several worker threads (`TOLLGATE_WORKERS`), as operators run
 * it: a real process, real sockets, the kernel sharing connections between the threads. Where
 * threads cannot share a port (Node before 22.12), the same setting is refused at start.
 */

const sharing = portSharing(currentPlatform());
/**
 * Keep-alive connections per run of requests: enough that the kernel, which hands each new
 * connection to one thread at random, leaves no thread without one but once in millions of runs.
 */
const connectionsFor = (workers: number): number => (workers <= 2 ? 16 : 64);
const TRANSACTIONS = '/api/v1/transactions/';
const PAYOUTS = '/api/v1/payouts/';
const WALLETS = '/api/v1/wallets/';

if (!sharing.ok) {
  describe('TOLLGATE_WORKERS where threads cannot share a port', () => {
    it('refuses to start with more than one worker, saying why', async () => {
      assertBuilt();
      const finished = await runNode(distScript('gateway/server.js'), [], {
        TOLLGATE_WORKERS: '2',
        PORT: '0',
      });
      expect(finished.code).toBe(1);
      expect(finished.stderr.trim()).toBe(
        `tollgate: configuration error: TOLLGATE_WORKERS is 2, but ${sharing.why}: leave it unset, or run one gateway per core`,
      );
      // As the guide shows it, for this Node version.
      expect(finished.stderr.trim()).toBe(
        docBlock('workers-refused').code.trim().replace('20.20.2', process.versions.node),
      );
    });
  });
} else {
  describe.each([2, 4])('the gateway on %i worker threads sharing one port', (WORKERS) => {
    const CONCURRENCY = connectionsFor(WORKERS);
    const everyWorker = Array.from({ length: WORKERS }, (_, index) => index + 1);
    let upstream: RecordingUpstream;
    let keys: KeysFile;
    let gateway: GatewayProcess;
    let adminUrl: string;

    beforeAll(async () => {
      assertBuilt();
      upstream = await startRecordingUpstream();
      keys = writeKeysFile();
      const adminPort = await freePort();
      adminUrl = `http://127.0.0.1:${adminPort}`;
      gateway = await startGatewayProcess({
        keysFile: keys,
        upstreamUrl: upstream.url,
        env: {
          TOLLGATE_WORKERS: String(WORKERS),
          TOLLGATE_ADMIN_PORT: String(adminPort),
          TOLLGATE_TRUST_PROXY: 'loopback',
        },
      });
      // The first worker answers before the host has finished starting.
      await waitUntil(() => gateway.events('gateway.started').length > 0, 10_000);
    }, 30_000);

    afterAll(async () => {
      closeClient();
      await stopAll();
      await upstream.close();
    });

    /** The worker numbers of the access log lines of requests to `path`. */
    const workersServing = (path: string): Set<unknown> =>
      new Set(
        gateway
          .events('http.request')
          .filter((line) => line.path === path)
          .map((line) => line.worker),
      );

    it('starts each worker once and says so once for the host', () => {
      expect(
        gateway
          .events('worker.started')
          .map((line) => line.worker)
          .sort(),
      ).toEqual(everyWorker);
      const started = gateway.events('gateway.started');
      expect(started).toHaveLength(1);
      expect(started[0]).toMatchObject({ workers: WORKERS, url: gateway.url, keys: 'file' });
      // Each worker serves the keys file the main thread loaded, and says so.
      for (const line of gateway.events('worker.started')) {
        expect(line).toMatchObject({ keys: 'file', rate_limits: 'memory' });
      }
    });

    it('serves requests from every worker, each access log line naming its worker', async () => {
      const { level1 } = keys.fixtures.keys;
      const answers = await hammer(200, CONCURRENCY, () => ({
        url: gateway.url,
        path: '/api/v1/wallets/',
        headers: { authorization: `Bearer ${level1.secretKey}` },
      }));
      expect(statusCounts(answers)).toEqual({ 200: 200 });
      await waitUntil(() => gateway.events('http.request').length >= 200, 2000);
      expect(workersServing('/api/v1/wallets/')).toEqual(new Set(everyWorker));
    });

    it('is ready on both listeners only when every worker is, and sums their metrics', async () => {
      const [main, admin] = await Promise.all([
        requestOnce({ url: gateway.url, path: '/readyz' }),
        requestOnce({ url: adminUrl, path: '/readyz' }),
      ]);
      expect(main.status).toBe(200);
      expect(admin.status).toBe(200);
      expect(admin.body).toMatchObject({ status: 'ready', checks: { keys: { status: 'ready' } } });

      const metrics = await requestOnce({ url: adminUrl, path: '/metrics' });
      expect(metrics.status).toBe(200);
      const text = String(metrics.body);
      expect(text).toMatch(new RegExp(`^tollgate_workers ${WORKERS}$`, 'm'));
      expect(text).toMatch(/^tollgate_ready 1$/m);
      // Counted by every worker, reported as one sum for the host.
      const allowed =
        /^tollgate_decisions_total\{route="\/api\/v1\/wallets\/",outcome="allowed",code="none",rate_limits="memory"\} (\d+)$/m.exec(
          text,
        );
      expect(Number(allowed?.[1])).toBe(200);
      // The process's own metrics, once.
      expect(text.match(/^process_cpu_user_seconds_total /gm)).toHaveLength(1);
    });

    it('admits exactly the per-account limit whatever worker each request reaches', async () => {
      const limit = DEFAULT_LIMITS.authenticated;
      const { level3 } = keys.fixtures.keys;
      upstream.reset();
      const answers = await hammer(3 * limit, CONCURRENCY, () => ({
        url: gateway.url,
        path: TRANSACTIONS,
        headers: { authorization: `Bearer ${level3.secretKey}` },
      }));
      expect(statusCounts(answers)).toEqual({ 200: limit, 429: 2 * limit });
      expect(upstream.requests.filter((request) => request.url === TRANSACTIONS)).toHaveLength(
        limit,
      );
      // Admitted and refused by more than one thread.
      await waitUntil(() => workersServing(TRANSACTIONS).size >= 2, 2000);
    });

    it('compares at most the failure budget per client address, whatever worker a guess reaches', async () => {
      const answers = await hammer(3 * DEFAULT_LIMITS.authFailures, CONCURRENCY, (index) => ({
        url: gateway.url,
        path: WALLETS,
        headers: {
          authorization: `Bearer sk_test_wrong_${String(index).padStart(40, '0')}`,
          'x-forwarded-for': '203.0.113.77',
        },
      }));
      expect(statusCounts(answers)).toEqual({
        401: DEFAULT_LIMITS.authFailures,
        429: 2 * DEFAULT_LIMITS.authFailures,
      });
      const guesses = (): unknown[] =>
        gateway
          .events('http.request')
          .filter((line) => line.client_ip === '203.0.113.77')
          .map((line) => line.worker);
      await waitUntil(() => new Set(guesses()).size >= 2, 2000);
    });

    it('forwards a payout once when its retries reach every worker at once', async () => {
      const { admin } = keys.fixtures.keys;
      const payout = (): RequestSpec => ({
        url: gateway.url,
        method: 'POST',
        path: PAYOUTS,
        headers: { authorization: `Bearer ${admin.secretKey}`, 'idempotency-key': key },
        body: { amount: 1250, currency: 'EUR', destination: 'acct_dest_1' },
      });
      const key = `payout-${randomUUID()}`;
      // The upstream holds the first payout's answer until the 19 others are answered.
      let release!: () => void;
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      const safety = setTimeout(release, 8000);
      upstream.reset();
      upstream.respond = (_request, res) => {
        void held.then(() => {
          res.writeHead(201, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ id: `po_${randomUUID()}` }));
        });
      };
      let answered = 0;
      let releasedEarly = false;
      const answers = await Promise.all(
        Array.from({ length: 20 }, () =>
          requestOnce(payout()).then((answer) => {
            answered += 1;
            if (answered === 19) {
              releasedEarly = true;
              release();
            }
            return answer;
          }),
        ),
      );
      clearTimeout(safety);
      expect(releasedEarly).toBe(true);
      expect(statusCounts(answers)).toEqual({ 201: 1, 409: 19 });
      expect(upstream.requests.filter((request) => request.url === PAYOUTS)).toHaveLength(1);
      // A retry after the answer, whatever worker it reaches, gets the first answer back.
      const retries = await hammer(8, 8, payout);
      expect(statusCounts(retries)).toEqual({ 201: 8 });
      for (const retry of retries) expect(retry.headers['idempotent-replayed']).toBe('true');
      expect(upstream.requests.filter((request) => request.url === PAYOUTS)).toHaveLength(1);
      await waitUntil(() => workersServing(PAYOUTS).size >= 2, 2000);
      upstream.reset();
    });

    it('reloads the keys file in every worker on one SIGHUP', async () => {
      const { level2 } = keys.fixtures.keys;
      const before = await hammer(32, CONCURRENCY, () => ({
        url: gateway.url,
        path: '/api/v1/wallets/',
        headers: { authorization: `Bearer ${level2.secretKey}` },
      }));
      expect(statusCounts(before)).toEqual({ 200: 32 });
      const document = structuredClone(keys.fixtures.document);
      for (const account of document.accounts) {
        for (const key of account.keys) {
          if (key.id === level2.id) Object.assign(key, { revoked: true });
        }
      }
      writeFileSync(keys.path, JSON.stringify(document));
      const reloadsBefore = gateway.events('keys.reloaded').length;
      const signalled = Date.now();
      gateway.signal('SIGHUP');
      // The keep-alive connections of every worker refuse the revoked key, within a second. Each
      // request comes from its own address, so that no failure budget is spent.
      let round = 0;
      await waitUntil(async () => {
        round += 1;
        const after = await hammer(32, CONCURRENCY, (index) => ({
          url: gateway.url,
          path: '/api/v1/wallets/',
          headers: {
            authorization: `Bearer ${level2.secretKey}`,
            'x-forwarded-for': `198.51.${100 + round}.${index + 1}`,
          },
        }));
        return statusCounts(after)[401] === 32;
      }, 5000);
      expect(Date.now() - signalled).toBeLessThan(1000);
      // Read once by the main thread, put in force once by every worker.
      await waitUntil(
        () => gateway.events('keys.reloaded').length >= reloadsBefore + WORKERS + 1,
        2000,
      );
      const reloaded = gateway.events('keys.reloaded').slice(reloadsBefore);
      expect(reloaded.map((line) => line.worker ?? 'main').sort()).toEqual([
        ...everyWorker,
        'main',
      ]);
    });

    it('drains every worker on SIGTERM and exits 0', async () => {
      await gateway.stop();
      expect(gateway.exitCode()).toBe(0);
      expect(gateway.events('gateway.stopping')).toHaveLength(1);
    });
  });

  /**
   * With the keys in PostgreSQL, the main thread alone reads the database; every worker serves the
   * ring it keeps, and a change made there is in force on every worker's connections at once.
   */
  describeWithPostgres('the key database, read once for every worker', () => {
    const keys = writeKeysFile();
    const { fixtures } = keys;
    // A locally made ECDSA P-256 key stands in for the secret-scanning programme's.
    const signer = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    const signerId = createHash('sha256')
      .update(signer.publicKey.export({ type: 'spki', format: 'der' }))
      .digest('hex');
    const signerKeys = path.join(mkdtempSync(path.join(tmpdir(), 'tollgate-scan-')), 'keys.json');
    writeFileSync(
      signerKeys,
      JSON.stringify({
        public_keys: [
          {
            key_identifier: signerId,
            key: signer.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
            is_current: true,
          },
        ],
      }),
    );
    let server: TestPostgres;
    let pool: Pool;
    let upstream: RecordingUpstream;
    let gateway: GatewayProcess;
    const served = (path: string): Set<unknown> =>
      new Set(
        gateway
          .events('http.request')
          .filter((line) => line.path === path)
          .map((line) => line.worker),
      );

    beforeAll(async () => {
      assertBuilt();
      server = await startTestPostgres();
      const url = await server.createDatabase('workers');
      await PgKeyStore.migrate(url);
      const writer = await PgKeyStore.open({ connectionString: url });
      await writer.import(fixtures.document);
      await writer.close();
      pool = new Pool({ connectionString: url });
      upstream = await startRecordingUpstream();
      gateway = await startGatewayProcess({
        keysFile: keys,
        upstreamUrl: upstream.url,
        env: {
          TOLLGATE_KEYS_FILE: '',
          TOLLGATE_DATABASE_URL: url,
          TOLLGATE_WORKERS: '2',
          TOLLGATE_TRUST_PROXY: 'loopback',
          TOLLGATE_SECRET_SCANNING_PATH: '/leaks/github',
          TOLLGATE_SECRET_SCANNING_KEYS_FILE: signerKeys,
        },
      });
      await waitUntil(() => gateway.events('gateway.started').length > 0, 10_000);
    }, 60_000);

    afterAll(async () => {
      closeClient();
      await stopAll();
      await upstream.close();
      await pool.end();
      server.destroy();
    });

    /** 32 requests with `secretKey` over 16 keep-alive connections, each from its own address. */
    const statuses = async (secretKey: string, round: number): Promise<Record<number, number>> =>
      statusCounts(
        await hammer(32, 16, (index) => ({
          url: gateway.url,
          path: WALLETS,
          headers: {
            authorization: `Bearer ${secretKey}`,
            'x-forwarded-for': `198.18.${round % 250}.${index + 1}`,
          },
        })),
      );

    it('has one connection listening for changes, and serves from every worker', async () => {
      const { rows } = await pool.query<{ listening: number }>(
        `SELECT count(*)::int AS listening FROM pg_stat_activity
         WHERE datname = current_database() AND query ILIKE 'LISTEN%'`,
      );
      expect(rows[0]?.listening).toBe(1);
      expect(await statuses(fixtures.keys.level1.secretKey, 0)).toEqual({ 200: 32 });
      const started = gateway.events('worker.started');
      expect(started.map((line) => line.worker).sort()).toEqual([1, 2]);
      for (const line of started) expect(line).toMatchObject({ keys: 'database' });
      await waitUntil(() => served(WALLETS).size === 2, 2000);
    });

    it('refuses a key revoked in the database on every worker within a second', async () => {
      const { level2 } = fixtures.keys;
      expect(await statuses(level2.secretKey, 1)).toEqual({ 200: 32 });
      const revokedAt = Date.now();
      await pool.query('UPDATE keys SET revoked_at = now() WHERE id = $1', [level2.id]);
      let round = 1;
      await waitUntil(async () => {
        round += 1;
        return (await statuses(level2.secretKey, round))[401] === 32;
      }, 5000);
      expect(Date.now() - revokedAt).toBeLessThan(1000);
    });

    it('revokes a key reported to a worker by secret scanning, in the database and on every worker', async () => {
      const { admin } = fixtures.keys;
      expect(await statuses(admin.secretKey, 100)).toEqual({ 200: 32 });
      const body = Buffer.from(
        JSON.stringify([
          {
            token: admin.secretKey,
            type: 'tollgate_secret_key',
            url: 'https://github.com/octo/shop/blob/0123abc/config/prod.env',
            source: 'content',
          },
        ]),
      );
      const answer = await requestOnce({
        url: gateway.url,
        method: 'POST',
        path: '/leaks/github',
        headers: {
          'content-type': 'application/json',
          'github-public-key-identifier': signerId,
          'github-public-key-signature': sign('sha256', body, {
            key: signer.privateKey,
            dsaEncoding: 'der',
          }).toString('base64'),
        },
        body: JSON.parse(body.toString()) as unknown,
      });
      expect(answer.status).toBe(200);
      expect(answer.body).toEqual([
        expect.objectContaining({
          token_hash: createHash('sha256').update(admin.secretKey).digest('hex'),
          label: 'true_positive',
        }),
      ]);
      const { rows } = await pool.query<{ revoked: boolean }>(
        'SELECT revoked_at IS NOT NULL AS revoked FROM keys WHERE id = $1',
        [admin.id],
      );
      expect(rows[0]?.revoked).toBe(true);
      // In force on every worker by the time the report is answered.
      expect(await statuses(admin.secretKey, 101)).toEqual({ 401: 32 });
    });

    it('writes the last use of the keys the workers served when it stops', async () => {
      await pool.query('UPDATE keys SET last_used_at = NULL');
      expect(await statuses(fixtures.keys.level3.secretKey, 200)).toEqual({ 200: 32 });
      await gateway.stop();
      expect(gateway.exitCode()).toBe(0);
      const { rows } = await pool.query<{ id: string }>(
        'SELECT id FROM keys WHERE last_used_at IS NOT NULL',
      );
      // The keys used before are written too, with the time of their last use.
      expect(rows.map((row) => row.id)).toContain(fixtures.keys.level3.id);
    });
  });

  /**
   * A worker thread that dies is replaced, and the connections the other worker holds go on being
   * served throughout: the host is never restarted whole.
   */
  const SOCKETS = 16;

  describe('a worker thread that stops unasked', () => {
    let upstream: RecordingUpstream;
    let host: RunningHost;
    const logs = captureLogs();

    beforeAll(async () => {
      assertBuilt();
      upstream = await startRecordingUpstream();
      const keys = writeKeysFile();
      const config = loadConfig({
        PORT: String(await freePort()),
        TOLLGATE_WORKERS: '2',
        TOLLGATE_KEYS_FILE: keys.path,
        TOLLGATE_UPSTREAM_URL: upstream.url,
        TOLLGATE_TOKEN_SECRET: 'x'.repeat(48),
        LOG_LEVEL: 'silent',
      });
      host = await startHost(config, { logger: logs.logger, print: () => undefined });
    }, 30_000);

    afterAll(async () => {
      await host.stop(1000);
      await upstream.close();
    });

    /** One request on `socket`'s connection: its status, or 0 when the connection is gone. */
    function getOn(agent: http.Agent): Promise<{ status: number; socket: Socket | undefined }> {
      return new Promise((resolve) => {
        const req = http.get(`${host.url}/healthz`, { agent }, (res) => {
          res.resume();
          res.on('end', () => {
            resolve({ status: res.statusCode ?? 0, socket: req.socket ?? undefined });
          });
        });
        req.on('error', () => {
          resolve({ status: 0, socket: undefined });
        });
      });
    }

    it('is replaced while the connections of the other worker are served on', async () => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: SOCKETS });
      const first = await Promise.all(Array.from({ length: SOCKETS }, () => getOn(agent)));
      expect(first.map((answer) => answer.status)).toEqual(Array(SOCKETS).fill(200));
      const opened = new Set(first.map((answer) => answer.socket));
      expect(opened.size).toBe(SOCKETS);

      const dying = host.threads()[0];
      expect(dying).toBeDefined();
      await dying?.terminate();
      // The dead worker's connections close; the other worker's stay open.
      await waitUntil(
        () => [...opened].filter((socket) => socket?.destroyed === false).length < SOCKETS,
        2000,
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      const alive = [...opened].filter((socket) => socket?.destroyed === false);
      expect(alive.length).toBeGreaterThan(0);
      expect(alive.length).toBeLessThan(SOCKETS);

      // Each surviving connection answers again, on the same socket: nothing was reconnected.
      const again = await Promise.all(alive.map(() => getOn(agent)));
      expect(again.map((answer) => answer.status)).toEqual(Array(alive.length).fill(200));
      expect(again.every((answer) => opened.has(answer.socket))).toBe(true);

      await waitUntil(() => logs.entries().some((line) => line.event === 'worker.replaced'), 5000);
      expect(logs.entries().filter((line) => line.event === 'worker.exited')).toEqual([
        expect.objectContaining({ worker: 1, exit_code: 1, level: 'error' }),
      ]);
      expect(host.threads().every((thread) => thread !== undefined)).toBe(true);
      agent.destroy();

      // New connections are served as before.
      const fresh = new http.Agent({ keepAlive: false });
      const answers = await Promise.all(Array.from({ length: 32 }, () => getOn(fresh)));
      expect(answers.map((answer) => answer.status)).toEqual(Array(32).fill(200));
    });
  });
}
