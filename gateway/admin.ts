import express, { type Express, type RequestHandler } from 'express';
import {
  clientIp,
  ConflictError,
  createAuthFailureLimiter,
  errorHandler,
  InvalidRequestError,
  jsonBody,
  type KeyDirectory,
  type KeyRecord,
  type Logger,
  methodNotAllowed,
  notFound,
  NotFoundError,
  type PgKeyStore,
  refuseMalformedRequests,
  requestId,
  type ScopeUsage,
  TollgateError,
} from '../lib';
import { adminAccess } from './admin-access';
import { dashboardRoutes } from './dashboard';
import { DashboardSessions } from './dashboard-sessions';
import type { MinuteCounts } from './decision-history';
import type { GatewayMetrics } from './metrics';
import type { Readiness } from './readiness';

/**
 * The admin listener, for operators, never for API clients: the key-management
 * routes under `/admin/v1/`, behind the admin bearer token (its SHA-256 compared in constant time,
 * wrong tokens throttled per client address like failed authentications). With the database key
 * store every route works, each write in force on every instance within a second; with a keys file
 * the routes only read, and every write answers `409 conflict`: keys files change through the key
 * command and SIGHUP. Without `TOLLGATE_ADMIN_TOKEN_SHA256` every key-management route answers
 * 404, as if it did not exist. Every admin request is audited: action, target, outcome.
 */

export interface AdminAppOptions {
  readonly directory: KeyDirectory;
  /** SHA-256 (64 lowercase hex) of the admin token; `undefined`: the routes answer 404. */
  readonly tokenSha256: string | undefined;
  readonly logger: Logger;
  /** The database key store, which takes writes; `undefined`: writes answer 409 with `readOnlyReason`. */
  readonly manager?: KeyManager | undefined;
  /** Why writes are refused when there is no `manager`. */
  readonly readOnlyReason: string;
  /** `GET /readyz`, the same answer as the main listener's. */
  readonly readiness?: Readiness | undefined;
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
  readonly decisions?: ((accountId: string) => readonly MinuteCounts[]) | undefined;
}

/** An account's use of its per-account scopes, given its limit overrides. */
export type AccountUsage = (
  accountId: string,
  limits?: Readonly<Record<string, number>>,
) => Promise<ScopeUsage[]>;

/** What the admin routes need of a key store that takes writes (the database store). */
export type KeyManager = Pick<
  PgKeyStore,
  | 'listAccounts'
  | 'createAccount'
  | 'setIpWhitelist'
  | 'setLimits'
  | 'createKey'
  | 'setRole'
  | 'updateKey'
  | 'roll'
  | 'revoke'
>;

export type AdminApp = Express & { shutdown(): void };

/** Failed admin-token attempts allowed per client address and minute. */
const ADMIN_FAILURE_LIMIT = 20;

/** The key-management routes: method, path, the action audited, and whether it writes. */
const ADMIN_ROUTES = [
  { method: 'GET', path: '/admin/v1/accounts', action: 'accounts.list', writes: false },
  { method: 'POST', path: '/admin/v1/accounts', action: 'accounts.create', writes: true },
  { method: 'GET', path: '/admin/v1/accounts/:id/usage', action: 'accounts.usage', writes: false },
  {
    method: 'GET',
    path: '/admin/v1/accounts/:id/decisions',
    action: 'accounts.decisions',
    writes: false,
  },
  {
    method: 'PUT',
    path: '/admin/v1/accounts/:id/ip-whitelist',
    action: 'accounts.set_ip_whitelist',
    writes: true,
  },
  {
    method: 'PUT',
    path: '/admin/v1/accounts/:id/limits',
    action: 'accounts.set_limits',
    writes: true,
  },
  { method: 'POST', path: '/admin/v1/accounts/:id/keys', action: 'keys.create', writes: true },
  { method: 'PATCH', path: '/admin/v1/keys/:id', action: 'keys.update', writes: true },
  { method: 'POST', path: '/admin/v1/keys/:id/roll', action: 'keys.roll', writes: true },
  { method: 'POST', path: '/admin/v1/keys/:id/revoke', action: 'keys.revoke', writes: true },
] as const;

