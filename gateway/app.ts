import { randomBytes } from 'node:crypto';
import express, { type Express, type RequestHandler } from 'express';
import {
  type KeyDirectory,
  type KeyStore,
  type Logger,
  notFound,
  type ScopeDefinition,
  type SecurityEvent,
  type RateLimitState,
  type ThreadLink,
  type TokenService,
  tollgate,
  type IdempotencyEvent,
} from '../lib';
import { type LimiterRedis, type SharedStoreState } from '../lib/entry/redis';
import { type RequestFacts, type RoutePolicy, type ScopeUsage } from '../lib/entry/core';
import {
  createPathRedactor,
  DEFAULT_PUBLIC_KEY_HEADER,
  type RouteTableEntry,
} from '../lib/entry/core';
import { refuseQueryCredentials, requestId, series } from '../lib/entry/express';
import { createAccessLog } from './access-log';
import { methodsByPath, routeDispatch } from './dispatch';
import {
  DEFAULT_LIMITS,
  type IdempotencyConfig,
  type LimitsConfig,
  type ShadowConfig,
  type TrustProxy,
} from './config';
import { DecisionHistory, type MinuteCounts } from './decision-history';
import { GatewayMetrics } from './metrics';
import { createProxy } from './proxy';
import {
  answerChecksRequested,
  checkedErrorHandler,
  forwardAuthAnswerCheck,
} from './openapi/answer-check';
import { apiDescription } from './openapi/document';
import { createReadiness, type Readiness, reportsStatus, UpstreamProbe } from './readiness';
import { GATEWAY_SCOPE_NAMES, GATEWAY_SCOPES, type GatewayScope } from './keys-cli/limit-scopes';
import { ID_PATTERN, IDEMPOTENT_PATHS, ROUTES, type RouteSpec } from './routes';
import { type SecretScanningRouteOptions, secretScanningRoute } from './secret-scanning';

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
  /** Limit scopes and accounts' IP whitelists tried in shadow mode (never enforced). */
  shadow?: ShadowConfig;
  /** Whether `/healthz` and `/readyz` are traced while tracing is on; not by default. */
  traceProbes?: boolean;
  /** Whether a traced request's key lookup and admission get child spans; not by default. */
  traceSteps?: boolean;
  /** The readiness probe of the upstream (`/readyz`). Defaults to every 500 ms, 1000 ms timeout. */
  upstreamProbe?: { intervalMs?: number; timeoutMs?: number };
  /**
   * Compare the forward-auth door's answers and the error handler's with the API description, a
   * mismatch answering 500 (`gateway/openapi/answer-check.ts`); nothing else is checked, and when
   * off nothing of it is mounted. Defaults to `TOLLGATE_CHECK_ANSWERS=1`, which the tests set.
   */
  checkAnswers?: boolean;
  /**
   * Idempotency keys on the routes that move money: the secret stored answers are sealed under
   * (the token secret), the routes that require a key, the lifetime and the answer bound. Defaults
   * to a random secret, no route requiring a key, 24 hours and 64 KiB.
   */
  idempotency?: Partial<IdempotencyConfig> & { readonly secret?: string };
  /** The secret-scanning endpoint, and the store's writes it revokes or rolls keys with. */
  secretScanning?: Pick<SecretScanningRouteOptions, 'config' | 'writer'> | undefined;
  /** Set when this app is one of several threads serving one port: what they share. */
  host?: AppHost | undefined;
}

/** What the threads serving one port share, as one app sees it. */
export interface AppHost {
  /** This thread's share of the limits, idempotency records and failure budget of the host. */
  readonly threads: ThreadLink;
  /** Why the other threads are not ready: `/readyz` is ready only when every thread is. */
  readonly peersNotReady: () => readonly string[];
}

export type GatewayApp = Express & {
  /** Stops timers and closes upstream connections (not the Redis client, which the caller owns). */
  shutdown(): void;
  /** What `/healthz` reports about rate-limit counters. */
  rateLimitState(): RateLimitState;
  /** What `/readyz` answers (the admin listener serves it too). */
  readonly readiness: Readiness;
  /** Resolves once the upstream has been probed once, so `/readyz` reflects it. */
  readonly upstreamChecked: Promise<void>;
  /** What `/metrics` on the admin listener shows. */
  readonly metrics: GatewayMetrics;
  /** An account's use of its per-account scopes, from the counters that decide. */
  usage(accountId: string, limits?: Readonly<Record<string, number>>): Promise<ScopeUsage[]>;
  /** An account's decisions of the last 15 minutes on this instance (the dashboard's chart). */
  decisions(accountId: string): MinuteCounts[];
};

