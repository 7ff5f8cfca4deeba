import cors from 'cors';
import type { ErrorRequestHandler, Request, RequestHandler, Response } from 'express';
import {
  type CompiledPolicy,
  buildGate,
  type Decision,
  type Gate,
  type GateOptions,
  type RoutePolicy,
  type Scopes,
  GATE_OPTION_CHECKS,
  protectCall,
  routePolicyChecks,
  scopeNameCheck,
} from '../core/gate';
import type { ScopeUsage } from '../core/limits';
import type { AccountLimits } from '../model/key-record';
import { DEFAULT_PUBLIC_KEY_HEADER } from '../core/credentials';
import { errorHandler } from './error-handler';
import { ConfigurationError } from '../errors';
import {
  check,
  checkOptions,
  isObject,
  isString,
  isStringList,
  listOf,
  LOGGER,
  type OptionChecks,
  required,
} from '../options';
import { warnMisconfiguration } from './warnings';
import { jsonBody, type JsonBodyOptions } from './json-body';
import { assignClientIp, clientIp, requestId } from './request-context';
import { refuseMalformedRequests } from './request-shape';
import { series } from './series';
import { issueToken } from './token-exchange';
import { forwardAuthDoor, type ForwardAuthOptions } from './forward-auth';
import { CREDENTIAL_KINDS, type CredentialKind, type Logger } from '../types';
import type { RateLimitState } from '../rate-limit/redis-health';
import { createPathRedactor } from '../core/credential-scan';
import { nameRequestSpan } from '../core/tracing';
import { routeTemplateOf, traceRequest } from './request-span';
import { recordAnswer, replayAnswer } from './idempotency';
import { IDEMPOTENCY_HEADER, REPLAYED_HEADER } from '../idempotency/key';
import { MisconfigurationError } from '../errors';

/**
 * The Express door (Express 4.21+ and 5): `tollgate(options)` builds the decision core once and
 * hands out middlewares that only turn facts into a decision and a decision into a response.
 *
 *     const gate = tollgate({ keyStore, tokens, scopes: { orders: { limit: 100 } } });
 *     app.use(gate.context());
 *     app.get('/orders', gate.protect({ accept: ['secret', 'token'], role: 'level-2', limit: 'orders' }), listOrders);
 *     app.use(gate.errorHandler());
 *
 * Every middleware settles its own work into `next(err)` or an answer and returns nothing, so a
 * refusal never becomes an unhandled rejection on Express 4.
 */

export interface TollgateOptions<S extends Scopes = Scopes> extends GateOptions<S> {
  /** Receives misconfiguration warnings and one line per 5xx. Defaults to none. */
  readonly logger?: Logger | undefined;
  /**
   * Request paths (`req.path`, exactly) that get no span while tracing is on: operators' probes
   * such as `/healthz` and `/readyz`, which would otherwise be a root trace each. Defaults to none.
   */
  readonly untracedPaths?: readonly string[] | undefined;
}

export interface ProtectOptions<Name extends string = string> extends Omit<
  RoutePolicy<Name>,
  'accept'
> {
  readonly accept: readonly CredentialKind[];
  /**
   * The JSON body: `true` reads (and checks) every request's body, as the gateway does before
   * proxying it; by default a body is read only when the route takes a publishable key, which may
   * travel in it; `false` leaves it to the app (mount your own parser first). An object sets the
   * size limit (`{ limit: '64kb' }`, the default). A route with `idempotency` reads it unless
   * another parser kept the bytes as `req.rawBody`; `false` is refused there.
   */
  readonly body?: boolean | JsonBodyOptions | undefined;
}

export interface TokenExchangeOptions<Name extends string = string> {
  /** The scope every exchange counts against (per account). */
  readonly limit: Name;
  readonly id?: string | undefined;
}

export interface BrowserCorsOptions {
  /** Methods of the route. Defaults to GET and POST. */
  readonly methods?: readonly string[];
}

