import { randomBytes } from 'node:crypto';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  ConfigurationError,
  FileKeyStore,
  type KeyDirectory,
  type KeyStore,
  type Logger,
  TokenService,
} from '../lib';
import { PgKeyStore } from '../lib/entry/postgres';
import { createLimiterRedis, type LimiterRedisConnection } from '../lib/entry/redis';
import { createAdminApp } from './admin';
import { createApp, type GatewayApp } from './app';
import type { GatewayConfig, RedisTarget } from './config';
import { createGatewayServer } from './http-server';
import { createDemoKeys, formatDemoCredentials } from './demo-keys';
import { startStubUpstream } from './stub-upstream';
import { GATEWAY_LIMIT_SCOPES } from './keys-cli/limit-scopes';
import { startTracing } from './tracing';

/**
 * Starts the sample gateway from a validated configuration: keys, token service, Redis, the stub
 * upstream when no upstream is configured, and the HTTP server. `stop()` drains: it stops
 * accepting connections, lets in-flight requests finish (up to `drainMs`), then closes the rest.
 */

export interface RunningGateway {
  readonly server: http.Server;
  readonly url: string;
  /** The admin listener's URL, when `TOLLGATE_ADMIN_PORT` is set. */
  readonly adminUrl: string | undefined;
  readonly app: GatewayApp;
  readonly keyStore: KeyStore;
  /** Re-reads the keys file (SIGHUP); resolves false, keeping the old keys, when it fails. */
  reloadKeys(): Promise<boolean>;
  stop(drainMs?: number): Promise<void>;
}

export interface StartOptions {
  logger: Logger;
  /** Where the demo credentials are printed (once, never through the logger). */
  print: (text: string) => void;
}

export async function startGateway(
  config: GatewayConfig,
  options: StartOptions,
): Promise<RunningGateway> {
  const { logger } = options;
  // Before anything serves: the first request is traced too. Off (no OTLP endpoint): not loaded.
  const tracing = config.tracing === undefined ? undefined : startTracing(config.tracing);
  let keyStore: KeyStore & Required<KeyDirectory>;
  let fileStore: FileKeyStore | undefined;
  let databaseStore: PgKeyStore | undefined;
  let demo: ReturnType<typeof createDemoKeys> | undefined;
  if (config.databaseUrl !== undefined) {
    // Refuses to start (a ConfigurationError, one line) unless the database is migrated.
    databaseStore = await PgKeyStore.open({
      connectionString: config.databaseUrl,
      logger,
      limitScopes: GATEWAY_LIMIT_SCOPES,
    });
    keyStore = databaseStore;
  } else if (config.keysFile === undefined) {
    demo = createDemoKeys();
    keyStore = demo.ring;
  } else {
    fileStore = await FileKeyStore.load(config.keysFile, { limitScopes: GATEWAY_LIMIT_SCOPES });
    keyStore = fileStore;
  }

  if (config.tokenSecret === undefined) {
    logger.warn(
      { event: 'config.token_secret' },
      'TOLLGATE_TOKEN_SECRET is not set: tokens are signed with a random per-process secret and die with the process',
    );
  }
  // Tokens and stored idempotent answers: both die with the process when it is random.
  const secret = config.tokenSecret ?? randomBytes(48).toString('base64');
  const tokens = new TokenService({ secret, ttlSeconds: config.tokenTtlSeconds });

  const stub = config.upstreamUrl === undefined ? await startStubUpstream() : undefined;
  const upstreamUrl = config.upstreamUrl ?? stub?.url ?? '';

  const redis = config.redis === undefined ? undefined : connectRedis(config.redis);
  if (redis === undefined && config.expectedInstances > 1) {
    logger.warn(
      { event: 'config.idempotency_per_instance', expected_instances: config.expectedInstances },
      'TOLLGATE_EXPECTED_INSTANCES is above 1 without REDIS_URL: each instance keeps its own Idempotency-Keys, so a retry reaching another instance is forwarded again; share a Redis',
    );
  }
  redis?.health.on('change', (state, reason) => {
    if (state === 'degraded') {
      logger.warn(
        { event: 'rate_limit.degraded', reason },
        'Redis unusable: rate limits are counted in process memory until it answers again',
      );
    } else {
      logger.info({ event: 'rate_limit.shared' }, 'Redis answers again: rate limits are shared');
    }
  });

  const app = createApp({
    keyStore,
    tokens,
    upstreamUrl,
    logger,
    redis,
    redisPrefix: config.redisPrefix,
    limits: config.limits,
    expectedInstances: config.expectedInstances,
    trustProxy: config.trustProxy,
    publicKeyHeader: config.publicKeyHeader,
    upstreamTimeoutMs: config.upstreamTimeoutMs,
    shadow: config.shadow,
    traceProbes: config.tracing?.probes,
    traceSteps: config.tracing?.steps,
    idempotency: { ...config.idempotency, secret },
    secretScanning:
      config.secretScanning === undefined || databaseStore === undefined
        ? undefined
        : { config: config.secretScanning, writer: databaseStore },
  });

  // Coalesced reloads share one promise: log each reload once, not once per SIGHUP.
  let lastReload: Promise<number> | undefined;
  let lastOutcome: Promise<boolean> = Promise.resolve(true);
  const reloadKeys = (store: FileKeyStore): Promise<boolean> => {
    const reload = store.reload();
    if (reload === lastReload) return lastOutcome;
    lastReload = reload;
    lastOutcome = reload.then(
      (count) => {
        app.metrics.keysReloaded('done');
        logger.info({ event: 'keys.reloaded', keys: count }, 'keys file reloaded');
        return true;
      },
      (error: unknown) => {
        app.metrics.keysReloaded('failed');
        logger.error(
          { event: 'keys.reload_failed', reason: (error as Error).message },
          'keys file not reloaded; the previous keys stay in force',
        );
        return false;
      },
    );
    return lastOutcome;
  };

  // `/readyz` reflects the upstream from the first request on (one probe, at most 1 s).
  await app.upstreamChecked;
  const server = createGatewayServer(app);
  const url = await listen(server, config.host, config.port);
  const adminApp =
    config.admin === undefined
      ? undefined
      : createAdminApp({
          directory: keyStore,
          tokenSha256: config.admin.tokenSha256,
          logger,
          manager: databaseStore,
          readiness: app.readiness,
          traceProbes: config.tracing?.probes,
          metrics: app.metrics,
          usage: (accountId, limits) => app.usage(accountId, limits),
          decisions: (accountId) => app.decisions(accountId),
          readOnlyReason:
            fileStore === undefined
              ? 'The demo keys are read-only: set TOLLGATE_DATABASE_URL to manage keys here'
              : 'Keys come from a keys file: change it with the key command and send SIGHUP, or set TOLLGATE_DATABASE_URL',
        });
  const adminServer = adminApp === undefined ? undefined : createGatewayServer(adminApp);
  const adminUrl =
    adminServer === undefined || config.admin === undefined
      ? undefined
      : await listen(adminServer, config.admin.host, config.admin.port).catch(
          async (error: unknown) => {
            await drain(server, 0);
            throw error;
          },
        );
  if (adminUrl !== undefined) {
    logger.info(
      {
        event: 'admin.started',
        url: adminUrl,
        key_management: config.admin?.tokenSha256 !== undefined,
      },
      `Tollgate admin listener on ${adminUrl}`,
    );
  }
  // Printed once the gateway listens (a gateway that failed to start prints no keys).
  if (demo !== undefined) options.print(formatDemoCredentials(demo.credentials));
  logger.info(
    {
      event: 'gateway.started',
      url,
      upstream: stub === undefined ? 'configured' : 'bundled stub',
      rate_limits: config.redis === undefined ? 'memory' : config.redis.kind,
      keys: databaseStore !== undefined ? 'database' : fileStore === undefined ? 'demo' : 'file',
      tracing: config.tracing === undefined ? 'off' : `otlp ${config.tracing.protocol}`,
      idempotency: {
        store: redis === undefined ? 'memory' : 'redis',
        required: config.idempotency.required,
      },
      secret_scanning:
        config.secretScanning === undefined || databaseStore === undefined
          ? 'off'
          : config.secretScanning.action,
      key_management: keyManagement(config, databaseStore !== undefined),
      dashboard: adminUrl !== undefined && config.admin?.tokenSha256 !== undefined ? 'on' : 'off',
    },
    `Tollgate listening on ${url}`,
  );

  return {
    server,
    url,
    adminUrl,
    app,
    keyStore,
    reloadKeys: () => (fileStore === undefined ? Promise.resolve(true) : reloadKeys(fileStore)),
    stop: async (drainMs = 10_000) => {
      await Promise.all([
        drain(server, drainMs),
        adminServer === undefined ? undefined : drain(adminServer, drainMs),
      ]);
      adminApp?.shutdown();
      app.shutdown();
      await databaseStore?.close();
      await redis?.close();
      if (stub !== undefined) await drain(stub.server, 1000);
      // The spans of the last requests are exported before the process ends.
      await tracing?.shutdown();
    },
  };
}

