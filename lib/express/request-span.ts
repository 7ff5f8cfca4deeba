import type { Request, Response } from 'express';
import { endRequestSpan, kitTracer, type RequestSpan, startRequestSpan } from '../core/tracing';

/**
 * The request's span for the Express doors: started (or adopted from an instrumentation of the
 * server) by the first of `context()`, `protect()` and `forwardAuth()` the request meets, kept on
 * `req.tollgateSpan`, and ended once when the response closes, whether it was written or the
 * client hung up. `undefined`, at the cost of a lookup, while tracing is off, and for a path of
 * `untracedPaths` (operators' probes).
 */
export function traceRequest(
  req: Request,
  res: Response,
  loggablePath: (path: string) => string,
  untracedPaths?: ReadonlySet<string>,
): RequestSpan | undefined {
  const existing = req.tollgateSpan;
  if (existing !== undefined) return existing;
  // Tracing off: nothing is built for the request, not even the description of it.
  if (kitTracer() === undefined) return undefined;
  if (untracedPaths?.has(req.path) === true) return undefined;
  const requestSpan = startRequestSpan(
    {
      method: req.method,
      target: req.originalUrl,
      headers: req.headers,
      httpVersion: req.httpVersion,
    },
    loggablePath,
  );
  if (requestSpan === undefined) return undefined;
  req.tollgateSpan = requestSpan;
  res.once('close', () => {
    endRequestSpan(requestSpan, {
      status: res.headersSent ? res.statusCode : undefined,
      clientAddress: req.clientIp,
      aborted: !res.writableFinished,
    });
  });
  return requestSpan;
}

/**
 * The route template Express's router matched (`req.baseUrl` + `req.route.path`), or `undefined`
 * when the request was not routed by a path (`app.use()`, a regular expression).
 */
export function routeTemplateOf(req: Request): string | undefined {
  const route = req.route as { path?: unknown } | undefined;
  return typeof route?.path === 'string' ? req.baseUrl + route.path : undefined;
}
