import { randomBytes } from 'node:crypto';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  ConfigurationError,
  FileKeyStore,
  type KeyDirectory,
  type KeyStore,
  type Logger,
  type ThreadLink,
  TokenService,
} from '../lib';
import { PgKeyStore } from '../lib/entry/postgres';
import {
  type PackedTable,
  RingFollower,
  type RingFollowerStart,
  type RingNews,
  TableKeyStore,
} from '../lib/internal';
import { createLimiterRedis, type LimiterRedisConnection } from '../lib/entry/redis';
import { type AdminAppOptions, createAdminApp } from './admin';
import { createApp, type GatewayApp } from './app';
import type { GatewayConfig, RedisTarget } from './config';
import { createGatewayServer } from './http-server';
import { createDemoKeys, type DemoCredential, formatDemoCredentials } from './demo-keys';
import { startStubUpstream } from './stub-upstream';
import { GATEWAY_LIMIT_SCOPES } from './keys-cli/limit-scopes';
import { startTracing } from './tracing';
import { hostKeyWriter, type KeyWrite } from './workers/key-writes';

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
  /**
   * Puts in force what the main thread loaded: a keys file's ring (a reload), or the database
   * ring's new base, batch of changes or state. A gateway that reads its keys itself ignores it.
   */
  serveKeys(news: KeysNews): void;
  stop(drainMs?: number): Promise<void>;
}

export interface StartOptions {
  logger: Logger;
  /** Where the demo credentials are printed (once, never through the logger). */
  print: (text: string) => void;
  /**
   * Set when this gateway is one of several threads serving one port (`TOLLGATE_WORKERS`): what
   * the host's main thread made once for all of them. Such a gateway listens with `reusePort`, and
   * starts neither an admin listener nor a stub upstream: the main thread runs those once.
   */
  worker?: WorkerRole | undefined;
}

/** What the main thread tells a worker thread's gateway of the keys, in the order it happens. */
export type KeysNews =
  /** The keys file's new ring, in force on the main thread since a reload. */
  | { readonly type: 'keys'; readonly table: PackedTable }
  /** What the database key store told of its ring: a new base, a batch of changes, its state. */
  | { readonly type: 'keys-ring'; readonly news: RingNews };

/** What a worker thread's gateway takes from the main thread. */
export interface WorkerRole {
  /** The worker's number, from 1: in every log line it writes. */
  readonly index: number;
  /** Where requests go: the configured upstream or the main thread's stub. */
  readonly upstreamUrl: string;
  /** Signs tokens and seals stored answers: the same in every worker. */
  readonly secret: string;
  /** The demo keys, made once on the main thread, when no keys file or database is set. */
  readonly demoCredentials: readonly DemoCredential[] | undefined;
  /** The keys file's ring, loaded once by the main thread, in shared memory. */
  readonly keysTable: PackedTable | undefined;
  /** The database ring the main thread keeps, as it stands when the worker starts. */
  readonly keysFollow: RingFollowerStart | undefined;
  /** A key write (the secret-scanning endpoint's), made by the main thread's database store. */
  readonly writeKey: (write: KeyWrite) => Promise<unknown>;
  /** What the workers count together: limits and idempotency records, the failure budget. */
  readonly threads: ThreadLink;
  /** Why the other workers are not ready: `/readyz` is ready only when every worker is. */
  readonly peersNotReady: () => readonly string[];
}

