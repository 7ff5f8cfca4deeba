import express, { type Express, type RequestHandler } from 'express';
import { type KeyDirectory, type Logger, notFound } from '../../lib';
import { NotFoundError } from '../../lib/internal';
import {
  clientIp,
  createAuthFailureLimiter,
  errorHandler,
  jsonBody,
  methodNotAllowed,
  refuseMalformedRequests,
  requestId,
} from '../../lib/entry/express';
import { createPathRedactor } from '../../lib/entry/core';
import { traceRequest } from '../../lib/internal';
import { adminAccess } from '../admin-access';
import { dashboardRoutes } from '../dashboard';
import { DashboardSessions } from '../dashboard-sessions';
import { methodsByPath } from '../dispatch';
import type { GatewayMetrics } from '../metrics';
import type { Readiness } from '../readiness';
import {
  type AccountDecisions,
  type AccountUsage,
  decisionsHandler,
  usageHandler,
} from './account-reads';
import { audit } from './audit';
import { databaseHandlers, type KeyManager } from './database-store';
import { fileHandlers } from './file-store';
import { operatorHeaders } from './headers';
import { ADMIN_ROUTES } from './routes';
import {
  answerCheck,
  answerChecksRequested,
  checkedErrorHandler,
  operationAnswers,
} from '../openapi/answer-check';
import { apiDescription } from '../openapi/document';
import { requestCheck } from '../openapi/request-check';

export type { AccountUsage } from './account-reads';
export type { KeyManager } from './database-store';

/**
 * The admin listener, for operators, never for API clients: the key-management
 * routes under `/admin/v1/`, behind the admin bearer token (its SHA-256 compared in constant time,
 * wrong tokens throttled per client address like failed authentications). With the database key
 * store every route works, each write in force on every instance within a second; with a keys file
 * the routes only read, and every write answers `409 conflict`: keys files change through the key
 * command and SIGHUP. Without `TOLLGATE_ADMIN_TOKEN_SHA256` every key-management route answers
 * 404, as if it did not exist. Every admin request is audited: action, target, outcome.
 *
 * Its parts, each in a file of this folder: the route table (`routes`), the two storage modes
 * (`file-store`, `database-store`), the checks of a body (`validation`), the answers (`views`, of
 * the shapes in `answers`), an account's usage and decisions (`account-reads`), the audit line
 * (`audit`) and the operators' headers (`headers`).
 */

export interface AdminAppOptions {
  /** The keys in force; an account's are looked up without a walk of every key. */
  readonly directory: Required<KeyDirectory>;
  /** SHA-256 (64 lowercase hex) of the admin token; `undefined`: the routes answer 404. */
  readonly tokenSha256: string | undefined;
  readonly logger: Logger;
  /** The database key store, which takes writes; `undefined`: writes answer 409 with `readOnlyReason`. */
  readonly manager?: KeyManager | undefined;
  /** Why writes are refused when there is no `manager`. */
  readonly readOnlyReason: string;
  /** `GET /readyz`, the same answer as the main listener's. */
  readonly readiness?: Readiness | undefined;
  /** Whether `/readyz` and `/metrics` are traced while tracing is on; not by default. */
  readonly traceProbes?: boolean | undefined;
  /** `GET /metrics` (no token: bind the admin listener where only operators reach it). */
  readonly metrics?: Pick<GatewayMetrics, 'text' | 'contentType'> | undefined;
  /** The dashboard's sessions; a store of its own by default. */
  readonly sessions?: DashboardSessions | undefined;
  /**
   * `GET /admin/v1/accounts/:id/usage`: an account's use of its per-account scopes, read from the
   * counters that decide (the gateway's `usage()`); `undefined`: the route answers 404.
   */
  readonly usage?: AccountUsage | undefined;
  /**
   * `GET /admin/v1/accounts/:id/decisions`: the account's decisions of the last 15 minutes on this
   * instance, a minute at a time (the dashboard's chart); `undefined`: the route answers 404.
   */
  readonly decisions?: AccountDecisions | undefined;
  /**
   * Compare every answer of the admin API and of the error handler with the API description, a
   * mismatch answering 500 (see `gateway/openapi/answer-check.ts`). Defaults to
   * `TOLLGATE_CHECK_ANSWERS=1` in the environment, which the test suite sets.
   */
  readonly checkAnswers?: boolean | undefined;
}

