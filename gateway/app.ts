import cors from 'cors';
import express, { type Express, type RequestHandler } from 'express';
import {
  authenticate,
  DEFAULT_PUBLIC_KEY_HEADER,
  refuseQueryCredentials,
  type SecurityEvent,
} from '../lib/credentials';
import { createPathRedactor } from '../lib/credential-scan';
import { errorHandler, methodNotAllowed, notFound } from '../lib/error-handler';
import { NotFoundError } from '../lib/errors';
import { requireWhitelistedIp } from '../lib/ip-whitelist';
import { jsonBody } from '../lib/json-body';
import type { KeyStore } from '../lib/key-store';
import { createAuthFailureLimiter } from '../lib/rate-limit/auth-failures';
import { createRateLimiter, type LimiterRedis, type RateLimiter } from '../lib/rate-limit/limiter';
import { clientIp, requestId } from '../lib/request-context';
import { refuseMalformedRequests } from '../lib/request-shape';
import { requireRole } from '../lib/roles';
import { authenticateKeyPair, issueToken } from '../lib/token-exchange';
import type { TokenService } from '../lib/tokens';
import type { Logger } from '../lib/types';
import { auditAllowed, auditDenied } from './audit';
import { DEFAULT_LIMITS, type LimitsConfig, type TrustProxy } from './config';
import { createProxy } from './proxy';
import { ID_PATTERN, type LimitScope, ROUTES, type RouteSpec } from './routes';

/**
 * The sample gateway: the route table of `routes.ts` composed from the kit's middlewares, in front
 * of a streaming proxy. `createApp` never listens; `server.ts` does, and tests hand the app to
 * supertest.
 */

export interface AppOptions {
  keyStore: KeyStore;
  tokens: TokenService;
  upstreamUrl: string;
  logger: Logger;
  /** Shared counters; without it limits are counted in memory. */
  redis?: LimiterRedis | undefined;
  redisPrefix?: string;
  limits?: LimitsConfig;
  expectedInstances?: number;
  trustProxy?: TrustProxy;
  publicKeyHeader?: string;
  upstreamTimeoutMs?: number;
}

export type GatewayApp = Express & {
  /** Stops timers and closes upstream connections (not the Redis client, which the caller owns). */
  shutdown(): void;
  /** What `/healthz` reports about rate-limit counters. */
  rateLimitState(): 'memory' | 'shared' | 'degraded';
};

