import { timingSafeEqual } from 'node:crypto';
import express, { type Express, type RequestHandler } from 'express';
import {
  AuthenticationError,
  clientIp,
  ConflictError,
  createAuthFailureLimiter,
  errorHandler,
  type KeyDirectory,
  type KeyRecord,
  type Logger,
  methodNotAllowed,
  notFound,
  refuseMalformedRequests,
  requestId,
  sha256,
} from '../lib';

/**
 * The admin listener (contract 13), for operators, never for API clients: the key-management
 * routes under `/admin/v1/`, behind the admin bearer token (its SHA-256 compared in constant time,
 * wrong tokens throttled per client address like failed authentications). With a keys file the
 * routes only read, and every write answers `409 conflict`: keys files change through the key
 * command and SIGHUP. Without `TOLLGATE_ADMIN_TOKEN_SHA256` every key-management route answers
 * 404, as if it did not exist. Every admin request is audited: action, target, outcome.
 */

export interface AdminAppOptions {
  readonly directory: KeyDirectory;
  /** SHA-256 (64 lowercase hex) of the admin token; `undefined`: the routes answer 404. */
  readonly tokenSha256: string | undefined;
  readonly logger: Logger;
  /** Why writes are refused (the store is read-only). */
  readonly readOnlyReason: string;
}

export type AdminApp = Express & { shutdown(): void };

/** Failed admin-token attempts allowed per client address and minute. */
const ADMIN_FAILURE_LIMIT = 20;

/** The key-management routes: method, path, the action audited, and whether it writes. */
const ADMIN_ROUTES = [
  { method: 'GET', path: '/admin/v1/accounts', action: 'accounts.list', writes: false },
  { method: 'POST', path: '/admin/v1/accounts', action: 'accounts.create', writes: true },
  {
    method: 'PUT',
    path: '/admin/v1/accounts/:id/ip-whitelist',
    action: 'accounts.set_ip_whitelist',
    writes: true,
  },
  { method: 'POST', path: '/admin/v1/accounts/:id/keys', action: 'keys.create', writes: true },
  { method: 'PATCH', path: '/admin/v1/keys/:id', action: 'keys.set_role', writes: true },
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

  app.use(requestId(), noStore, refuseMalformedRequests(), clientIp());

  const router = express.Router({ caseSensitive: true, strict: false });
  if (options.tokenSha256 !== undefined) {
    const authorised = adminToken(options.tokenSha256, failures);
    for (const route of ADMIN_ROUTES) {
      const handler: RequestHandler = route.writes
        ? (_req, _res, next) => {
            next(new ConflictError(options.readOnlyReason));
          }
        : (_req, res) => {
            res.json({ accounts: accountViews(directory.keyRecords()) });
          };
      const method = route.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch';
      router[method](route.path, audit(route.action, logger), authorised, handler);
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

/** The admin bearer token, compared by digest in constant time, under a failure budget per IP. */
function adminToken(
  tokenSha256: string,
  failures: ReturnType<typeof createAuthFailureLimiter>,
): RequestHandler {
  const expected = Buffer.from(tokenSha256, 'hex');
  return function adminTokenMiddleware(req, _res, next) {
    const spent = failures.refusalFor(req);
    if (spent !== undefined) {
      next(spent);
      return;
    }
    const values = req.headersDistinct.authorization ?? [];
    const match =
      values.length === 1 ? /^bearer ([\x21-\x7e]{1,512})$/i.exec(values[0] ?? '') : null;
    const token = match?.[1];
    if (token === undefined) {
      next(new AuthenticationError(values.length === 0 ? 'missing_credentials' : 'invalid_token'));
      return;
    }
    if (timingSafeEqual(sha256(token), expected)) {
      next();
      return;
    }
    const refusal = new AuthenticationError('invalid_token');
    failures.record(req, refusal);
    next(refusal);
  };
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

const noStore: RequestHandler = function noStoreMiddleware(_req, res, next) {
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  next();
};

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
}

/**
 * Accounts and their keys as contract 13 shows them, never a secret or its digest, plus
 * `revoked`. A keys file records neither when a key was created or revoked nor when it was last
 * used: those are `null` there; `revoked` and `expires_at` say what the file says.
 */
function accountViews(records: readonly KeyRecord[]): AccountView[] {
  const accounts = new Map<string, AccountView>();
  for (const record of records) {
    let account = accounts.get(record.accountId);
    if (account === undefined) {
      account = {
        id: record.accountId,
        ip_whitelist: record.ipWhitelist === undefined ? null : [...record.ipWhitelist.entries()],
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
    });
  }
  return [...accounts.values()];
}