export function createAdminApp(options: AdminAppOptions): AdminApp {
  const { logger, directory } = options;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('trust proxy', false);
  const failures = createAuthFailureLimiter({ limit: ADMIN_FAILURE_LIMIT });

  app.use(requestId(), operatorHeaders, refuseMalformedRequests(), clientIp());

  const router = express.Router({ caseSensitive: true, strict: false });
  if (options.readiness !== undefined) {
    router.get('/readyz', options.readiness.handler);
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
      options.manager === undefined ? options.readOnlyReason : null,
    );
    router.use(sessionRoutes, dashboardRoutes());
    const readBody = jsonBody({ limit: '16kb' });
    const handlers = {
      ...(options.manager === undefined
        ? fileHandlers(directory, options.readOnlyReason)
        : databaseHandlers(options.manager)),
      'accounts.usage': usageHandler(directory, options.usage, options.manager),
      'accounts.decisions': decisionsHandler(directory, options.decisions, options.manager),
    };
    for (const route of ADMIN_ROUTES) {
      const method = route.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch';
      router[method](
        route.path,
        audit(route.action, logger),
        authorised,
        readBody,
        handlers[route.action],
      );
    }
    for (const [path, methods] of methodsByPath()) router.all(path, methodNotAllowed(methods));
  }
  app.use(router);
  app.use(notFound());
  app.use(errorHandler({ logger }));
  return Object.assign(app, {
    shutdown: () => {
      failures.store.shutdown();
    },
  });
}

type Action = (typeof ADMIN_ROUTES)[number]['action'];
/** The actions served by the key store; usage and decisions are read from this instance. */
type StoreAction = Exclude<Action, 'accounts.usage' | 'accounts.decisions'>;

/**
 * `GET /admin/v1/accounts/:id/usage`: every per-account scope of the account in the
 * current window, spending nothing. The account's limit overrides come from its keys in force; an
 * account without keys is found in the database with its overrides, and an unknown one answers 404.
 */
function usageHandler(
  directory: KeyDirectory,
  usage: AccountUsage | undefined,
  manager: KeyManager | undefined,
): RequestHandler {
  return function accountUsage(req, res, next) {
    const id = typeof req.params.id === 'string' ? req.params.id : '';
    if (usage === undefined) {
      next(new NotFoundError());
      return;
    }
    knownAccount(directory, manager, id)
      .then(async (account) => {
        const scopes = await usage(id, account.limits);
        res.json({
          account_id: id,
          scopes: scopes.map((scope) => ({
            scope: scope.scope,
            limit: scope.limit,
            remaining: scope.remaining,
            reset_seconds: scope.resetSeconds,
          })),
        });
      })
      .catch((error: unknown) => {
        next(error instanceof TollgateError ? error : new DatabaseUnavailableError());
      });
  };
}

/**
 * `GET /admin/v1/accounts/:id/decisions`: the account's decisions of the last 15 minutes on this
 * instance, oldest minute first: `{"account_id","minutes":[{"start","allowed","limited","refused":
 * {code: count}}]}`. An unknown account answers 404.
 */
function decisionsHandler(
  directory: KeyDirectory,
  decisions: AdminAppOptions['decisions'],
  manager: KeyManager | undefined,
): RequestHandler {
  return function accountDecisions(req, res, next) {
    const id = typeof req.params.id === 'string' ? req.params.id : '';
    if (decisions === undefined) {
      next(new NotFoundError());
      return;
    }
    knownAccount(directory, manager, id).then(
      () => {
        res.json({
          account_id: id,
          minutes: decisions(id).map((minute) => ({
            start: new Date(minute.start).toISOString(),
            allowed: minute.allowed,
            limited: minute.limited,
            refused: minute.refused,
          })),
        });
      },
      (error: unknown) => {
        next(error instanceof TollgateError ? error : new DatabaseUnavailableError());
      },
    );
  };
}

/**
 * The account's limit overrides, from its keys in force; an account without keys is found in the
 * database with its overrides. An unknown account rejects with `NotFoundError`.
 */
async function knownAccount(
  directory: KeyDirectory,
  manager: KeyManager | undefined,
  id: string,
): Promise<{ limits: KeyRecord['limits'] }> {
  const found = accountLimits(directory, id);
  if (found !== undefined) return found;
  const stored =
    manager === undefined
      ? undefined
      : (await manager.listAccounts()).find((candidate) => candidate.id === id);
  if (stored === undefined) throw new NotFoundError();
  return { limits: stored.limits ?? undefined };
}

/** The account's limit overrides as its keys in force carry them; `undefined`: no such key. */
function accountLimits(
  directory: KeyDirectory,
  accountId: string,
): { limits: KeyRecord['limits'] } | undefined {
  const records = directory.recordsOfAccount?.(accountId) ?? directory.keyRecords();
  for (const record of records) {
    if (record.accountId === accountId) return { limits: record.limits };
  }
  return undefined;
}