export function createApp(options: AppOptions): GatewayApp {
  const limits = options.limits ?? DEFAULT_LIMITS;
  const { logger } = options;
  const publicKeyHeader = options.publicKeyHeader ?? DEFAULT_PUBLIC_KEY_HEADER;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('trust proxy', options.trustProxy ?? false);

  const onSecurityEvent = (event: SecurityEvent, req: RequestFacts): void => {
    metrics.secretKeyLeaked(event.reason);
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
  const { keyStore } = options;
  const history = new DecisionHistory();
  const metrics = new GatewayMetrics({
    scopes: GATEWAY_SCOPE_NAMES,
    rateLimitState: () => rateLimitState(),
    degradedSince: () => options.redis?.health.degradedAt,
    keys: () => ({
      ...(reportsStatus(keyStore) ? keyStore.state() : { status: 'ready' as const }),
      count: keyCount(keyStore),
    }),
    upstream: () => probe.state,
    ready: () => readiness.report().ready,
    idempotentRoutes: IDEMPOTENT_PATHS,
    // The process's CPU and memory are the host's, reported once by its main thread.
    processMetrics: options.host === undefined,
  });
  let redisReason: string | undefined;
  const health = options.redis?.health;
  const reportRateLimits = (state: SharedStoreState, reason?: string): void => {
    metrics.rateLimitsChanged(state, health?.degradedAt);
    redisReason = state === 'degraded' ? reason : undefined;
  };
  health?.on('change', reportRateLimits);
  const accessLog = createAccessLog({
    logger,
    loggablePath: createPathRedactor({ keyStore: options.keyStore }),
    metrics,
  });
  const idempotency = options.idempotency ?? {};
  const upstreamTimeoutMs = options.upstreamTimeoutMs ?? 10_000;
  const requiredKeys = new Set(idempotency.required ?? []);
  const policyOf = (route: RouteSpec): RoutePolicy<GatewayScope> =>
    routePolicy(
      route,
      route.idempotent === true
        ? requiredKeys.has(route.path)
          ? 'required'
          : 'optional'
        : undefined,
    );
  const gate = tollgate({
    keyStore: options.keyStore,
    tokens: options.tokens,
    scopes: scopeDefinitions(limits),
    windowMs: limits.windowMs,
    authFailureLimit: limits.authFailures,
    redis: options.redis === undefined ? undefined : metrics.instrumentRedis(options.redis),
    redisPrefix: options.redisPrefix,
    expectedInstances: options.expectedInstances,
    publicKeyHeader,
    onSecurityEvent,
    shadow: options.shadow,
    idempotency: {
      secret: idempotency.secret ?? randomBytes(48).toString('base64'),
      ttlSeconds: idempotency.ttlSeconds,
      maxAnswerBytes: idempotency.maxAnswerBytes,
      // A first request is answered within the upstream's deadline, or answered 504 then.
      inFlightSeconds: Math.min(Math.ceil(upstreamTimeoutMs / 1000) + 5, 3600),
      onOutcome: (event) => {
        metrics.idempotency(event.policy, event.outcome);
        auditIdempotency(logger, event);
      },
    },
    untracedPaths: options.traceProbes === true ? [] : PROBE_PATHS,
    threads: options.host?.threads,
    traceSteps: options.traceSteps === true,
    onDecision: (event) => {
      const rateLimits = gate.rateLimitState();
      metrics.decision(event, rateLimits);
      history.record(event);
      accessLog.observe(event, rateLimits);
    },
    logger,
  });
  const proxy = createProxy({
    upstreamUrl: options.upstreamUrl,
    timeoutMs: upstreamTimeoutMs,
    publicKeyHeader,
    onAnswer: (seconds) => {
      metrics.upstreamAnswered(seconds);
    },
    onFailure: (kind) => {
      metrics.upstreamFailed(kind);
    },
  });
  const rateLimitState = (): RateLimitState => gate.rateLimitState();
  let upstreamUp: boolean | undefined;
  const probe = new UpstreamProbe({
    upstreamUrl: options.upstreamUrl,
    intervalMs: options.upstreamProbe?.intervalMs,
    timeoutMs: options.upstreamProbe?.timeoutMs,
    onProbe: (state) => {
      if (state.up === upstreamUp) return;
      upstreamUp = state.up;
      if (state.up) logger.info({ event: 'upstream.up' }, 'the upstream answers: ready');
      else
        logger.warn(
          { event: 'upstream.down', reason: state.reason },
          'the upstream does not answer: /readyz answers 503',
        );
    },
  });
  const upstreamChecked = probe.start();
  const readiness = createReadiness({
    keyStore: options.keyStore,
    upstream: probe,
    idempotency: () => gate.gate.idempotencyState() ?? 'memory',
    peers: options.host?.peersNotReady,
    rateLimits: () => {
      const state = rateLimitState();
      return state === 'degraded' && redisReason !== undefined
        ? { state, reason: redisReason }
        : { state };
    },
  });

  // One Express layer for what every request passes through (gateway/dispatch.ts).
  app.use(
    series([
      // The id first, so that the access log's line of a request `context()` refuses carries it.
      requestId(),
      securityHeaders,
      accessLog.middleware,
      gate.context(),
    ]),
  );
  // A credential in the query string is refused on every path. On a route of the table and in
  // the forward-auth door, the gate refuses it as the first decision (counted, traced and logged
  // as the route's); every other answer runs this check first.
  const refuseQuery = refuseQueryCredentials({ keyStore: options.keyStore, onSecurityEvent });

  // Routes that take a publishable key are called from browsers (Checkout): answer CORS for them,
  // without credentials mode (keys travel in a header, never in cookies).
  const browserCors = new Map<string, RequestHandler>();
  for (const [path, methods] of methodsByPath(ROUTES.filter(acceptsPublishableKey))) {
    browserCors.set(path, gate.cors({ methods }));
  }

  const checkAnswers = options.checkAnswers ?? answerChecksRequested();
  if (checkAnswers) {
    app.use(FORWARD_AUTH_PATH, forwardAuthAnswerCheck(apiDescription(), logger, FORWARD_AUTH_PATH));
  }
  // Forward authentication: a reverse proxy asks about a route of the same table,
  // decided by the same policies, and forwards the request itself.
  app.use(
    FORWARD_AUTH_PATH,
    gate.forwardAuth({
      routes: ROUTES.map((route) => ({
        method: route.method,
        path: route.path,
        ...policyOf(route),
      })),
      parameterPattern: ID_PATTERN,
    }),
  );

  const healthz: RequestHandler = (_req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    res.json({ status: 'ok', rate_limits: rateLimitState() });
  };
  // The route table in one Express layer (gateway/dispatch.ts), matched as Express's router
  // matched it: an id is percent-decoded, then must match ID_PATTERN (404; a malformed escape, 400).
  const entries: RouteTableEntry<RequestHandler>[] = [];
  for (const route of ROUTES) {
    const policy = policyOf(route);
    const handlers: RequestHandler[] =
      policy.accept === 'key-pair'
        ? [gate.tokenExchange({ limit: policy.limit, id: policy.id })]
        : [
            // Every body is read and checked before it is proxied.
            gate.protect({ ...policy, accept: policy.accept, body: true }),
            proxy.handler,
          ];
    entries.push({
      method: route.method,
      path: route.path,
      value: series([...optional(browserCors.get(route.path)), ...handlers]),
    });
  }
  for (const [path, browser] of browserCors) {
    entries.push({ method: 'OPTIONS', path, value: series([refuseQuery, browser]) });
  }
  const scanning =
    options.secretScanning === undefined
      ? undefined
      : secretScanningRoute({
          ...options.secretScanning,
          logger,
          metrics,
          redis: options.redis,
          redisPrefix: options.redisPrefix,
          expectedInstances: options.expectedInstances,
        });
  if (scanning !== undefined) {
    entries.push({ ...scanning.entry, value: series([refuseQuery, scanning.entry.value]) });
  }
  entries.push(
    { method: 'GET', path: '/healthz', value: series([refuseQuery, healthz]) },
    { method: 'GET', path: '/readyz', value: series([refuseQuery, readiness.handler]) },
  );
  app.use(routeDispatch(entries, ID_PATTERN, refuseQuery));
  app.use(notFound());
  app.use(
    checkAnswers
      ? checkedErrorHandler(gate.errorHandler(), apiDescription(), logger)
      : gate.errorHandler(),
  );

  const usage: GatewayApp['usage'] = (accountId, accountLimits) =>
    gate.usage(accountId, accountLimits);
  return Object.assign(app, {
    shutdown: () => {
      // The Redis client and its health outlive the app (the caller owns them).
      health?.off('change', reportRateLimits);
      gate.close();
      scanning?.shutdown();
      proxy.close();
      void probe.close();
    },
    rateLimitState,
    readiness,
    upstreamChecked,
    metrics,
    usage,
    decisions: (accountId: string) => history.minutes(accountId),
  });
}

/** The main listener's probes, for load balancers and orchestrators. */
const PROBE_PATHS = ['/healthz', '/readyz'];

/** Where the forward-auth door is mounted on the main listener. */
const FORWARD_AUTH_PATH = '/authz';

/** Each of the gateway's scopes at its configured limit, counted as it is declared. */
function scopeDefinitions(limits: LimitsConfig): Record<GatewayScope, ScopeDefinition> {
  const limitOf: Record<GatewayScope, number> = {
    payments: limits.payments,
    authenticated: limits.authenticated,
    'checkout-create': limits.checkoutCreate,
    'checkout-read': limits.checkoutRead,
    'payments-publishable': limits.publishablePayments,
  };
  const definitions = {} as Record<GatewayScope, ScopeDefinition>;
  for (const name of GATEWAY_SCOPE_NAMES) {
    definitions[name] = { limit: limitOf[name], per: GATEWAY_SCOPES[name] };
  }
  return definitions;
}

/** A route's policy, the same for the gateway's own proxy and for forward authentication. */
function routePolicy(
  route: RouteSpec,
  idempotency: RoutePolicy['idempotency'],
): RoutePolicy<GatewayScope> {
  return {
    id: route.path,
    idempotency,
    accept: route.accept,
    role: route.minimumRole,
    permission: route.permission,
    limit: route.scope,
    // A browser holding a merchant's publishable key cannot spend the merchant's
    // whole `payments` budget.
    publishableLimit:
      route.scope === 'payments' && acceptsPublishableKey(route)
        ? 'payments-publishable'
        : undefined,
  };
}

/**
 * The audit line of a key's replay or refusal, and of an answer that could not be kept. It names
 * the account, the key id and the request, never the body of the answer.
 */
function auditIdempotency(logger: Logger, event: IdempotencyEvent): void {
  const { outcome } = event;
  if (outcome === 'claimed' || outcome === 'stored' || outcome === 'released') return;
  const fields = {
    event: `idempotency.${outcome}`,
    route: event.policy,
    account_id: event.auth.accountId,
    key_id: event.auth.keyId,
    client_ip: event.facts.clientIp,
    request_id: event.facts.requestId,
  };
  if (outcome === 'replayed')
    logger.info(fields, 'answered from the first request with this Idempotency-Key');
  else if (outcome === 'too_large' || outcome === 'not_stored' || outcome === 'unavailable')
    logger.warn(fields, IDEMPOTENCY_WARNINGS[outcome]);
  else logger.info(fields, 'refused for its Idempotency-Key');
}

const IDEMPOTENCY_WARNINGS = {
  too_large:
    'an answer was larger than TOLLGATE_IDEMPOTENCY_MAX_ANSWER_BYTES: its retries are refused 409',
  not_stored: 'an answer could not be kept: its retries are refused 409 until the key expires',
  unavailable: 'the idempotency store cannot be used: a request with a key was refused 503',
} as const;

function optional<T>(value: T | undefined): T[] {
  return value === undefined ? [] : [value];
}

function acceptsPublishableKey(route: RouteSpec): boolean {
  return route.accept !== 'key-pair' && route.accept.includes('publishable');
}

const securityHeaders: RequestHandler = function securityHeadersMiddleware(_req, res, next) {
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('X-Frame-Options', 'DENY');
  next();
};

/** Keys in force, when the store counts them (never a walk of a million keys per scrape). */
function keyCount(store: KeyStore): number | undefined {
  const { size } = store as { size?: unknown };
  if (typeof size === 'number') return size;
  const directory = store as Partial<KeyDirectory>;
  if (typeof directory.keyRecords !== 'function') return undefined;
  let count = 0;
  for (const _record of directory.keyRecords()) count++;
  return count;
}