export async function startGateway(
  config: GatewayConfig,
  options: StartOptions,
): Promise<RunningGateway> {
  const { logger, worker } = options;
  // Before anything serves: the first request is traced too. Off (no OTLP endpoint): not loaded.
  const tracing = config.tracing === undefined ? undefined : startTracing(config.tracing);
  const keys =
    worker?.keysTable !== undefined
      ? servedKeys(worker.keysTable)
      : worker?.keysFollow !== undefined
        ? followedKeys(worker.keysFollow)
        : await openKeys(config, logger, worker?.demoCredentials);
  const { keyStore, fileStore, databaseStore, follower } = keys;
  const keyWriter =
    databaseStore ??
    (follower === undefined || worker === undefined
      ? undefined
      : hostKeyWriter(follower, worker.writeKey));
  if (worker === undefined) warnOfSettings(config, logger);
  // Tokens and stored idempotent answers: both die with the process when it is random.
  const secret = worker?.secret ?? config.tokenSecret ?? randomBytes(48).toString('base64');
  const tokens = new TokenService({ secret, ttlSeconds: config.tokenTtlSeconds });

  const stub =
    worker === undefined && config.upstreamUrl === undefined
      ? await startStubUpstream()
      : undefined;
  const upstreamUrl = worker?.upstreamUrl ?? config.upstreamUrl ?? stub?.url ?? '';

  const redis = config.redis === undefined ? undefined : connectRedis(config.redis);
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
      config.secretScanning === undefined || keyWriter === undefined
        ? undefined
        : { config: config.secretScanning, writer: keyWriter },
    host:
      worker === undefined
        ? undefined
        : { threads: worker.threads, peersNotReady: worker.peersNotReady },
  });

  const reloadKeys = fileReloader(logger, (outcome) => {
    app.metrics.keysReloaded(outcome);
  });

  // `/readyz` reflects the upstream from the first request on (one probe, at most 1 s).
  await app.upstreamChecked;
  const server = createGatewayServer(app);
  const url = await listen(server, config.host, config.port, worker !== undefined);
  const admin =
    worker === undefined
      ? await startAdmin(config, keys, logger, {
          readiness: app.readiness,
          metrics: app.metrics,
          usage: (accountId, limits) => app.usage(accountId, limits),
          decisions: (accountId) => app.decisions(accountId),
        }).catch(async (error: unknown) => {
          await drain(server, 0);
          throw error;
        })
      : undefined;
  // Printed once the gateway listens (a gateway that failed to start prints no keys).
  if (keys.demo !== undefined && worker === undefined) {
    options.print(formatDemoCredentials(keys.demo.credentials));
  }
  logger.info(
    {
      // One `gateway.started` per host: each worker thread says `worker.started`.
      event: worker === undefined ? 'gateway.started' : 'worker.started',
      url,
      upstream: config.upstreamUrl === undefined ? 'bundled stub' : 'configured',
      ...startedFields(config, admin?.url),
    },
    `Tollgate listening on ${url}`,
  );

  return {
    server,
    url,
    adminUrl: admin?.url,
    app,
    keyStore,
    reloadKeys: () => (fileStore === undefined ? Promise.resolve(true) : reloadKeys(fileStore)),
    serveKeys: (news) => {
      switch (news.type) {
        case 'keys': {
          if (keys.tableStore === undefined) return;
          const count = keys.tableStore.swap(news.table);
          app.metrics.keysReloaded('done');
          logger.info({ event: 'keys.reloaded', keys: count }, 'keys file reloaded');
          return;
        }
        case 'keys-ring':
          follower?.hear(news.news);
          return;
      }
    },
    stop: async (drainMs = 10_000) => {
      await Promise.all([drain(server, drainMs), admin?.stop(drainMs)]);
      app.shutdown();
      await databaseStore?.close();
      await redis?.close();
      if (stub !== undefined) await drain(stub.server, 1000);
      // The spans of the last requests are exported before the process ends.
      await tracing?.shutdown();
    },
  };
}

/** Where the keys come from: the database, a keys file, or demo keys (made here or given). */
export interface OpenedKeys {
  readonly keyStore: KeyStore & Required<KeyDirectory>;
  readonly fileStore: FileKeyStore | undefined;
  readonly databaseStore: PgKeyStore | undefined;
  readonly demo: { readonly credentials: readonly DemoCredential[] } | undefined;
  /** A keys file's ring another thread loads, served here. */
  readonly tableStore?: TableKeyStore | undefined;
  /** The database ring another thread keeps, followed here. */
  readonly follower?: RingFollower | undefined;
}

/** The keys file's ring the main thread loaded, served by a worker thread. */
function servedKeys(table: PackedTable): OpenedKeys {
  const tableStore = new TableKeyStore(table);
  return {
    keyStore: tableStore,
    fileStore: undefined,
    databaseStore: undefined,
    demo: undefined,
    tableStore,
  };
}

/** The database ring the main thread keeps, followed by a worker thread. */
function followedKeys(start: RingFollowerStart): OpenedKeys {
  const follower = new RingFollower(start);
  return {
    keyStore: follower,
    fileStore: undefined,
    databaseStore: undefined,
    demo: undefined,
    follower,
  };
}

/**
 * Opens the key store the configuration names. The database store refuses to start (a
 * `ConfigurationError`, one line) unless the database is migrated. Without either, demo keys:
 * `demoCredentials` when given (every worker serves the same), else new ones.
 */
export async function openKeys(
  config: GatewayConfig,
  logger: Logger,
  demoCredentials?: readonly DemoCredential[],
): Promise<OpenedKeys> {
  if (config.databaseUrl !== undefined) {
    const databaseStore = await PgKeyStore.open({
      connectionString: config.databaseUrl,
      logger,
      limitScopes: GATEWAY_LIMIT_SCOPES,
    });
    return { keyStore: databaseStore, fileStore: undefined, databaseStore, demo: undefined };
  }
  if (config.keysFile === undefined) {
    const demo = createDemoKeys(demoCredentials);
    return { keyStore: demo.ring, fileStore: undefined, databaseStore: undefined, demo };
  }
  const fileStore = await FileKeyStore.load(config.keysFile, {
    limitScopes: GATEWAY_LIMIT_SCOPES,
  });
  return { keyStore: fileStore, fileStore, databaseStore: undefined, demo: undefined };
}

