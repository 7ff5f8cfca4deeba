/**
 * Tollgate's middlewares mounted in an ordinary Express 5 app of your own: no gateway, no proxy.
 * The app answers `GET /orders` itself; the kit authenticates the caller (secret key or token),
 * applies the account's IP whitelist, checks the role, counts the request against a per-account
 * limit, throttles credential guessing per IP, and renders every error as the kit's JSON body.
 *
 *     npm run example                      # builds, then listens on http://127.0.0.1:3000
 *
 * Environment (all optional): PORT (3000), TOLLGATE_KEYS_FILE (a keys file; unset: demo keys are
 * generated and printed), TOLLGATE_TOKEN_SECRET (at least 32 bytes; unset: random per process),
 * REDIS_URL (shared limit counters; unset: in memory).
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import express, { type Express, type RequestHandler } from 'express';
import {
  authenticate,
  authenticateKeyPair,
  clientErrorHandler,
  clientIp,
  createAuthFailureLimiter,
  createLimiterRedis,
  createRateLimiter,
  DEFAULT_AUTH_FAILURE_LIMIT,
  errorHandler,
  FileKeyStore,
  generateKey,
  issueToken,
  jsonBody,
  KeyRing,
  type KeyStore,
  type LimiterRedis,
  type Logger,
  notFound,
  type RequestFacts,
  refuseMalformedRequests,
  requestId,
  requireRole,
  requireWhitelistedIp,
  type Role,
  type SecurityEvent,
  sha256,
  TokenService,
} from '../lib';

/** `GET /orders`: requests per account per minute. */
export const ORDERS_LIMIT = 100;
/** `POST /auth/token`: exchanges per account per minute. */
export const TOKEN_EXCHANGE_LIMIT = 100;

export interface ExampleAppOptions {
  keyStore: KeyStore;
  tokens: TokenService;
  /** Shared limit counters (`createLimiterRedis`); without it they are counted in memory. */
  redis?: LimiterRedis | undefined;
  /** Redis key prefix. Defaults to the kit's `tollgate:rl:`. */
  redisPrefix?: string;
  /** Defaults to a logger that writes nothing. */
  logger?: Logger;
  /** Defaults to `ORDERS_LIMIT`. */
  ordersLimit?: number;
  /** Failed authentications per IP per minute. Defaults to the kit's 20. */
  authFailureLimit?: number;
}

export interface ExampleApp {
  readonly app: Express;
  /** Stops the limiters' timers (the Redis connection belongs to the caller). */
  readonly shutdown: () => void;
}

const SILENT: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined };

/** Builds the app; it never listens (tests hand it to supertest). */
export function createExampleApp(options: ExampleAppOptions): ExampleApp {
  const { keyStore, tokens, redis } = options;
  const logger = options.logger ?? SILENT;
  const shared = {
    redis,
    ...(options.redisPrefix === undefined ? {} : { prefix: options.redisPrefix }),
  };

  const app = express();
  app.disable('x-powered-by');
  // The client IP is the socket address. Behind a proxy, set a hop count or the proxy's addresses
  // here (never `true`, which trusts whatever the client writes in X-Forwarded-For).
  app.set('trust proxy', false);
  // Refuse framing tricks first: a fragment in the target, headers Node would silently drop.
  app.use(requestId(), refuseMalformedRequests(), clientIp());

  // Routes of your own that need no API key are untouched.
  app.get('/', (_req, res) => {
    res.json({ service: 'shop', endpoints: ['POST /auth/token', 'GET /orders'] });
  });

  // Built once, at start: one store per scope, never shared between limiters.
  const authFailures = createAuthFailureLimiter({
    ...shared,
    limit: options.authFailureLimit ?? DEFAULT_AUTH_FAILURE_LIMIT,
  });
  const tokenLimiter = createRateLimiter({
    ...shared,
    name: 'auth-token',
    limit: TOKEN_EXCHANGE_LIMIT,
  });
  const ordersLimiter = createRateLimiter({
    ...shared,
    name: 'orders',
    limit: options.ordersLimit ?? ORDERS_LIMIT,
  });
  const onSecurityEvent = (event: SecurityEvent, req: RequestFacts): void => {
    logger.warn(
      { ...event, client_ip: req.clientIp, request_id: req.requestId },
      'rotate this secret key',
    );
  };

  // Key pair in, short-lived token out.
  app.post(
    '/auth/token',
    authFailures.guard,
    jsonBody(),
    // Compared under the failed-authentication budget: a spent budget refuses even the right pair.
    authenticateKeyPair({ keyStore, authFailures }),
    requireWhitelistedIp(),
    tokenLimiter.middleware,
    issueToken({ tokens }),
    authFailures.recordFailure,
  );

  // A route of your own, answered by your own handler once every check has passed.
  const listOrders: RequestHandler = (req, res) => {
    res.json({
      account_id: req.auth?.accountId,
      orders: [{ id: 'ord_1001', amount: '49.90', currency: 'EUR', state: 'PAID' }],
    });
  };
  app.get(
    '/orders',
    authFailures.guard,
    authenticate({ keyStore, tokens, accept: ['secret', 'token'], onSecurityEvent, authFailures }),
    requireWhitelistedIp(),
    requireRole('level-2'),
    ordersLimiter.middleware,
    listOrders,
    authFailures.recordFailure,
  );

  app.use(notFound());
  app.use(errorHandler({ logger }));

  return {
    app,
    shutdown: () => {
      for (const store of [authFailures.store, tokenLimiter.store, ordersLimiter.store])
        store.shutdown();
    },
  };
}

