import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { InvalidRequestError, nameRequestSpan } from '../lib/internal';
import {
  type ParameterMatcher,
  type RouteLookup,
  RouteTable,
  type RouteTableEntry,
} from '../lib/entry/core';
import { methodNotAllowed } from '../lib/entry/express';

/**
 * The gateway's routes in one Express layer instead of a router walk.
 *
 * Express's router makes, for each layer a request enters, a match object, a params object and a
 * closure, and every router a request passes through sets up its own `next` and restores
 * `req.url`, `req.baseUrl` and `req.params` on the way out. Under load those objects were a
 * noticeable share of what the gateway allocated per proxied request (figures in BENCHMARKS.md),
 * and every byte is one the collector pauses the gateway to reclaim.
 * Here a request costs a table lookup and a closure.
 */

/**
 * A parameter as Express's router takes it: percent-decoded, then matched against `pattern`; a
 * malformed escape is a 400 (as Express answers it) on a path that is otherwise a route's.
 */
export function decodedParameter(pattern: RegExp): ParameterMatcher {
  return (segment) => {
    if (!segment.includes('%')) return pattern.test(segment);
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      throw new InvalidRequestError('The request could not be understood');
    }
    return pattern.test(decoded);
  };
}

/** A route's handler, and the route as `req.route` shows it. */
interface RoutedHandler {
  readonly handler: RequestHandler;
  readonly route: { readonly path: string };
}

/**
 * Routes matched as Express's router matched them in the gateway (case-sensitive, an optional
 * trailing slash, parameters percent-decoded before `parameter` is tested). A path with no route
 * goes on to `next()` (the gateway's 404); a path whose route takes other methods gets 405 with
 * `Allow`. `HEAD` runs a `GET` route. A routed request's span is named by its route, whatever
 * answers it; `unrouted` runs first for a request no entry takes, before its 404 or 405.
 */
export function routeDispatch(
  entries: readonly RouteTableEntry<RequestHandler>[],
  parameter: RegExp,
  unrouted?: RequestHandler,
): RequestHandler {
  // Each entry with its route as Express's router sets `req.route`, made once: `protect()` and the
  // proxy read the template from it (the request's span name, `http.route`).
  const table = new RouteTable(
    entries.map((entry) => ({
      method: entry.method,
      path: entry.path,
      value: { handler: entry.value, route: { path: entry.path } },
    })),
    decodedParameter(parameter),
  );
  // One 405 handler per set of methods (as many as the table has paths at most).
  const refusals = new Map<string, RequestHandler>();
  const refusalFor = (allowed: readonly string[]): RequestHandler => {
    const key = allowed.join(' ');
    let refusal = refusals.get(key);
    if (refusal === undefined) {
      // `OPTIONS` answers browsers' preflights on some paths; `Allow` names the route's methods.
      refusal = methodNotAllowed(allowed.filter((method) => method !== 'OPTIONS'));
      refusals.set(key, refusal);
    }
    return refusal;
  };
  return function routeDispatchHandler(req: Request, res: Response, next: NextFunction): void {
    let found: RouteLookup<RoutedHandler>;
    try {
      found = table.match(req.method, req.path);
    } catch (refused) {
      next(refused);
      return;
    }
    if (found.kind === 'found') {
      const { route } = found.value;
      req.route = route;
      if (req.tollgateSpan !== undefined) nameRequestSpan(req.tollgateSpan, req.method, route.path);
      found.value.handler(req, res, next);
      return;
    }
    const refuse = found.kind === 'method_not_allowed' ? refusalFor(found.allowed) : passOn;
    if (unrouted === undefined) refuse(req, res, next);
    else
      unrouted(req, res, (error?: unknown) => {
        if (error === undefined) refuse(req, res, next);
        else next(error);
      });
  };
}

const passOn: RequestHandler = (_req, _res, next) => {
  next();
};

/** The methods each path of `routes` takes, in the routes' order: for `Allow` and for CORS. */
export function methodsByPath(
  routes: Iterable<{ readonly method: string; readonly path: string }>,
): Map<string, string[]> {
  const byPath = new Map<string, string[]>();
  for (const route of routes) {
    byPath.set(route.path, [...(byPath.get(route.path) ?? []), route.method]);
  }
  return byPath;
}