export interface Tollgate<Name extends string = string> {
  /**
   * Protects a route with one call: credentials, whitelist, role, permission and limits, in that
   * order.
   */
  protect(options: ProtectOptions<Name>): RequestHandler;
  /** `POST` a key pair, get a token: the whole route, answer included. */
  tokenExchange(options: TokenExchangeOptions<Name>): RequestHandler;
  /**
   * The forward-auth endpoints of reverse proxies, for `app.use('/authz', …)`:
   * `/forward-auth` (Traefik, Caddy), `/auth-request` (nginx), `/ext-authz/*` (Envoy).
   */
  forwardAuth(options: ForwardAuthOptions<Name>): RequestHandler;
  /** Request id, framing checks and the client IP; mount before every route. */
  context(): RequestHandler;
  /** CORS for routes that browsers call with a publishable key (no credentials mode). */
  cors(options?: BrowserCorsOptions): RequestHandler;
  /** Renders every error as its JSON body (`status`, `code`, `message`, …); mount last. */
  errorHandler(): ErrorRequestHandler;
  rateLimitState(): RateLimitState;
  /**
   * An account's use of each per-account scope in the current window, at its own limits, read from
   * the counters that decide without spending any: for an operator's page.
   */
  usage(accountId: string, limits?: AccountLimits): Promise<ScopeUsage[]>;
  /** Stops timers; the Redis connection is the caller's to close. */
  close(): void;
  /** The decision core, for other doors (forward-auth) and tests. */
  readonly gate: Gate<Name>;
}

const TOLLGATE_OPTION_CHECKS: OptionChecks<TollgateOptions> = {
  ...GATE_OPTION_CHECKS,
  logger: LOGGER,
  untracedPaths: check(
    'a list of paths, each starting with /',
    (value) =>
      Array.isArray(value) &&
      value.every((path) => typeof path === 'string' && path.startsWith('/')),
  ),
};

const BODY_CHECK = check(
  'true, false or { limit }',
  (value) => typeof value === 'boolean' || isObject.test(value),
);

const CORS_OPTION_CHECKS: OptionChecks<BrowserCorsOptions> = { methods: isStringList };

/**
 * A body read by another parser, whose bytes were not kept: a request carrying an
 * `Idempotency-Key` could not be fingerprinted.
 */
function bodyBytesUnknown(req: Request): boolean {
  return (
    req.headers[IDEMPOTENCY_HEADER] !== undefined &&
    (req as { _body?: boolean })._body === true &&
    req.rawBody === undefined
  );
}

