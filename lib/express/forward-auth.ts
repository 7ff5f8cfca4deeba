import type { Request, RequestHandler, Response } from 'express';
import type { CompiledPolicy, Gate, RoutePolicy } from '../core/gate';
import { type RouteLookup, RouteTable } from '../core/route-table';
import {
  ConfigurationError,
  IdempotencyKeyInUseError,
  InternalError,
  InvalidRequestError,
  MethodNotAllowedError,
  NotFoundError,
  TollgateError,
} from '../errors';
import {
  allowAnswer,
  type AuthzAnswer,
  type ForwardAuthDialect,
  originalRequest,
  refusalAnswer,
} from '../forward-auth/dialects';
import type { HeaderPair } from '../core/limits';
import type { RequestFacts } from '../core/facts';
import type { Logger } from '../types';
import { assignClientIp } from './request-context';
import { describeOriginalRequest, recordRefusal, traceContextHeaders } from '../core/tracing';
import { traceRequest } from './request-span';
import { warnMisconfiguration } from './warnings';
import {
  check,
  checkOptions,
  isNonEmptyString,
  isObject,
  isRegExp,
  type OptionChecks,
  required,
} from '../options';

/**
 * The forward-auth door: reverse proxies that forward requests themselves (nginx
 * `auth_request`, Traefik ForwardAuth, Caddy `forward_auth`, Envoy `ext_authz`) ask it whether a
 * request may pass. The same gate decides as for `protect()`, on the original method and target
 * the proxy describes, so a request asked about here counts once against its limits, exactly as
 * if it had come through the gateway's own proxy. Mount it at `/authz`:
 *
 *     app.use(gate.context());
 *     app.use('/authz', gate.forwardAuth({ routes }));
 *
 * It answers `/forward-auth`, `/auth-request` and `/ext-authz/<original path>` under its mount
 * path, and only to peers the app's `trust proxy` names by address: anyone else gets `404`, as if
 * it did not exist. With a hop count (or `true`) every peer would count as a proxy, so the door
 * stays closed and says so once in the log.
 */

/** A route the proxy may ask about: a method, a path (`:id` parameters) and its policy. */
export interface ForwardAuthRoute<Name extends string = string> extends RoutePolicy<Name> {
  readonly method: string;
  readonly path: string;
}

export interface ForwardAuthOptions<Name extends string = string> {
  readonly routes: readonly ForwardAuthRoute<Name>[];
  /** What a `:name` path parameter matches, whole. Defaults to 1 to 64 of `A-Za-z0-9_-`. */
  readonly parameterPattern?: RegExp | undefined;
}

const FORWARD_AUTH_OPTION_CHECKS: OptionChecks<ForwardAuthOptions> = {
  routes: required(
    check(
      'a list of routes { method, path, accept, limit, … }',
      (value) => Array.isArray(value) && value.every((route) => isObject.test(route)),
    ),
  ),
  parameterPattern: isRegExp,
};

const ROUTE_PLACE_CHECKS = {
  method: required(isNonEmptyString),
  path: required(
    check('a path starting with /', (value) => typeof value === 'string' && value.startsWith('/')),
  ),
};

export interface ForwardAuthContext {
  readonly gate: Gate;
  /** Header names that carry credentials: Envoy is asked to remove them upstream. */
  readonly credentialHeaders: readonly string[];
  readonly logger?: Logger | undefined;
  /** The path as a span may record it (credentials redacted). Defaults to the path as it is. */
  readonly loggablePath?: ((path: string) => string) | undefined;
}

type Route =
  | { readonly kind: 'policy'; readonly policy: CompiledPolicy; readonly path: string }
  | { readonly kind: 'token-exchange' };

const EXT_AUTHZ = '/ext-authz';

/** Express's compiled `trust proxy` (proxy-addr): is the hop at `index` a trusted proxy? */
type TrustFunction = (address: string, index: number) => boolean;

