import type { RequestHandler } from 'express';
import type { Logger } from '../../lib';
import { nameRequestSpan } from '../../lib/internal';
import { routeTemplateOf, traceIds } from '../../lib/internal';

/**
 * One audit line per admin request, when it is answered: never the token or a body. While the
 * request's span is recorded (tracing on, sampled), the line carries its `trace_id` and `span_id`,
 * and the span is named by the admin route.
 */
export function audit(action: string, logger: Logger): RequestHandler {
  return function auditMiddleware(req, res, next) {
    // Read now: Express restores `req.params` once the route is left.
    const target = typeof req.params.id === 'string' ? req.params.id : null;
    const requestSpan = req.tollgateSpan;
    const route = routeTemplateOf(req);
    if (requestSpan !== undefined && route !== undefined) {
      nameRequestSpan(requestSpan, req.method, route);
      requestSpan.span.setAttribute('tollgate.admin.action', action);
    }
    res.once('finish', () => {
      logger.info({
        event: 'admin.audit',
        action,
        target,
        outcome: res.statusCode < 400 ? 'done' : 'refused',
        status: res.statusCode,
        client_ip: req.clientIp,
        request_id: req.requestId,
        ...traceIds(requestSpan),
      });
    });
    next();
  };
}