export function tollgate<S extends Scopes>(
  options: TollgateOptions<S>,
): Tollgate<keyof S & string> {
  checkOptions('tollgate()', options, TOLLGATE_OPTION_CHECKS);
  const { logger, untracedPaths: untraced, ...gateOptions } = options;
  const gate = buildGate(gateOptions, 'tollgate()');
  const scopeNames = Object.keys(options.scopes);
  const protectChecks: OptionChecks<ProtectOptions> = {
    ...routePolicyChecks(scopeNames),
    accept: required(listOf(CREDENTIAL_KINDS)),
    body: BODY_CHECK,
  };
  const tokenExchangeChecks: OptionChecks<TokenExchangeOptions> = {
    limit: required(scopeNameCheck(scopeNames)),
    id: isString,
  };
  const publicKeyHeader = options.publicKeyHeader ?? DEFAULT_PUBLIC_KEY_HEADER;
  let warnedTrustProxy = false;
  // A span's `url.path` is a path as the access log writes it: a key sent in a path is redacted.
  const loggablePath = createPathRedactor({ keyStore: options.keyStore });
  const untracedPaths = new Set(untraced);

  const render = (
    decision: Decision,
    req: Request,
    res: Response,
    next: (error?: unknown) => void,
  ): void => {
    for (const [name, value] of decision.headers) res.append(name, value);
    if (decision.allowed) {
      req.auth = decision.auth;
      const step = decision.idempotency;
      if (step?.kind === 'replay') {
        replayAnswer(res, step.answer, next);
        return;
      }
      if (step?.kind === 'claimed') recordAnswer(res, step.claim);
      next();
    } else {
      next(decision.error);
    }
  };

  const guarded = (
    compiled: CompiledPolicy,
    readBody: RequestHandler | undefined,
  ): RequestHandler =>
    function protectMiddleware(req, res, next) {
      const requestSpan = traceRequest(req, res, loggablePath, untracedPaths);
      if (requestSpan !== undefined) {
        const route = routeTemplateOf(req);
        if (route !== undefined) nameRequestSpan(requestSpan, req.method, route);
      }
      // `context()` not mounted: derive the client address here rather than share one budget.
      const noAddress = req.clientIp === undefined ? assignClientIp(req) : undefined;
      if (noAddress !== undefined) {
        next(noAddress);
        return;
      }
      // A spent failure budget is refused before the body is read, so a client holding its body
      // back cannot get a guess compared once the budget is gone.
      const early = gate.refuseEarly(req, compiled);
      if (early !== undefined) {
        render(early, req, res, next);
        return;
      }
      const decide = (): void => {
        gate.decide(req, compiled).then(
          (decision) => {
            render(decision, req, res, next);
          },
          (error: unknown) => {
            next(error);
          },
        );
      };
      if (readBody === undefined || (req as { _body?: boolean })._body === true) {
        if (compiled.idempotency !== undefined && bodyBytesUnknown(req)) {
          next(
            new MisconfigurationError(
              'idempotency_without_raw_body',
              'protect({ idempotency }) needs the body as received: let protect() read it, or keep its bytes as req.rawBody',
            ),
          );
          return;
        }
        decide();
        return;
      }
      readBody(req, res, (error?: unknown) => {
        if (error === undefined) decide();
        else next(error);
      });
    };

  const protect = (spec: ProtectOptions<keyof S & string>): RequestHandler => {
    checkOptions(protectCall(spec), spec, protectChecks);
    const { body, ...policy } = spec;
    const compiled = gate.policy(policy);
    if (compiled.idempotency !== undefined && body === false) {
      throw new ConfigurationError(
        `${protectCall(spec)} body: false leaves no body bytes to fingerprint an Idempotency-Key's request with`,
      );
    }
    const wantsBody =
      body === true ||
      typeof body === 'object' ||
      (body === undefined && (compiled.readsBody || compiled.idempotency !== undefined));
    return guarded(
      compiled,
      wantsBody ? jsonBody(typeof body === 'object' ? body : {}) : undefined,
    );
  };

  const tokenExchange = (spec: TokenExchangeOptions<keyof S & string>): RequestHandler => {
    checkOptions('tokenExchange()', spec, tokenExchangeChecks);
    if (options.tokens === undefined) {
      throw new ConfigurationError('tokenExchange(): tollgate() needs the tokens option');
    }
    const compiled = gate.policy({ accept: 'key-pair', limit: spec.limit, id: spec.id });
    const check = guarded(compiled, jsonBody());
    const answer = issueToken({ tokens: options.tokens });
    return function tokenExchangeMiddleware(req, res, next) {
      check(req, res, (error?: unknown) => {
        if (error === undefined) answer(req, res, next);
        else next(error);
      });
    };
  };

  const forwardAuth = (spec: ForwardAuthOptions<keyof S & string>): RequestHandler => {
    return forwardAuthDoor(spec, {
      gate,
      credentialHeaders: ['authorization', publicKeyHeader.toLowerCase()],
      logger,
      loggablePath,
    });
  };

  const context = (): RequestHandler => {
    const steps = series([requestId(), refuseMalformedRequests(), clientIp()]);
    return function tollgateContext(req, res, next) {
      if (!warnedTrustProxy && req.app.get('trust proxy') === true) {
        warnedTrustProxy = true;
        warnMisconfiguration(
          logger,
          'trust_proxy',
          { setting: 'trust proxy' },
          "app.set('trust proxy', true) lets any client choose its IP: trust your proxies' addresses instead",
        );
      }
      traceRequest(req, res, loggablePath, untracedPaths);
      steps(req, res, next);
    };
  };

  const browserCors = (corsOptions: BrowserCorsOptions = {}): RequestHandler => {
    checkOptions('cors()', corsOptions, CORS_OPTION_CHECKS);
    return cors({
      origin: '*',
      methods: [...(corsOptions.methods ?? ['GET', 'POST'])],
      allowedHeaders: ['Content-Type', publicKeyHeader, IDEMPOTENCY_HEADER],
      exposedHeaders: [
        'RateLimit',
        'RateLimit-Policy',
        'Retry-After',
        'X-Request-Id',
        REPLAYED_HEADER,
      ],
      maxAge: 600,
    });
  };

  return {
    protect,
    tokenExchange,
    forwardAuth,
    context,
    cors: browserCors,
    errorHandler: () => errorHandler({ logger }),
    rateLimitState: () => gate.rateLimitState(),
    usage: (accountId, limits) => gate.usage(accountId, limits),
    close: () => {
      gate.close();
    },
    gate,
  };
}
