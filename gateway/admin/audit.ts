import type { RequestHandler } from 'express';
import type { Logger } from '../../lib';

/** One audit line per admin request, when it is answered: never the token or a body. */
export function audit(action: string, logger: Logger): RequestHandler {
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