export function createApp(options: AppOptions): GatewayApp {
  const limits = options.limits ?? DEFAULT_LIMITS;
  const { logger } = options;
  const publicKeyHeader = options.publicKeyHeader ?? DEFAULT_PUBLIC_KEY_HEADER;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('trust proxy', options.trustProxy ?? false);

  const limiterDefaults = {
    redis: options.redis,
    prefix: options.redisPrefix,
    expectedInstances: options.expectedInstances,
    windowMs: limits.windowMs,
    logger: {
      warn: (_error: unknown, message?: string) => {
        logger.warn({ component: 'rate-limit' }, message);
      },
      error: (_error: unknown, message?: string) => {
        logger.error({ component: 'rate-limit' }, message);
      },
    },
  };
  const limiters: Record<LimitScope, RateLimiter> = {
    payments: createRateLimiter({
      ...limiterDefaults,
      name: 'payments',
      limit: limits.payments,
      key: 'account',
    }),
    authenticated: createRateLimiter({
      ...limiterDefaults,
      name: 'authenticated',
      limit: limits.authenticated,
      key: 'account',
    }),
    'checkout-create': createRateLimiter({
      ...limiterDefaults,
      name: 'checkout-create',
      limit: limits.checkoutCreate,
      key: 'ip',
    }),
    'checkout-read': createRateLimiter({
      ...limiterDefaults,
      name: 'checkout-read',
      limit: limits.checkoutRead,
      key: 'ip',
    }),
  };
  // Contract 8: a browser holding a merchant's publishable key cannot spend the merchant's whole
  // `payments` budget. Checked first, so a refusal here spends nothing of the account's.
  const publishablePayments = createRateLimiter({
    ...limiterDefaults,
    name: 'payments-publishable',
    limit: limits.publishablePayments,
    key: 'ip',
  });
  const publishableCap: RequestHandler = function publishablePaymentsCap(req, res, next) {
    if (req.auth?.credential === 'publishable') {
      void publishablePayments.middleware(req, res, next);
    } else {
      next();
    }
  };
  const authFailures = createAuthFailureLimiter({
    limit: limits.authFailures,
    windowMs: limits.windowMs,
    redis: options.redis,
    prefix: options.redisPrefix,
    expectedInstances: options.expectedInstances,
  });
  const proxy = createProxy({
    upstreamUrl: options.upstreamUrl,
    timeoutMs: options.upstreamTimeoutMs ?? 10_000,
    publicKeyHeader,
  });
  const onSecurityEvent = (event: SecurityEvent, req: express.Request): void => {
    logger.warn(
      {
        event: 'security.leaked_secret_key',
        reason: event.reason,
        key_id: event.keyId,
        account_id: event.accountId,
        client_ip: req.clientIp,
        request_id: req.requestId,
      },
      'a secret key was sent where it can leak; rotate it',
    );
  };
  const rateLimitState = (): 'memory' | 'shared' | 'degraded' =>
    options.redis === undefined ? 'memory' : options.redis.health.state;

  app.use(
    requestId(),
    securityHeaders,
    accessLog(logger, createPathRedactor({ keyStore: options.keyStore })),
    refuseMalformedRequests(),
    clientIp(),
  );
  app.use(refuseQueryCredentials({ keyStore: options.keyStore, onSecurityEvent }));

  // Routes that take a publishable key are called from browsers (Checkout): answer CORS for them,
  // without credentials mode (keys travel in a header, never in cookies).
  const browserCors = new Map<string, RequestHandler>();
  for (const [path, methods] of allowedMethods(ROUTES.filter(acceptsPublishableKey))) {
    browserCors.set(
      path,
      cors({
        origin: '*',
        methods,
        allowedHeaders: ['Content-Type', publicKeyHeader],
        exposedHeaders: ['RateLimit', 'RateLimit-Policy', 'Retry-After', 'X-Request-Id'],
        maxAge: 600,
      }),
    );
  }

  const router = express.Router({ caseSensitive: true, strict: false });
  router.param('id', (_req, _res, next, value: string) => {
    next(ID_PATTERN.test(value) ? undefined : new NotFoundError());
  });
  for (const route of ROUTES) {
    const auth: RequestHandler[] =
      route.accept === 'key-pair'
        ? [authenticateKeyPair({ keyStore: options.keyStore, onSecurityEvent, authFailures })]
        : [
            authenticate({
              keyStore: options.keyStore,
              tokens: options.tokens,
              accept: route.accept,
              publicKeyHeader,
              onSecurityEvent,
              authFailures,
            }),
          ];
    const handler =
      route.accept === 'key-pair' ? issueToken({ tokens: options.tokens }) : proxy.handler;
    router[route.method === 'GET' ? 'get' : 'post'](
      route.path,
      ...optional(browserCors.get(route.path)),
      authFailures.guard,
      jsonBody(),
      ...auth,
      requireWhitelistedIp(),
      ...(route.minimumRole === undefined ? [] : [requireRole(route.minimumRole)]),
      ...(route.scope === 'payments' && acceptsPublishableKey(route) ? [publishableCap] : []),
      limiters[route.scope].middleware,
      auditAllowed(logger, route.path),
      handler,
      authFailures.recordFailure,
      auditDenied(logger, route.path),
    );
  }
  router.get('/healthz', (_req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    res.json({ status: 'ok', rate_limits: rateLimitState() });
  });
  for (const [path, methods] of allowedMethods(ROUTES)) {
    const browser = browserCors.get(path);
    if (browser !== undefined) router.options(path, browser);
    router.all(path, methodNotAllowed(methods));
  }
  router.all('/healthz', methodNotAllowed(['GET']));
  app.use(router);
  app.use(notFound());
  app.use(errorHandler({ logger }));

  return Object.assign(app, {
    shutdown: () => {
      for (const limiter of [...Object.values(limiters), publishablePayments])
        limiter.store.shutdown();
      authFailures.store.shutdown();
      proxy.close();
    },
    rateLimitState,
  });
}

function optional<T>(value: T | undefined): T[] {
  return value === undefined ? [] : [value];
}

function acceptsPublishableKey(route: RouteSpec): boolean {
  return route.accept !== 'key-pair' && route.accept.includes('publishable');
}

function allowedMethods(routes: readonly RouteSpec[]): Map<string, string[]> {
  const byPath = new Map<string, string[]>();
  for (const route of routes)
    byPath.set(route.path, [...(byPath.get(route.path) ?? []), route.method]);
  return byPath;
}

const securityHeaders: RequestHandler = function securityHeadersMiddleware(_req, res, next) {
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('X-Frame-Options', 'DENY');
  next();
};

/** One line per request: no query string, no headers, no body, so never a credential. */
function accessLog(logger: Logger, loggablePath: (path: string) => string): RequestHandler {
  return function accessLogMiddleware(req, res, next) {
    if (logger.isLevelEnabled?.('info') === false) {
      next();
      return;
    }
    const started = process.hrtime.bigint();
    res.once('finish', () => {
      logger.info({
        event: 'http.request',
        request_id: req.requestId,
        method: req.method,
        path: loggablePath(req.path),
        status: res.statusCode,
        duration_ms: Number(process.hrtime.bigint() - started) / 1e6,
        client_ip: req.clientIp,
        account_id: req.auth?.accountId,
        key_id: req.auth?.keyId,
      });
    });
    next();
  };
}