export function forwardAuthDoor(
  options: ForwardAuthOptions,
  context: ForwardAuthContext,
): RequestHandler {
  checkOptions('forwardAuth()', options, FORWARD_AUTH_OPTION_CHECKS);
  const { gate, logger } = context;
  const loggablePath = context.loggablePath ?? ((path: string): string => path);
  const table = new RouteTable<Route>(
    options.routes.map((route, index) => {
      const { method, path, ...policy } = route;
      for (const [name, rule] of Object.entries(ROUTE_PLACE_CHECKS)) {
        const value: unknown = name === 'method' ? method : path;
        if (!rule.test(value)) {
          throw new ConfigurationError(
            `forwardAuth(): routes[${index}].${name} ${value === undefined ? 'is required' : 'must be'} (${rule.accepts})`,
          );
        }
      }
      // Compiled whatever it accepts, so every route's options are checked.
      const compiled = gate.policy({ id: path, ...policy });
      return {
        method,
        path,
        // The token exchange reads its body, which proxies do not forward: it is routed to the
        // gateway as an ordinary route, and a proxy asking about it is told so.
        value:
          policy.accept === 'key-pair'
            ? { kind: 'token-exchange' }
            : { kind: 'policy', policy: compiled, path },
      };
    }),
    options.parameterPattern,
  );
  let warnedClosed = false;

  const trusted = (req: Request): boolean => {
    const setting: unknown = req.app.get('trust proxy');
    if (setting === true || typeof setting === 'number') {
      if (!warnedClosed) {
        warnedClosed = true;
        warnMisconfiguration(
          logger,
          'forward_auth_trust_proxy',
          { setting: 'trust proxy' },
          'forward-auth answers 404: trust proxy is a hop count or true, which trusts any peer; name your proxies by address',
        );
      }
      return false;
    }
    const trust = req.app.get('trust proxy fn') as TrustFunction | undefined;
    const peer = req.socket.remoteAddress;
    return typeof trust === 'function' && peer !== undefined && trust(peer, 0);
  };

  return function forwardAuthMiddleware(req, res, next) {
    const dialect = dialectOf(req.path);
    if (dialect === undefined) {
      next();
      return;
    }
    if (!trusted(req)) {
      next(gate.queryRefusal(req) ?? new NotFoundError());
      return;
    }
    const requestSpan = traceRequest(req, res, loggablePath);
    const refuse = (error: TollgateError, headers: readonly HeaderPair[] = []): void => {
      if (requestSpan !== undefined) recordRefusal(requestSpan, error);
      send(res, refusalAnswer(dialect, error, headers, req.requestId));
    };
    const noAddress = req.clientIp === undefined ? assignClientIp(req) : undefined;
    if (noAddress !== undefined) {
      refuse(noAddress);
      return;
    }
    const original = originalRequest(dialect, {
      method: req.method,
      target: req.url.slice(EXT_AUTHZ.length),
      headersDistinct: req.headersDistinct,
    });
    if (original instanceof TollgateError) {
      refuse(original);
      return;
    }
    const lookup = table.match(original.method, original.path);
    if (requestSpan !== undefined) {
      describeOriginalRequest(
        requestSpan,
        original,
        lookup.kind === 'found' && lookup.value.kind === 'policy' ? lookup.value.path : undefined,
        dialect,
        loggablePath,
      );
    }
    const facts: RequestFacts = {
      method: original.method,
      path: original.path,
      originalUrl: original.target,
      headersDistinct: req.headersDistinct,
      clientIp: req.clientIp,
      requestId: req.requestId,
      tollgateSpan: requestSpan,
    };
    if (lookup.kind !== 'found' || lookup.value.kind !== 'policy') {
      // No policy covers the request; a credential in its query string is still refused first.
      refuse(gate.queryRefusal(facts) ?? unrouted(lookup));
      return;
    }
    const route = lookup.value;
    const early = gate.refuseEarly(facts, route.policy);
    if (early !== undefined && !early.allowed) {
      refuse(early.error, early.headers);
      return;
    }
    gate.decide(facts, route.policy).then(
      (decision) => {
        if (decision.allowed && decision.idempotency?.kind === 'replay') {
          // The proxy forwards, so an answer cannot be replayed here: the request was answered.
          refuse(answeredElsewhere(), decision.headers);
        } else if (decision.allowed) {
          req.auth = decision.auth;
          const answer = allowAnswer(dialect, decision.auth, decision.headers, {
            credentialHeaders: context.credentialHeaders,
          });
          // The proxy forwards the request upstream as a child of this span: it passes these on.
          send(
            res,
            requestSpan === undefined
              ? answer
              : { ...answer, headers: [...answer.headers, ...traceContextHeaders(requestSpan)] },
          );
        } else {
          refuse(decision.error, decision.headers);
        }
      },
      (error: unknown) => {
        logger?.error(
          { request_id: req.requestId, error: error instanceof Error ? error.name : typeof error },
          'unexpected error',
        );
        refuse(new InternalError());
      },
    );
  };
}

/** The refusal of a request no policy covers: no route, another method, or the token exchange. */
function unrouted(lookup: RouteLookup<Route>): TollgateError {
  if (lookup.kind === 'not_found') return new NotFoundError();
  if (lookup.kind === 'method_not_allowed') return new MethodNotAllowedError(lookup.allowed);
  return new InvalidRequestError(
    'The token exchange reads its body: route it to the gateway itself, not through forward authentication',
  );
}

function answeredElsewhere(): IdempotencyKeyInUseError {
  return new IdempotencyKeyInUseError(
    'The request with this Idempotency-Key was answered already; its answer is replayed only by the gateway itself',
  );
}

function dialectOf(path: string): ForwardAuthDialect | undefined {
  if (path === '/forward-auth') return 'forward-auth';
  if (path === '/auth-request') return 'auth-request';
  if (path === EXT_AUTHZ || path.startsWith(`${EXT_AUTHZ}/`)) return 'ext-authz';
  return undefined;
}

function send(res: Response, answer: AuthzAnswer): void {
  if (res.headersSent || res.destroyed) return;
  for (const [name, value] of answer.headers) res.append(name, value);
  res.status(answer.status).end(answer.body);
}