/** With a keys file: the keys in force are listed, every write is refused. */
function fileHandlers(
  directory: KeyDirectory,
  reason: string,
): Record<StoreAction, RequestHandler> {
  const refuse: RequestHandler = (_req, _res, next) => {
    next(new ConflictError(reason));
  };
  return {
    'accounts.list': (_req, res) => {
      res.json({ accounts: accountViews(directory.keyRecords()) });
    },
    'accounts.create': refuse,
    'accounts.set_ip_whitelist': refuse,
    'accounts.set_limits': refuse,
    'keys.create': refuse,
    'keys.update': refuse,
    'keys.roll': refuse,
    'keys.revoke': refuse,
  };
}

/**
 * With the database store: each route validates its body's fields (unknown ones are a 400, as a
 * misspelt field must not be silently ignored), calls the store, which validates the values with
 * the keys file's rules and answers once the change is in force here, and renders the result.
 */
function databaseHandlers(manager: KeyManager): Record<StoreAction, RequestHandler> {
  const run =
    (
      status: number,
      fields: readonly string[],
      act: (req: AdminRequest) => Promise<unknown>,
    ): RequestHandler =>
    (req, res, next) => {
      let body: Record<string, unknown>;
      try {
        body = fieldsOf(req.body, fields);
      } catch (error) {
        next(error);
        return;
      }
      act({ id: typeof req.params.id === 'string' ? req.params.id : '', body }).then(
        (result) => {
          res.status(status).json(result);
        },
        (error: unknown) => {
          next(error instanceof TollgateError ? error : new DatabaseUnavailableError());
        },
      );
    };
  return {
    'accounts.list': run(200, [], async () => ({
      accounts: (await manager.listAccounts()).map((account) => ({
        ...accountView(account),
        keys: account.keys.map(keyView),
      })),
    })),
    'accounts.create': run(201, ['id', 'ip_whitelist', 'limits'], async ({ body }) =>
      accountView(
        await manager.createAccount(body.id, body.ip_whitelist ?? undefined, body.limits),
      ),
    ),
    'accounts.set_ip_whitelist': run(200, ['entries'], async ({ id, body }) => {
      if (!Object.hasOwn(body, 'entries')) {
        throw new InvalidRequestError(
          'entries: a list of addresses and ranges, or null to lift the restriction',
        );
      }
      return accountView(await manager.setIpWhitelist(id, body.entries));
    }),
    'accounts.set_limits': run(200, ['limits'], async ({ id, body }) => {
      if (!Object.hasOwn(body, 'limits')) {
        throw new InvalidRequestError(
          'limits: an object of scope name to requests per minute, or null for the defaults',
        );
      }
      return accountView(await manager.setLimits(id, body.limits));
    }),
    'keys.create': run(201, ['role', 'id', 'expires_at', 'permissions'], async ({ id, body }) =>
      newKeyView(
        await manager.createKey(id, {
          role: body.role,
          id: body.id,
          expiresAt: body.expires_at,
          permissions: body.permissions,
        }),
      ),
    ),
    // The role, the permissions (null lifts them), or both in one write.
    'keys.update': run(200, ['role', 'permissions'], async ({ id, body }) =>
      keyView(await manager.updateKey(id, body)),
    ),
    'keys.roll': run(201, ['grace_seconds'], async ({ id, body }) => {
      const rolled = await manager.roll(id, body.grace_seconds);
      return { ...newKeyView(rolled.key), previous: keyView(rolled.previous) };
    }),
    'keys.revoke': run(200, [], async ({ id }) => keyView(await manager.revoke(id))),
  };
}

interface AdminRequest {
  readonly id: string;
  readonly body: Record<string, unknown>;
}

/** The body as an object with only `allowed` fields; no body is an empty object. */
function fieldsOf(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (body === undefined) return {};
  const object = body as Record<string, unknown>;
  for (const field of Object.keys(object)) {
    if (!allowed.includes(field)) {
      throw new InvalidRequestError(
        allowed.length === 0
          ? 'This route takes no body fields'
          : `unknown field ${JSON.stringify(field.slice(0, 64))}; expected ${allowed.join(', ')}`,
      );
    }
  }
  return object;
}

/** The database did not answer: the write may be retried; nothing half-done stays (one transaction). */
class DatabaseUnavailableError extends TollgateError {
  override readonly name = 'DatabaseUnavailableError';
  constructor() {
    super(503, 'upstream_unavailable', 'The key database is unavailable; the change was not made', {
      'Retry-After': '1',
    });
  }
}