export type AdminApp = Express & { shutdown(): void };

/** Failed admin-token attempts allowed per client address and minute. */
const ADMIN_FAILURE_LIMIT = 20;

export function createAdminApp(options: AdminAppOptions): AdminApp {
  const { logger, directory, manager } = options;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('trust proxy', false);
  const failures = createAuthFailureLimiter({ limit: ADMIN_FAILURE_LIMIT });
  const description = apiDescription();
  const checkAnswers = options.checkAnswers ?? answerChecksRequested();
  // A route's answer check, first in its chain, so that its refusals are checked too.
  const checked = (method: string, path: string): RequestHandler[] =>
    checkAnswers
      ? [answerCheck(description, logger, operationAnswers(method, templateOf(path)))]
      : [];

  // Every admin request is a span of its own while tracing is on (named by its route in `audit`),
  // but Prometheus's scrapes and the readiness probe, unless asked for.
  const loggablePath = createPathRedactor();
  const untraced = new Set(options.traceProbes === true ? [] : ['/readyz', '/metrics']);
  app.use(
    (req, res, next) => {
      traceRequest(req, res, loggablePath, untraced);
      next();
    },
    requestId(),
    operatorHeaders,
    refuseMalformedRequests(),
    clientIp(),
  );

  const router = express.Router({ caseSensitive: true, strict: false });
  if (options.readiness !== undefined) {
    router.get('/readyz', ...checked('GET', '/readyz'), options.readiness.handler);
    router.all('/readyz', methodNotAllowed(['GET']));
  }
  const { metrics } = options;
  if (metrics !== undefined) {
    router.get('/metrics', (_req, res, next) => {
      metrics.text().then((text) => {
        res.setHeader('Content-Type', metrics.contentType);
        res.end(text);
      }, next);
    });
    router.all('/metrics', methodNotAllowed(['GET']));
  }
  if (options.tokenSha256 !== undefined) {
    const { authorised, sessionRoutes } = adminAccess(
      options.tokenSha256,
      failures,
      options.sessions ?? new DashboardSessions(),
      (action) => audit(action, logger),
      manager === undefined ? options.readOnlyReason : null,
    );
    router.use(sessionRoutes, dashboardRoutes());
    // The API description, without the admin token: it holds no data, only the routes' shapes,
    // and this listener is one only operators reach (as for /metrics). Tools that generate
    // clients read it with nothing but the address.
    router.get(OPENAPI_PATH, ...checked('GET', OPENAPI_PATH), (_req, res) => {
      res.type('application/json').send(description.text);
    });
    router.all(OPENAPI_PATH, methodNotAllowed(['GET']));
    const readBody = jsonBody({ limit: '16kb' });
    const sources = { directory, manager, logger };
    const handlers = {
      ...(manager === undefined
        ? fileHandlers(directory, options.readOnlyReason)
        : databaseHandlers(manager, logger)),
      'accounts.usage':
        options.usage === undefined ? unserved : usageHandler(sources, options.usage),
      'accounts.decisions':
        options.decisions === undefined ? unserved : decisionsHandler(sources, options.decisions),
    };
    for (const route of ADMIN_ROUTES) {
      const method = route.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch';
      router[method](
        route.path,
        ...checked(route.method, route.path),
        audit(route.action, logger),
        authorised,
        readBody,
        // Path, query and body against the API description, before the handler reads them.
        requestCheck(description, route.method, templateOf(route.path)),
        handlers[route.action],
      );
    }
    for (const [path, methods] of methodsByPath(ADMIN_ROUTES)) {
      router.all(path, methodNotAllowed(methods));
    }
  }
  app.use(router);
  app.use(notFound());
  const handler = errorHandler({ logger });
  app.use(checkAnswers ? checkedErrorHandler(handler, description, logger) : handler);
  return Object.assign(app, {
    shutdown: () => {
      failures.shutdown();
    },
  });
}

/** Where the admin listener serves the API description. */
export const OPENAPI_PATH = '/admin/v1/openapi.json';

/** An Express path (`/admin/v1/keys/:id`) as the description's template (`/admin/v1/keys/{id}`). */
function templateOf(path: string): string {
  return path.replace(/:([A-Za-z_]+)/g, '{$1}');
}

/** A route this instance was given nothing to answer with: 404, as if it did not exist. */
const unserved: RequestHandler = (_req, _res, next) => {
  next(new NotFoundError());
};