export interface DemoKeyPair {
  readonly keyId: string;
  readonly role: Role;
  readonly publishableKey: string;
  readonly secretKey: string;
}

/**
 * A keys document (the keys file's format) for one account with a key pair per role. Only the
 * SHA-256 of each secret goes into the document; the secrets are returned to be shown once.
 */
export function createDemoKeys(
  accountId = 'acct_shop',
  roles: readonly Role[] = ['level-1', 'level-2'],
): { document: unknown; keyPairs: DemoKeyPair[] } {
  const keyPairs = roles.map((role) => ({
    keyId: `key_${role.replace('-', '')}`,
    role,
    publishableKey: generateKey('publishable', 'test'),
    secretKey: generateKey('secret', 'test'),
  }));
  const document = {
    accounts: [
      {
        id: accountId,
        keys: keyPairs.map((pair) => ({
          id: pair.keyId,
          publishableKey: pair.publishableKey,
          secretKeySha256: sha256(pair.secretKey).toString('hex'),
          role: pair.role,
        })),
      },
    ],
  };
  return { document, keyPairs };
}

const consoleLogger: Logger = {
  info: (fields, message) => {
    console.log(JSON.stringify({ level: 'info', msg: message, ...fields }));
  },
  warn: (fields, message) => {
    console.warn(JSON.stringify({ level: 'warn', msg: message, ...fields }));
  },
  error: (fields, message) => {
    console.error(JSON.stringify({ level: 'error', msg: message, ...fields }));
  },
};

async function main(): Promise<void> {
  const port = Number(process.env.PORT ?? 3000);
  const keysFile = process.env.TOLLGATE_KEYS_FILE;
  let keyStore: KeyStore;
  if (keysFile !== undefined && keysFile !== '') {
    keyStore = await FileKeyStore.load(keysFile);
  } else {
    const demo = createDemoKeys();
    keyStore = KeyRing.fromDocument(demo.document, 'demo keys');
    console.log('Demo keys (this process only):');
    for (const pair of demo.keyPairs) {
      console.log(`  ${pair.role}  publishable ${pair.publishableKey}  secret ${pair.secretKey}`);
    }
  }
  const secret = process.env.TOLLGATE_TOKEN_SECRET;
  if (secret === undefined)
    console.warn('TOLLGATE_TOKEN_SECRET is not set: tokens die with this process');
  const tokens = new TokenService({ secret: secret ?? randomBytes(48).toString('base64') });
  const redisUrl = process.env.REDIS_URL;
  const redis =
    redisUrl === undefined || redisUrl === '' ? undefined : createLimiterRedis({ url: redisUrl });

  const { app, shutdown } = createExampleApp({ keyStore, tokens, redis, logger: consoleLogger });
  // `requireHostHeader: false` lets `refuseMalformedRequests()` answer a request without `Host`
  // with the JSON body; `clientErrorHandler()` does the same for what Node's parser refuses.
  const server = http.createServer({ requireHostHeader: false }, app);
  server.on('clientError', clientErrorHandler());
  server.listen(port, '127.0.0.1', () => {
    console.log(
      `example app listening on http://127.0.0.1:${port} (limits: ${redis === undefined ? 'memory' : 'Redis'})`,
    );
  });
  const stop = (): void => {
    server.close();
    shutdown();
    void redis?.close();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(`example: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  });
}