/**
 * Key management on the admin listener: `off` without an admin token, `read-only` when keys come
 * from a keys file or the demo keys (listed, never written), `read-write` on the database.
 */
function keyManagement(
  config: GatewayConfig,
  database: boolean,
): 'off' | 'read-only' | 'read-write' {
  if (config.admin?.tokenSha256 === undefined) return 'off';
  return database ? 'read-write' : 'read-only';
}

function connectRedis(target: RedisTarget): LimiterRedisConnection {
  switch (target.kind) {
    case 'url':
      return createLimiterRedis({ url: target.url });
    case 'cluster':
      return createLimiterRedis({ clusterNodes: target.nodes, password: target.password });
    case 'sentinel':
      return createLimiterRedis({
        sentinels: target.sentinels,
        sentinelName: target.name,
        password: target.password,
      });
  }
}

async function drain(server: http.Server, drainMs: number): Promise<void> {
  const closed = new Promise<void>((resolve) =>
    server.close(() => {
      resolve();
    }),
  );
  server.closeIdleConnections();
  const timer = setTimeout(() => {
    server.closeAllConnections();
  }, drainMs);
  await closed;
  clearTimeout(timer);
}

/** Listens on `host:port` and resolves with the URL, or rejects naming the address. */
async function listen(server: http.Server, host: string, port: number): Promise<string> {
  server.listen(port, host);
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', (error: NodeJS.ErrnoException) => {
      reject(listenError(error, host, port));
    });
  });
  const address = server.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${shown}:${address.port}`;
}

/** A listen failure that names the address: `EADDRINUSE` alone does not say which one. */
function listenError(error: NodeJS.ErrnoException, host: string, port: number): Error {
  const address = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
  const reason =
    error.code === 'EADDRINUSE'
      ? 'is already in use (another process listens there; set PORT or HOST)'
      : error.code === 'EACCES'
        ? 'needs privileges this process does not have (use a port above 1023)'
        : `cannot be listened on (${error.code ?? error.name})`;
  return new ConfigurationError(`${address} ${reason}`);
}
