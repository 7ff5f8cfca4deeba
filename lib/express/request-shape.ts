import type { IncomingMessage } from 'node:http';
import type { RequestHandler } from 'express';
import { HeadersTooLargeError, InvalidRequestError } from '../errors';

/**
 * Refuses requests whose framing could make the gateway and the upstream see different things,
 * before anything else reads them:
 *
 * - more header lines than Node's parser keeps (`431 headers_too_large`): Node silently drops
 *   the lines past its limit, where a second `Authorization` could hide;
 * - a target holding `#` (`400 invalid_request`): a fragment is never sent by a client, and the
 *   router and an upstream would read the path around it differently;
 * - an HTTP/1.1 request without `Host` (`400 invalid_request`, with the JSON body): create the
 *   server with `requireHostHeader: false` so such a request reaches this check instead of
 *   Node's bare 400.
 */
export function refuseMalformedRequests(): RequestHandler {
  return function refuseMalformedRequestsMiddleware(req, _res, next) {
    if (headersTruncated(req)) {
      next(new HeadersTooLargeError());
    } else if (req.url.includes('#')) {
      next(new InvalidRequestError('The request target must not hold a fragment (#)'));
    } else if (req.httpVersion === '1.1' && req.headers.host === undefined) {
      next(new InvalidRequestError('HTTP/1.1 requests must carry a Host header'));
    } else {
      next();
    }
  };
}

/** Node's default number of raw header entries (names and values: 1,000 header lines). */
const NODE_DEFAULT_HEADER_ENTRIES = 2000;

/**
 * True when Node's parser dropped header lines: it keeps the first `maxHeadersCount` pairs
 * (`rawHeaders` entries up to twice that; 2,000 entries by default) and stops collecting once past.
 */
export function headersTruncated(req: IncomingMessage): boolean {
  const server = (req.socket as { server?: { maxHeadersCount?: unknown } } | null)?.server;
  const configured = server?.maxHeadersCount;
  const limit = typeof configured === 'number' ? configured * 2 : NODE_DEFAULT_HEADER_ENTRIES;
  return limit > 0 && req.rawHeaders.length > limit;
}
