/**
 * Tollgate mounted in an ordinary Express app of your own (Express 4.21+ or 5): no gateway, no
 * proxy. The app answers its routes itself; one `protect()` call per route authenticates the
 * caller (secret key, token or publishable key), applies the account's IP whitelist, checks the
 * role, counts the request against its limit, throttles credential guessing per IP, and every
 * refusal is rendered as the kit's JSON body.
 *
 *     npm run example                      # builds, then listens on http://127.0.0.1:3000
 *
 * Environment (all optional): PORT (3000), HOST (127.0.0.1), TOLLGATE_KEYS_FILE (a keys file; unset: demo keys are
 * generated and printed), TOLLGATE_TOKEN_SECRET (at least 32 bytes; unset: random per process),
 * REDIS_URL (shared limit counters; unset: in memory).
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Express } from 'express';
import {
  clientErrorHandler,
  expressServerOptions,
  FileKeyStore,
  generateKey,
  KeyRing,
  type KeyStore,
  type Logger,
  notFound,
  type Role,
  type SecurityEvent,
  sha256,
  TokenService,
  tollgate,
} from '../lib';
import { type LimiterRedis } from '../lib/entry/redis';
import { type RequestFacts } from '../lib/entry/core';
import { createLimiterRedis } from '../lib/entry/redis';

/** `GET /orders`: requests per account per minute. */
export const ORDERS_LIMIT = 100;
/** `POST /auth/token`: exchanges per account per minute. */
export const TOKEN_EXCHANGE_LIMIT = 100;
/** `POST /checkout`: checkouts per client IP per minute. */
export const CHECKOUT_LIMIT = 30;

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
  const { keyStore, tokens } = options;
  const logger = options.logger ?? SILENT;

  const app = express();
  app.disable('x-powered-by');
  // The client IP is the socket address. Behind a proxy, set a hop count or the proxy's addresses
  // here (never `true`, which trusts whatever the client writes in X-Forwarded-For).
  app.set('trust proxy', false);

  // Built once, at start: the scopes are declared here and checked wherever they are named.
  const gate = tollgate({
    keyStore,
    tokens,
    scopes: {
      'auth-token': { limit: TOKEN_EXCHANGE_LIMIT, per: 'account' },
      orders: { limit: options.ordersLimit ?? ORDERS_LIMIT, per: 'account' },
      checkout: { limit: CHECKOUT_LIMIT, per: 'ip' },
    },
    redis: options.redis,
    redisPrefix: options.redisPrefix,
    authFailureLimit: options.authFailureLimit,
    onSecurityEvent: (event: SecurityEvent, req: RequestFacts) => {
      logger.warn(
        { ...event, client_ip: req.clientIp, request_id: req.requestId },
        'rotate this secret key',
      );
    },
    logger,
  });
  // Request id, framing checks (a fragment in the target, headers Node would drop), client IP.
  app.use(gate.context());

  // Routes of your own that need no API key are untouched.
  app.get('/', (_req, res) => {
    res.json({
      service: 'shop',
      endpoints: ['POST /auth/token', 'GET /orders', 'POST /checkout'],
    });
  });

  // Key pair in, short-lived token out.
  app.post('/auth/token', gate.tokenExchange({ limit: 'auth-token' }));

  // A route of your own, answered by your own handler once every check has passed.
  app.get(
    '/orders',
    gate.protect({ accept: ['secret', 'token'], role: 'level-2', limit: 'orders' }),
    (req, res) => {
      res.json({
        account_id: req.auth?.accountId,
        orders: [{ id: 'ord_1001', amount: '49.90', currency: 'EUR', state: 'PAID' }],
      });
    },
  );

  // A browser route: the shop's page calls it with the publishable key (header or JSON body).
  const checkoutCors = gate.cors({ methods: ['POST'] });
  app.options('/checkout', checkoutCors);
  app.post(
    '/checkout',
    checkoutCors,
    gate.protect({ accept: ['publishable'], limit: 'checkout' }),
    (req, res) => {
      res.status(201).json({ account_id: req.auth?.accountId, checkout_id: 'chk_1001' });
    },
  );

  app.use(notFound());
  app.use(gate.errorHandler());

  return {
    app,
    shutdown: () => {
      gate.close();
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
  const host = process.env.HOST ?? '127.0.0.1';
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
  // `expressServerOptions(app)` has Node build each request and response with the app's Express
  // prototypes, so Express's swap of them on every request is a no-op (docs/kit.md, "Mounting
  // the middlewares in an existing app").
  const server = http.createServer({ requireHostHeader: false, ...expressServerOptions(app) }, app);
  server.on('clientError', clientErrorHandler());
  server.listen(port, host, () => {
    const address = server.address() as AddressInfo;
    const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    console.log(
      `example app listening on http://${shown}:${address.port} (Express ${expressMajor()}, limits: ${redis === undefined ? 'memory' : 'Redis'})`,
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

/** The major version of the Express this app runs on (4 after `npm install --no-save express@4`). */
function expressMajor(): string {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- the installed express, whichever
  const { version } = require('express/package.json') as { version: string };
  return version.split('.')[0] ?? version;
}

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(`example: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  });
}