/** Warnings about the settings, logged once per host. */
export function warnOfSettings(config: GatewayConfig, logger: Logger): void {
  if (config.tokenSecret === undefined) {
    logger.warn(
      { event: 'config.token_secret' },
      'TOLLGATE_TOKEN_SECRET is not set: tokens are signed with a random per-process secret and die with the process',
    );
  }
  if (config.redis === undefined && config.expectedInstances > 1) {
    logger.warn(
      { event: 'config.idempotency_per_instance', expected_instances: config.expectedInstances },
      'TOLLGATE_EXPECTED_INSTANCES is above 1 without REDIS_URL: each instance keeps its own Idempotency-Keys, so a retry reaching another instance is forwarded again; share a Redis',
    );
  }
}

/** What `gateway.started` (and each worker's `worker.started`) says of the configuration. */
export function startedFields(
  config: GatewayConfig,
  adminUrl: string | undefined,
): Record<string, unknown> {
  const database = config.databaseUrl !== undefined;
  return {
    rate_limits: config.redis === undefined ? 'memory' : config.redis.kind,
    keys: database ? 'database' : config.keysFile === undefined ? 'demo' : 'file',
    tracing: config.tracing === undefined ? 'off' : `otlp ${config.tracing.protocol}`,
    idempotency: {
      store: config.redis === undefined ? 'memory' : 'redis',
      required: config.idempotency.required,
    },
    secret_scanning:
      config.secretScanning === undefined || !database ? 'off' : config.secretScanning.action,
    key_management: keyManagement(config, database),
    dashboard: adminUrl !== undefined && config.admin?.tokenSha256 !== undefined ? 'on' : 'off',
  };
}

/**
 * A keys file reload that logs and counts its outcome. Reloads asked for while one is waiting to
 * start share it (`FileKeyStore.reload()`), and are logged once, not once per SIGHUP.
 */
export function fileReloader(
  logger: Logger,
  counted: (outcome: 'done' | 'failed') => void,
): (store: FileKeyStore) => Promise<boolean> {
  let lastReload: Promise<number> | undefined;
  let lastOutcome: Promise<boolean> = Promise.resolve(true);
  return (store) => {
    const reload = store.reload();
    if (reload === lastReload) return lastOutcome;
    lastReload = reload;
    lastOutcome = reload.then(
      (count) => {
        counted('done');
        logger.info({ event: 'keys.reloaded', keys: count }, 'keys file reloaded');
        return true;
      },
      (error: unknown) => {
        counted('failed');
        logger.error(
          { event: 'keys.reload_failed', reason: (error as Error).message },
          'keys file not reloaded; the previous keys stay in force',
        );
        return false;
      },
    );
    return lastOutcome;
  };
}

/** What the admin listener shows of the gateway it sits beside. */
export type AdminSources = Pick<AdminAppOptions, 'readiness' | 'metrics' | 'usage' | 'decisions'>;

/** A running admin listener. */
export interface RunningAdmin {
  readonly url: string;
  stop(drainMs: number): Promise<void>;
}

/** The admin listener, when `TOLLGATE_ADMIN_PORT` is set; `undefined` otherwise. */
export async function startAdmin(
  config: GatewayConfig,
  keys: OpenedKeys,
  logger: Logger,
  sources: AdminSources,
): Promise<RunningAdmin | undefined> {
  if (config.admin === undefined) return undefined;
  const adminApp = createAdminApp({
    directory: keys.keyStore,
    tokenSha256: config.admin.tokenSha256,
    logger,
    manager: keys.databaseStore,
    traceProbes: config.tracing?.probes,
    ...sources,
    readOnlyReason:
      keys.fileStore === undefined
        ? 'The demo keys are read-only: set TOLLGATE_DATABASE_URL to manage keys here'
        : 'Keys come from a keys file: change it with the key command and send SIGHUP, or set TOLLGATE_DATABASE_URL',
  });
  const adminServer = createGatewayServer(adminApp);
  const url = await listen(adminServer, config.admin.host, config.admin.port);
  logger.info(
    { event: 'admin.started', url, key_management: config.admin.tokenSha256 !== undefined },
    `Tollgate admin listener on ${url}`,
  );
  return {
    url,
    stop: async (drainMs) => {
      await drain(adminServer, drainMs);
      adminApp.shutdown();
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

export async function drain(server: http.Server, drainMs: number): Promise<void> {
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

/**
 * Listens on `host:port` and resolves with the URL, or rejects naming the address. With
 * `reusePort`, other threads listen on the same port and the kernel shares the connections out.
 */
export async function listen(
  server: http.Server,
  host: string,
  port: number,
  reusePort = false,
): Promise<string> {
  server.listen(reusePort ? { port, host, reusePort } : { port, host });
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
