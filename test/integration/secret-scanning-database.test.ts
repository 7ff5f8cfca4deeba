import { createHash, generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'pg';
import { loadConfig } from '../../gateway/config';
import { type RunningGateway, startGateway } from '../../gateway/start';
import { PgKeyStore } from '../../lib/entry/postgres';
import { GATEWAY_LIMIT_SCOPES } from '../../gateway/keys-cli/limit-scopes';
import { generateKey } from '../../lib/model/key-format';
import { migrate } from '../../lib/keys/pg-schema';
import { expectErrorBody } from '../helpers/error-body';
import { expectDescribed } from '../helpers/openapi-answer';
import { TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs, type CapturedLogs, findLeaks } from '../helpers/logs';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';
import { type HttpResult, httpRequest } from '../helpers/process';

/**
 * The secret-scanning endpoint on the database key store: two gateways as `npm start` runs them
 * on one real PostgreSQL, the first taking reports. A locally made ECDSA P-256 key stands in for
 * the programme's, its public-keys document served from a loopback server that counts its reads.
 * A reported secret key must be refused by the SECOND gateway within 1 s, with its tokens; and
 * every refused report (unsigned, wrongly signed, unknown signer, oversized) or report sent again
 * must change nothing. A report is not a use of the key; a report that cannot be verified because
 * the public-keys document cannot be read is answered 503, to be sent again; and two gateways
 * that roll, given one report at once, roll the key once.
 */

const PATH = '/leaks/github';
const PROPAGATION_LIMIT_MS = 1000;
/** Reports per client address and minute on the gateway that rolls. */
const ROLLING_LIMIT = 20;

interface Signer {
  readonly identifier: string;
  readonly privateKey: KeyObject;
  readonly pem: string;
}

function newSigner(): Signer {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const der = publicKey.export({ type: 'spki', format: 'der' });
  return {
    identifier: createHash('sha256').update(der).digest('hex'),
    privateKey,
    pem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

interface Report {
  readonly token: string;
  readonly type?: string;
  readonly url?: string;
  readonly source?: string;
}

function reportBody(reports: readonly Report[]): Buffer {
  return Buffer.from(
    JSON.stringify(
      reports.map((report) => ({
        token: report.token,
        type: report.type ?? 'tollgate_secret_key',
        url: report.url ?? 'https://github.com/octo/shop/blob/0123abc/config/prod.env',
        source: report.source ?? 'content',
      })),
    ),
  );
}

/** How the answer names a token: its lowercase hex SHA-256. */
function hashOf(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

function signatureOf(signer: Signer, body: Buffer): string {
  return sign('sha256', body, { key: signer.privateKey, dsaEncoding: 'der' }).toString('base64');
}

function leakedCount(metrics: string): number {
  const line = /^tollgate_leaked_secret_keys_total\{reason="public_repository"\} (\d+)$/m.exec(
    metrics,
  );
  return Number(line?.[1] ?? 0);
}

describeWithPostgres('the secret-scanning endpoint on the database key store, two gateways', () => {
  let server: TestPostgres;
  let first: RunningGateway;
  let second: RunningGateway;
  let rolling: RunningGateway;
  /** A second gateway that rolls, on the same database. */
  let rollingTwin: RunningGateway;
  /** A gateway reading the public keys from a server that fails until told to serve. */
  let flaky: RunningGateway;
  let logs: CapturedLogs;
  let rollingLogs: CapturedLogs;
  let twinLogs: CapturedLogs;
  let flakyLogs: CapturedLogs;
  let keysServer: http.Server;
  let flakyKeysServer: http.Server;
  let flakyServes = false;
  let keysReads = 0;
  const github = newSigner();
  const figures: Record<string, number> = {};

  const portOf = (url: string | undefined): number => Number(new URL(url ?? 'http://x:1').port);
  /** The operators' writes, through a key store of their own on the same database. */
  let admin: PgKeyStore;
  const store = (): PgKeyStore => admin;

  /** A report posted to `gateway` (the first by default), signed by `signer` unless told. */
  const post = (
    body: Buffer,
    headers: Record<string, string>,
    gateway: RunningGateway = first,
  ): Promise<HttpResult> =>
    fetch(`${gateway.url}${PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: new Uint8Array(body),
    }).then(async (response) => {
      const answer = {
        status: response.status,
        headers: Object.fromEntries(response.headers),
        text: await response.text(),
        body: undefined,
      };
      // Every answer of the endpoint, whatever the test, is the one the API description gives.
      expectDescribed('POST', PATH, answer);
      return answer;
    });
  const signed = (body: Buffer, signer = github, gateway = first): Promise<HttpResult> =>
    post(
      body,
      {
        'github-public-key-identifier': signer.identifier,
        'github-public-key-signature': signatureOf(signer, body),
      },
      gateway,
    );
  const onSecond = (secret: string): Promise<HttpResult> =>
    httpRequest({
      port: portOf(second.url),
      path: '/api/v1/wallets/',
      headers: { authorization: `Bearer ${secret}` },
    });
  const tokenOf = async (publishable: string, secret: string): Promise<string> => {
    const exchanged = await httpRequest({
      port: portOf(second.url),
      method: 'POST',
      path: '/api/v1/auth/generate-token/',
      json: { api_key: publishable, api_secret: secret },
    });
    expect(exchanged.status).toBe(200);
    return String(exchanged.body?.token);
  };
  /** The gateway's database key store, for lookups that are not a use and its writes of uses. */
  const databaseOf = (gateway: RunningGateway): PgKeyStore => {
    if (!(gateway.keyStore instanceof PgKeyStore)) throw new Error('not on the database');
    return gateway.keyStore;
  };
  /** Waits until every gateway taking reports holds the key, without using it. */
  const reachesReportTakers = async (secret: string): Promise<void> => {
    const started = Date.now();
    while (
      [first, rolling, rollingTwin, flaky].some(
        (gateway) => databaseOf(gateway).peekBySecretKey(secret) === undefined,
      )
    ) {
      if (Date.now() - started > 3000) throw new Error('a new key never reached every gateway');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  const newKey = async (): Promise<{ id: string; secret: string; publishable: string }> => {
    const key = await store().createKey('acct_shop');
    // In force on every gateway before the test goes on.
    await reachesReportTakers(key.secretKey);
    const started = Date.now();
    while ((await onSecond(key.secretKey)).status !== 200) {
      if (Date.now() - started > 3000)
        throw new Error('a new key never reached the second gateway');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return { id: key.id, secret: key.secretKey, publishable: key.publishableKey };
  };
  /** The keys of `acct_shop` as the database holds them: what a refused report must not change. */
  const stored = async (): Promise<unknown> =>
    (await store().listAccounts()).map((account) => ({
      id: account.id,
      keys: account.keys.map((key) => ({
        id: key.id,
        revokedAt: key.revokedAt,
        expiresAt: key.expiresAt,
      })),
    }));
  const answers = (result: HttpResult): unknown => JSON.parse(result.text) as unknown;

  beforeAll(async () => {
    server = await startTestPostgres();
    const url = await server.createDatabase('scanning');
    const pool = new Pool({ connectionString: url });
    await migrate(pool);
    await pool.end();
    keysServer = http.createServer((_req, res) => {
      keysReads += 1;
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          public_keys: [{ key_identifier: github.identifier, key: github.pem, is_current: true }],
        }),
      );
    });
    await new Promise<void>((resolve) => keysServer.listen(0, '127.0.0.1', resolve));
    const keysUrl = `http://127.0.0.1:${String((keysServer.address() as AddressInfo).port)}/keys`;
    // Fails as an overloaded server does until told to serve.
    flakyKeysServer = http.createServer((_req, res) => {
      if (!flakyServes) {
        res.statusCode = 503;
        res.end('unavailable');
        return;
      }
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          public_keys: [{ key_identifier: github.identifier, key: github.pem, is_current: true }],
        }),
      );
    });
    await new Promise<void>((resolve) => flakyKeysServer.listen(0, '127.0.0.1', resolve));
    const flakyPort = String((flakyKeysServer.address() as AddressInfo).port);
    const env = { PORT: '0', TOLLGATE_DATABASE_URL: url, TOLLGATE_TOKEN_SECRET: TOKEN_SECRET };
    logs = captureLogs();
    rollingLogs = captureLogs();
    twinLogs = captureLogs();
    flakyLogs = captureLogs();
    first = await startGateway(
      loadConfig({
        ...env,
        TOLLGATE_SECRET_SCANNING_PATH: PATH,
        TOLLGATE_SECRET_SCANNING_KEYS_URL: keysUrl,
      }),
      { logger: logs.logger, print: () => undefined },
    );
    second = await startGateway(loadConfig(env), {
      logger: captureLogs().logger,
      print: () => undefined,
    });
    rolling = await startGateway(
      loadConfig({
        ...env,
        TOLLGATE_SECRET_SCANNING_PATH: PATH,
        TOLLGATE_SECRET_SCANNING_KEYS_URL: keysUrl,
        TOLLGATE_SECRET_SCANNING_ACTION: 'roll',
        TOLLGATE_SECRET_SCANNING_GRACE_SECONDS: '600',
        TOLLGATE_SECRET_SCANNING_LIMIT: String(ROLLING_LIMIT),
      }),
      { logger: rollingLogs.logger, print: () => undefined },
    );
    rollingTwin = await startGateway(
      loadConfig({
        ...env,
        TOLLGATE_SECRET_SCANNING_PATH: PATH,
        TOLLGATE_SECRET_SCANNING_KEYS_URL: keysUrl,
        TOLLGATE_SECRET_SCANNING_ACTION: 'roll',
        TOLLGATE_SECRET_SCANNING_GRACE_SECONDS: '600',
      }),
      { logger: twinLogs.logger, print: () => undefined },
    );
    flaky = await startGateway(
      loadConfig({
        ...env,
        TOLLGATE_SECRET_SCANNING_PATH: PATH,
        TOLLGATE_SECRET_SCANNING_KEYS_URL: `http://127.0.0.1:${flakyPort}/keys`,
      }),
      { logger: flakyLogs.logger, print: () => undefined },
    );
    admin = await PgKeyStore.open({
      connectionString: url,
      logger: captureLogs().logger,
      limitScopes: GATEWAY_LIMIT_SCOPES,
    });
    await store().createAccount('acct_shop');
  }, 60_000);
  afterAll(async () => {
    await flaky.stop(500);
    await rollingTwin.stop(500);
    await rolling.stop(500);
    await second.stop(500);
    await first.stop(500);
    await admin.close();
    await new Promise((resolve) => keysServer.close(resolve));
    await new Promise((resolve) => flakyKeysServer.close(resolve));
    server.destroy();
    process.stdout.write(
      `[secret-scanning] revoked on the second gateway after ${figures.revoke?.toFixed(0) ?? '?'} ms\n`,
    );
  });

  it('revokes a reported secret key: the second gateway refuses it and its token within 1 s', async () => {
    const key = await newKey();
    const token = await tokenOf(key.publishable, key.secret);
    expect((await onSecond(token)).status).toBe(200);
    logs.clear();

    const body = reportBody([{ token: key.secret }]);
    const answered = await signed(body);
    const started = performance.now();
    expect(answered.status).toBe(200);
    expect(answers(answered)).toEqual([
      { token_hash: hashOf(key.secret), token_type: 'tollgate_secret_key', label: 'true_positive' },
    ]);
    for (;;) {
      if ((await onSecond(key.secret)).status === 401) break;
      if (performance.now() - started > 3000) throw new Error('still in force after 3 s');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    figures.revoke = performance.now() - started;
    expect(figures.revoke).toBeLessThan(PROPAGATION_LIMIT_MS);
    expectErrorBody(await onSecond(key.secret), { status: 401, code: 'invalid_api_key' });
    expectErrorBody(await onSecond(token), { status: 401, code: 'invalid_token' });

    // The log names the key, its account and where it was found; never the secret.
    const entries = logs.entries();
    expect(entries).toContainEqual(
      expect.objectContaining({
        level: 'warn',
        event: 'security.leaked_secret_key',
        reason: 'public_repository',
        action: 'revoked',
        key_id: key.id,
        account_id: 'acct_shop',
        source_url: 'https://github.com/octo/shop/blob/0123abc/config/prod.env',
      }),
    );
    expect(entries).toContainEqual(
      expect.objectContaining({
        event: 'admin.audit',
        action: 'keys.revoke',
        actor: 'secret_scanning',
        target: key.id,
        account_id: 'acct_shop',
      }),
    );
    expect(findLeaks(logs.lines.join('\n'), [key.secret])).toEqual([]);
    const metrics = await first.app.metrics.text();
    expect(metrics).toContain('tollgate_leaked_secret_keys_total{reason="public_repository"} 1');
    expect(metrics).toContain(
      'tollgate_secret_scanning_reports_total{type="secret",label="true_positive",action="revoked"} 1',
    );

    // The same signed report again: the key stays revoked as it was, nothing is logged as new.
    const before = await stored();
    logs.clear();
    const replayed = await signed(body);
    expect(answers(replayed)).toEqual([
      {
        token_hash: hashOf(key.secret),
        token_type: 'tollgate_secret_key',
        label: 'false_positive',
      },
    ]);
    expect(await stored()).toEqual(before);
    expect(logs.entries().filter((entry) => entry.event === 'security.leaked_secret_key')).toEqual(
      [],
    );
    expect(await first.app.metrics.text()).toContain(
      'tollgate_leaked_secret_keys_total{reason="public_repository"} 1',
    );
  });

  it('answers false_positive for a key it does not hold or a token that is not a key', async () => {
    const before = await stored();
    const notHeld = generateKey('secret', 'live');
    const answered = await signed(
      reportBody([
        { token: notHeld },
        { token: generateKey('publishable', 'test'), type: 'tollgate_publishable_key' },
        { token: 'sk_live_not_a_key_at_all' },
      ]),
    );
    expect(answered.status).toBe(200);
    expect(answers(answered)).toEqual([
      { token_hash: hashOf(notHeld), token_type: 'tollgate_secret_key', label: 'false_positive' },
      expect.objectContaining({ label: 'false_positive' }),
      expect.objectContaining({
        token_hash: hashOf('sk_live_not_a_key_at_all'),
        label: 'false_positive',
      }),
    ]);
    expect(await stored()).toEqual(before);
  });

  it('never revokes a publishable key: true_positive, logged, and the key pair still works', async () => {
    const key = await newKey();
    const before = await stored();
    logs.clear();
    const answered = await signed(
      reportBody([{ token: key.publishable, type: 'tollgate_publishable_key' }]),
    );
    expect(answers(answered)).toEqual([
      {
        token_hash: hashOf(key.publishable),
        token_type: 'tollgate_publishable_key',
        label: 'true_positive',
      },
    ]);
    expect(logs.entries()).toContainEqual(
      expect.objectContaining({
        event: 'secret_scanning.key_reported',
        key_type: 'publishable',
        key_id: key.id,
        action: 'none',
      }),
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await stored()).toEqual(before);
    expect((await onSecond(key.secret)).status).toBe(200);
    const checkout = await httpRequest({
      port: portOf(second.url),
      method: 'POST',
      path: '/api/v1/checkout/',
      headers: { 'X-Service-Public-API-Key': key.publishable },
      json: { amount: 100 },
    });
    expect(checkout.status).toBeLessThan(400);
  });

  it('refuses unsigned, wrongly signed and tampered reports with one 401, changing nothing', async () => {
    const key = await newKey();
    const before = await stored();
    const body = reportBody([{ token: key.secret }]);
    const impostor = newSigner();
    const tampered = reportBody([{ token: key.secret, url: 'https://example.com/elsewhere' }]);
    const attempts: Record<string, HttpResult> = {
      unsigned: await post(body, {}),
      'identifier only': await post(body, { 'github-public-key-identifier': github.identifier }),
      'another key, the programme identifier': await post(body, {
        'github-public-key-identifier': github.identifier,
        'github-public-key-signature': signatureOf(impostor, body),
      }),
      'signature of another body': await post(tampered, {
        'github-public-key-identifier': github.identifier,
        'github-public-key-signature': signatureOf(github, body),
      }),
      'not base64 DER': await post(body, {
        'github-public-key-identifier': github.identifier,
        'github-public-key-signature': 'bm90IGEgc2lnbmF0dXJl',
      }),
    };
    const messages = new Set<unknown>();
    for (const [label, answer] of Object.entries(attempts)) {
      const error = expectErrorBody(answer, { status: 401, code: 'invalid_credentials' });
      messages.add(error.message);
      expect(`${label}: ${answer.text}`).not.toContain(key.secret);
    }
    // The same words whatever was wrong: an attacker learns nothing from the answer.
    expect(messages.size).toBe(1);
    expect(await stored()).toEqual(before);
    expect((await onSecond(key.secret)).status).toBe(200);
  });

  it('reads the keys again once for an unknown signer, and not again right after', async () => {
    const key = await newKey();
    const before = await stored();
    const stranger = newSigner();
    const body = reportBody([{ token: key.secret }]);
    const readsBefore = keysReads;
    expectErrorBody(await signed(body, stranger), { status: 401, code: 'invalid_credentials' });
    expect(keysReads).toBe(readsBefore + 1);
    for (let i = 0; i < 5; i++) {
      expectErrorBody(await signed(body, newSigner()), {
        status: 401,
        code: 'invalid_credentials',
      });
    }
    expect(keysReads).toBe(readsBefore + 1);
    expect(await stored()).toEqual(before);
    expect((await onSecond(key.secret)).status).toBe(200);
    expect(await first.app.metrics.text()).toContain(
      'tollgate_secret_scanning_refusals_total{reason="unknown_key"} 6',
    );
  });

  it('refuses a body over 64 KiB with 413 and the error body, signed or not, changing nothing', async () => {
    const key = await newKey();
    const before = await stored();
    const padding = Array.from({ length: 700 }, () => ({ token: generateKey('secret', 'live') }));
    const body = reportBody([{ token: key.secret }, ...padding]);
    expect(body.length).toBeGreaterThan(64 * 1024);
    expectErrorBody(await signed(body), { status: 413, code: 'payload_too_large' });
    expectErrorBody(await post(body, {}), { status: 413, code: 'payload_too_large' });
    expect(await stored()).toEqual(before);
    expect((await onSecond(key.secret)).status).toBe(200);
  });

  it('with roll: a grace period, then a report sent again rolls nothing more', async () => {
    const key = await newKey();
    const body = reportBody([{ token: key.secret }]);
    const answered = await signed(body, github, rolling);
    expect(answers(answered)).toEqual([
      { token_hash: hashOf(key.secret), token_type: 'tollgate_secret_key', label: 'true_positive' },
    ]);
    const afterRoll = await stored();
    const keys = (afterRoll as { keys: { id: string; expiresAt: Date | null }[] }[])[0]?.keys ?? [];
    const rolled = keys.find((entry) => entry.id === key.id);
    expect(rolled?.expiresAt?.getTime()).toBeGreaterThan(Date.now() + 500_000);
    // The replacement is named in the log, for the operator to hand a secret over.
    const leaked = rollingLogs
      .entries()
      .find((entry) => entry.event === 'security.leaked_secret_key' && entry.key_id === key.id);
    expect(leaked).toMatchObject({ action: 'rolled', account_id: 'acct_shop' });
    expect(keys.map((entry) => entry.id)).toContain(leaked?.replacement_key_id);
    // Still in force during the grace period.
    expect((await onSecond(key.secret)).status).toBe(200);
    const replayed = await signed(body, github, rolling);
    expect(answers(replayed)).toEqual([expect.objectContaining({ label: 'true_positive' })]);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await stored()).toEqual(afterRoll);
  });

  it('acts once on a key reported twice in one report, and again before the store reloads', async () => {
    const key = await newKey();
    const leakedBefore = leakedCount(await first.app.metrics.text());
    logs.clear();
    const body = reportBody([{ token: key.secret }, { token: key.secret, source: 'commit' }]);
    const answered = await signed(body);
    // At once, before the key store has reloaded past the revocation.
    const replayed = await signed(body);
    expect(answers(answered)).toEqual([
      { token_hash: hashOf(key.secret), token_type: 'tollgate_secret_key', label: 'true_positive' },
      { token_hash: hashOf(key.secret), token_type: 'tollgate_secret_key', label: 'true_positive' },
    ]);
    expect(answers(replayed)).toEqual([
      expect.objectContaining({ label: 'false_positive' }),
      expect.objectContaining({ label: 'false_positive' }),
    ]);
    const events = logs.entries().map((entry) => entry.event);
    expect(events.filter((event) => event === 'security.leaked_secret_key')).toHaveLength(1);
    expect(events.filter((event) => event === 'admin.audit')).toHaveLength(1);
    expect(leakedCount(await first.app.metrics.text())).toBe(leakedBefore + 1);
  });

  it('with roll: rolls once a key reported twice in one report, and again before the store reloads', async () => {
    const key = await newKey();
    const countKeys = async (): Promise<number> =>
      ((await stored()) as { keys: unknown[] }[])[0]?.keys.length ?? 0;
    const before = await countKeys();
    rollingLogs.clear();
    const body = reportBody([{ token: key.secret }, { token: key.secret, source: 'commit' }]);
    const answered = await signed(body, github, rolling);
    const replayed = await signed(body, github, rolling);
    for (const result of [answered, replayed]) {
      expect(answers(result)).toEqual([
        expect.objectContaining({ label: 'true_positive' }),
        expect.objectContaining({ label: 'true_positive' }),
      ]);
    }
    expect(await countKeys()).toBe(before + 1);
    const leaked = rollingLogs
      .entries()
      .filter((entry) => entry.event === 'security.leaked_secret_key');
    expect(leaked).toHaveLength(1);
  });

  it('records no use of a reported key: last_used_at stays as clients left it, before revoked_at', async () => {
    // A key no client ever used, in force on every gateway taking reports.
    const idle = await store().createKey('acct_shop');
    await reachesReportTakers(idle.secretKey);
    // A key a client used, then left alone.
    const used = await newKey();
    const usedFrom = new Date();
    expect((await onSecond(used.secret)).status).toBe(200);
    const usedUntil = new Date();
    await new Promise((resolve) => setTimeout(resolve, 200));

    const answered = await signed(reportBody([{ token: idle.secretKey }, { token: used.secret }]));
    expect(answers(answered)).toEqual([
      expect.objectContaining({ label: 'true_positive' }),
      expect.objectContaining({ label: 'true_positive' }),
    ]);
    await new Promise((resolve) => setTimeout(resolve, 50));
    // The uses each gateway holds, written as every gateway writes them (every 30 s, and on stop).
    for (const gateway of [first, second, rolling, rollingTwin, flaky]) {
      await databaseOf(gateway).flushLastUsed();
    }
    const keys = (await store().listAccounts()).flatMap((account) => account.keys);
    const idleNow = keys.find((key) => key.id === idle.id);
    const usedNow = keys.find((key) => key.id === used.id);
    expect(idleNow?.revokedAt).toBeInstanceOf(Date);
    expect(idleNow?.lastUsedAt).toBeNull();
    const revokedAt = usedNow?.revokedAt?.getTime() ?? 0;
    const lastUsedAt = usedNow?.lastUsedAt?.getTime() ?? Number.NaN;
    expect(revokedAt).toBeGreaterThan(0);
    // Its last real use (on the database's clock, give or take a round trip), before the report.
    expect(lastUsedAt).toBeGreaterThanOrEqual(usedFrom.getTime() - 50);
    expect(lastUsedAt).toBeLessThanOrEqual(usedUntil.getTime() + 50);
    expect(lastUsedAt).toBeLessThan(revokedAt);
  });

  it('answers 503 to a signed report while the keys document cannot be read, then takes it', async () => {
    expect(await first.app.metrics.text()).toContain(
      'tollgate_secret_scanning_deferred_total{reason="keys_unavailable"} 0',
    );
    const key = await newKey();
    const before = await stored();
    const body = reportBody([{ token: key.secret }]);
    flakyLogs.clear();
    const deferred = await signed(body, github, flaky);
    expectErrorBody(deferred, { status: 503, code: 'upstream_unavailable' });
    expect(deferred.headers['retry-after']).toMatch(/^[1-9]\d*$/);
    expect(deferred.text).not.toContain(key.secret);
    expect(await stored()).toEqual(before);
    expect((await onSecond(key.secret)).status).toBe(200);
    const metrics = await flaky.app.metrics.text();
    expect(metrics).toContain(
      'tollgate_secret_scanning_deferred_total{reason="keys_unavailable"} 1',
    );
    expect(metrics).toContain('tollgate_secret_scanning_refusals_total{reason="unknown_key"} 0');
    expect(flakyLogs.entries()).toContainEqual(
      expect.objectContaining({
        level: 'warn',
        event: 'secret_scanning.deferred',
        reason: 'keys_unavailable',
        key_identifier: github.identifier,
      }),
    );
    expect(findLeaks(flakyLogs.lines.join('\n'), [key.secret])).toEqual([]);

    // The programme sends it again once the document is served: the key is revoked.
    flakyServes = true;
    const taken = await signed(body, github, flaky);
    expect(taken.status).toBe(200);
    expect(answers(taken)).toEqual([
      { token_hash: hashOf(key.secret), token_type: 'tollgate_secret_key', label: 'true_positive' },
    ]);
    const started = Date.now();
    while ((await onSecond(key.secret)).status !== 401) {
      if (Date.now() - started > 3000) throw new Error('still in force after 3 s');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    // The document read, a signer it does not list is refused as before.
    expectErrorBody(await signed(body, newSigner(), flaky), {
      status: 401,
      code: 'invalid_credentials',
    });
  });

  it('with roll on two gateways: one report reaching both at once rolls the key once', async () => {
    const key = await newKey();
    const countKeys = async (): Promise<number> =>
      ((await stored()) as { keys: unknown[] }[])[0]?.keys.length ?? 0;
    const before = await countKeys();
    rollingLogs.clear();
    twinLogs.clear();
    const body = reportBody([{ token: key.secret }]);
    const both = await Promise.all([
      signed(body, github, rolling),
      signed(body, github, rollingTwin),
    ]);
    for (const result of both) {
      expect(result.status).toBe(200);
      expect(answers(result)).toEqual([
        {
          token_hash: hashOf(key.secret),
          token_type: 'tollgate_secret_key',
          label: 'true_positive',
        },
      ]);
    }
    expect(await countKeys()).toBe(before + 1);
    const entries = [...rollingLogs.entries(), ...twinLogs.entries()];
    const leaked = entries.filter((entry) => entry.event === 'security.leaked_secret_key');
    expect(leaked).toHaveLength(1);
    expect(entries.filter((entry) => entry.event === 'admin.audit')).toHaveLength(1);
    // The other answered as for a key rolled just before: reported, nothing changed.
    expect(entries).toContainEqual(
      expect.objectContaining({ event: 'secret_scanning.key_reported', key_id: key.id }),
    );
    // Still in force during the grace period.
    expect((await onSecond(key.secret)).status).toBe(200);
  });

  it('takes tokens reported without url or source, and refuses one without a type', async () => {
    const key = await newKey();
    logs.clear();
    const plain = Buffer.from(
      JSON.stringify([{ token: key.secret, type: 'tollgate_test_secret_key' }]),
    );
    const answered = await signed(plain);
    expect(answered.status).toBe(200);
    expect(answers(answered)).toEqual([
      {
        token_hash: hashOf(key.secret),
        token_type: 'tollgate_test_secret_key',
        label: 'true_positive',
      },
    ]);
    expect(logs.entries()).toContainEqual(
      expect.objectContaining({
        event: 'security.leaked_secret_key',
        key_id: key.id,
        source_url: null,
        source: null,
      }),
    );
    const other = await newKey();
    const before = await stored();
    expectErrorBody(await signed(Buffer.from(JSON.stringify([{ token: other.secret }]))), {
      status: 400,
      code: 'invalid_request',
      message: '[0].type must be a string',
    });
    expect(await stored()).toEqual(before);
  });

  it('limits reports per client address: over the limit, 429 before the body is read', async () => {
    const key = await newKey();
    const before = await stored();
    const body = reportBody([{ token: key.secret }]);
    // Unsigned reports are refused, and counted, until the limit refuses them before anything.
    let answer = await post(body, {}, rolling);
    for (let sent = 1; answer.status === 401 && sent <= ROLLING_LIMIT; sent++) {
      answer = await post(body, {}, rolling);
    }
    expectErrorBody(answer, { status: 429, code: 'rate_limited', scope: 'secret-scanning' });
    expectErrorBody(await signed(body, github, rolling), {
      status: 429,
      code: 'rate_limited',
      scope: 'secret-scanning',
    });
    expect(await stored()).toEqual(before);
    expect((await onSecond(key.secret)).status).toBe(200);
  });
});
