import type { ErrorRequestHandler, RequestHandler } from 'express';
import {
  GatewayError,
  InternalError,
  InvalidRequestError,
  MethodNotAllowedError,
  NotFoundError,
  PayloadTooLargeError,
  UnsupportedMediaTypeError,
} from './errors';
import type { Logger } from './types';

/**
 * The one place errors become responses:
 * `{"status", "code", "message", "request_id"}` as `application/json`, with the error's headers.
 * Errors from Express's body parsers are mapped to their 4xx; anything unknown is a 500 whose
 * message is never shown. Nothing of the request (headers, body) is logged, and no stack either.
 */

export interface ErrorHandlerOptions {
  /** Receives one line per 5xx (error class and code only). Defaults to none. */
  logger?: Logger;
}

export function errorHandler(options: ErrorHandlerOptions = {}): ErrorRequestHandler {
  const { logger } = options;
  return function errorHandlerMiddleware(error: unknown, req, res, _next) {
    const gatewayError = toGatewayError(error);
    if (gatewayError.status >= 500 && !(error instanceof GatewayError)) {
      logger?.error({ request_id: req.requestId, error: describeError(error) }, 'unexpected error');
    }
    if (res.headersSent) {
      // Part of an answer has gone out (a proxied response broke off): all we can do is cut it.
      res.destroy();
      return;
    }
    for (const [name, value] of Object.entries(gatewayError.headers)) res.setHeader(name, value);
    res.setHeader('Cache-Control', 'no-store');
    res.status(gatewayError.status).json({
      status: gatewayError.status,
      code: gatewayError.code,
      message: gatewayError.message,
      request_id: req.requestId ?? null,
    });
  };
}

/** The `GatewayError` for any thrown value; errors of unknown kinds become `InternalError`. */
export function toGatewayError(error: unknown): GatewayError {
  if (error instanceof GatewayError) return error;
  const type = typeof error === 'object' && error !== null ? (error as { type?: unknown }).type : undefined;
  switch (type) {
    case 'entity.too.large':
      return new PayloadTooLargeError();
    case 'encoding.unsupported':
      return new UnsupportedMediaTypeError('Compressed request bodies are not accepted');
    case 'charset.unsupported':
      return new UnsupportedMediaTypeError('The body must be UTF-8');
    case 'request.aborted':
    case 'request.size.invalid':
    case 'stream.encoding.set':
    case 'entity.parse.failed':
      return new InvalidRequestError('The request body could not be read');
    default:
      return fromHttpError(error);
  }
}

/** Errors from Express itself (e.g. a malformed percent-encoding in a path) carry a 4xx `status`. */
function fromHttpError(error: unknown): GatewayError {
  const status = typeof error === 'object' && error !== null ? (error as { status?: unknown }).status : undefined;
  if (typeof status !== 'number' || status < 400 || status > 499) return new InternalError();
  if (status === 413) return new PayloadTooLargeError();
  if (status === 415) return new UnsupportedMediaTypeError();
  return new InvalidRequestError('The request could not be understood');
}

function describeError(error: unknown): { name: string; code?: string } {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === 'string' ? { name: error.name, code } : { name: error.name };
  }
  return { name: typeof error };
}

/** Answers 404 `not_found`; mount last, before the error handler. */
export function notFound(): RequestHandler {
  return function notFoundHandler(_req, _res, next) {
    next(new NotFoundError());
  };
}

/** Answers 405 `method_not_allowed` with `Allow`; mount with `router.all(path, …)` after the routes. */
export function methodNotAllowed(allowed: readonly string[]): RequestHandler {
  const methods = allowed.includes('GET') && !allowed.includes('HEAD') ? [...allowed, 'HEAD'] : [...allowed];
  return function methodNotAllowedHandler(_req, _res, next) {
    next(new MethodNotAllowedError(methods));
  };
}
