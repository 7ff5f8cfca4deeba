import { randomUUID } from 'node:crypto';
import type { Request, RequestHandler } from 'express';
import { InvalidRequestError } from '../errors';
import { canonicalClientIp } from '../model/ip-address';

/**
 * Gives every request an id (`req.requestId`, echoed as `X-Request-Id`). A client's own
 * `X-Request-Id` is never trusted: it would let a caller forge or inject log lines. A request
 * given its id by an earlier `requestId()` keeps it, so an app may log from before `context()`.
 */
export function requestId(): RequestHandler {
  return function requestIdMiddleware(req, res, next) {
    if (req.requestId !== undefined) {
      next();
      return;
    }
    const id = randomUUID();
    req.requestId = id;
    res.setHeader('X-Request-Id', id);
    next();
  };
}

/**
 * Sets `req.clientIp` to the canonical client address (IPv4-mapped IPv6 as IPv4). The address is
 * Express's `req.ip`, so it honours the app's `trust proxy` setting and nothing else: `X-Real-IP`
 * and `Forwarded` are never read. When a trusted proxy forwards something that is not an IP
 * address, the request is refused (400) rather than keyed on attacker-chosen text.
 */
export function clientIp(): RequestHandler {
  return function clientIpMiddleware(req, _res, next) {
    next(assignClientIp(req));
  };
}

/**
 * Sets `req.clientIp` as `clientIp()` does; returns the refusal when there is no address.
 *
 * Express computes `req.ip` afresh (proxy-addr over `X-Forwarded-For` and the trust function) on
 * every read: it is read once here and kept on the request as the same value, so later readers
 * (express-rate-limit, the app's own code) do not compute it again.
 */
export function assignClientIp(req: Request): InvalidRequestError | undefined {
  const address = req.ip;
  Object.defineProperty(req, 'ip', {
    configurable: true,
    enumerable: true,
    writable: true,
    value: address,
  });
  const ip = canonicalClientIp(address);
  if (ip === undefined)
    return new InvalidRequestError('The client address could not be determined');
  req.clientIp = ip;
  return undefined;
}