type StoredAccount = Awaited<ReturnType<KeyManager['createAccount']>>;
type StoredKey = Awaited<ReturnType<KeyManager['setRole']>>;
type NewStoredKey = Awaited<ReturnType<KeyManager['createKey']>>;

function accountView(account: StoredAccount): Omit<AccountView, 'keys'> {
  return {
    id: account.id,
    ip_whitelist: account.ipWhitelist === null ? null : [...account.ipWhitelist],
    limits: account.limits === null ? null : { ...account.limits },
  };
}

function keyView(key: StoredKey): KeyView & { account_id: string } {
  return {
    id: key.id,
    account_id: key.accountId,
    role: key.role,
    publishable_key: key.publishableKey,
    created_at: key.createdAt.toISOString(),
    expires_at: key.expiresAt?.toISOString() ?? null,
    revoked_at: key.revokedAt?.toISOString() ?? null,
    last_used_at: key.lastUsedAt?.toISOString() ?? null,
    revoked: key.revokedAt !== null,
    permissions: key.permissions === null ? null : [...key.permissions],
  };
}

/** A key just made: the only answer that ever holds its secret. */
function newKeyView(key: NewStoredKey): ReturnType<typeof keyView> & { secret_key: string } {
  return { ...keyView(key), secret_key: key.secretKey };
}

/** One audit line per admin request, when it is answered: never the token or a body. */
function audit(action: string, logger: Logger): RequestHandler {
  return function auditMiddleware(req, res, next) {
    // Read now: Express restores `req.params` once the route is left.
    const target = typeof req.params.id === 'string' ? req.params.id : null;
    res.once('finish', () => {
      logger.info({
        event: 'admin.audit',
        action,
        target,
        outcome: res.statusCode < 400 ? 'done' : 'refused',
        status: res.statusCode,
        client_ip: req.clientIp,
        request_id: req.requestId,
      });
    });
    next();
  };
}

/**
 * Every answer of the admin listener, the dashboard's pages and its API alike: never
 * stored, never framed, no referrer, and a policy that lets a page run only this listener's own
 * scripts and styles.
 */
const operatorHeaders: RequestHandler = function operatorHeadersMiddleware(_req, res, next) {
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  res.setHeader('X-Frame-Options', 'DENY');
  res.setHeader('Referrer-Policy', 'no-referrer');
  next();
};

const CONTENT_SECURITY_POLICY =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
  "frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

function methodsByPath(): Map<string, string[]> {
  const byPath = new Map<string, string[]>();
  for (const route of ADMIN_ROUTES) {
    byPath.set(route.path, [...(byPath.get(route.path) ?? []), route.method]);
  }
  return byPath;
}

interface AccountView {
  readonly id: string;
  readonly ip_whitelist: readonly string[] | null;
  /** The account's own limits per scope; `null`: every scope at its default. */
  readonly limits: Readonly<Record<string, number>> | null;
  readonly keys: KeyView[];
}

interface KeyView {
  readonly id: string;
  readonly role: string;
  readonly publishable_key: string;
  readonly created_at: string | null;
  readonly expires_at: string | null;
  readonly revoked_at: string | null;
  readonly last_used_at: string | null;
  readonly revoked: boolean;
  /** What a restricted key may do; `null`: all its role allows. */
  readonly permissions: readonly string[] | null;
}

/**
 * Accounts and their keys as `GET /admin/v1/accounts` answers them, never a secret or its digest,
 * plus `revoked`. A keys file records neither when a key was created or revoked nor when it was
 * last used: those are `null` there; `revoked` and `expires_at` say what the file says.
 */
function accountViews(records: Iterable<KeyRecord>): AccountView[] {
  const accounts = new Map<string, AccountView>();
  for (const record of records) {
    let account = accounts.get(record.accountId);
    if (account === undefined) {
      account = {
        id: record.accountId,
        ip_whitelist: record.ipWhitelist === undefined ? null : [...record.ipWhitelist.entries()],
        limits: record.limits === undefined ? null : { ...record.limits },
        keys: [],
      };
      accounts.set(record.accountId, account);
    }
    account.keys.push({
      id: record.id,
      role: record.role,
      publishable_key: record.publishableKey,
      created_at: null,
      expires_at: record.expiresAt === undefined ? null : new Date(record.expiresAt).toISOString(),
      revoked_at: null,
      last_used_at: null,
      revoked: record.revoked,
      permissions: record.permissions === undefined ? null : [...record.permissions],
    });
  }
  return [...accounts.values()];
}
