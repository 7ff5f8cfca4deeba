import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ErrorRequestHandler, RequestHandler } from 'express';
import {
  type ErrorCode,
  errorBody,
  TollgateError,
  HeadersTooLargeError,
  InternalError,
  InvalidRequestError,
  MethodNotAllowedError,
  MisconfigurationError,
  NotFoundError,
  PayloadTooLargeError,
  UnsupportedMediaTypeError,
} from '../errors';
import type { Logger } from '../types';
import { checkOptions, LOGGER, type OptionChecks } from '../options';
import { ToldOnce, warnMisconfiguration } from './warnings';
import { answerEnding, noteErrorAnswer } from './idempotency';
import { recordRefusal } from '../core/tracing';

/**
 * The one place errors become responses:
 * `{"status", "code", "message", "request_id"}` as `application/json`, with the error's headers.
 * Errors from Express's body parsers are mapped to their 4xx; anything unknown is a 500 whose
 * message is never shown. Nothing of the request (headers, body) is logged, and no stack either.
 */

export interface ErrorHandlerOptions {
  /**
   * Receives one line per 5xx (error class and code only). Defaults to none: each distinct
   * misconfiguration or unexpected error is then written once to stderr, as a process warning.
   */
  logger?: Logger;
}

const ERROR_HANDLER_OPTION_CHECKS: OptionChecks<ErrorHandlerOptions> = { logger: LOGGER };

export function errorHandler(options: ErrorHandlerOptions = {}): ErrorRequestHandler {
  checkOptions('errorHandler()', options, ERROR_HANDLER_OPTION_CHECKS);
  const { logger } = options;
  const told = new ToldOnce();
  return function errorHandlerMiddleware(error: unknown, req, res, _next) {
    const tollgateError = toTollgateError(error);
    if (tollgateError.status >= 500 && !(error instanceof TollgateError)) {
      if (logger === undefined) warnUnlogged(error, told);
      else
        logger.error(
          { request_id: req.requestId, error: describeError(error) },
          'unexpected error',
        );
    }
    // An answer already given, waiting to be kept for an Idempotency-Key's retries, goes out as it
    // is: the client and the retries get the same answer.
    if (answerEnding(res)) return;
    if (res.headersSent) {
      // Part of an answer has gone out (a proxied response broke off): all we can do is cut it.
      res.destroy();
      return;
    }
    // A refusal made outside the gate's decision still tells the request's span what happened.
    if (req.tollgateSpan !== undefined) recordRefusal(req.tollgateSpan, tollgateError);
    noteErrorAnswer(res, tollgateError);
    for (const [name, value] of Object.entries(tollgateError.headers)) res.setHeader(name, value);
    res.setHeader('Cache-Control', 'no-store');
    res.status(tollgateError.status).json(errorBody(tollgateError, req.requestId));
  };
}

/** The `TollgateError` for any thrown value; errors of unknown kinds become `InternalError`. */
export function toTollgateError(error: unknown): TollgateError {
  if (error instanceof TollgateError) return error;
  const type =
    typeof error === 'object' && error !== null ? (error as { type?: unknown }).type : undefined;
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
function fromHttpError(error: unknown): TollgateError {
  const status =
    typeof error === 'object' && error !== null
      ? (error as { status?: unknown }).status
      : undefined;
  if (typeof status !== 'number' || status < 400 || status > 499) return new InternalError();
  if (status === 413) return new PayloadTooLargeError();
  if (status === 415) return new UnsupportedMediaTypeError();
  if (status === 431) return new HeadersTooLargeError();
  return new InvalidRequestError('The request could not be understood');
}

/**
 * Without a logger, a 500 would leave no trace: say each distinct cause once on stderr, by its
 * class and code only (a library's message may hold an address or a credential).
 */
function warnUnlogged(error: unknown, told: ToldOnce): void {
  if (error instanceof MisconfigurationError) {
    if (told.first(error.code)) {
      warnMisconfiguration(
        undefined,
        error.code,
        {},
        `${error.message}; the request was answered 500 internal_error`,
      );
    }
    return;
  }
  const { name, code } = describeError(error);
  const cause = code === undefined ? name : `${name} (${code})`;
  if (told.first(`unexpected ${cause}`)) {
    warnMisconfiguration(
      undefined,
      'unexpected_error',
      {},
      `a request failed with an unexpected ${cause}, answered 500 internal_error; give the kit a logger to see each one`,
    );
  }
}

function describeError(error: unknown): { name: string; code?: string } {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === 'string' ? { name: error.name, code } : { name: error.name };
  }
  return { name: typeof error };
}

/** Node's parser error codes, as Node itself answers them (status), with the kit's error code. */
type ClientError = readonly [status: number, code: ErrorCode, message: string];
const CLIENT_ERRORS: Record<string, ClientError> & { default: ClientError } = {
  HPE_HEADER_OVERFLOW: [431, 'headers_too_large', 'Request headers too large'],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, 'payload_too_large', 'Request body too large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'invalid_request', 'The request was not received in time'],
  default: [400, 'invalid_request', 'The request could not be parsed'],
};

/**
 * For `server.on('clientError', …)`: answers a request that Node's HTTP parser refused (invalid
 * header bytes, headers over the size limit, conflicting framing, a malformed request line) with
 * the error body of every other error, instead of Node's bare status line. Nothing of the request
 * or of the parser's message is echoed.
 */
export function clientErrorHandler(): (error: Error & { code?: string }, socket: Duplex) => void {
  return function handleClientError(error, socket) {
    // As Node does: never write into a response that has already started on this socket.
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (error.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent === true) {
      socket.destroy();
      return;
    }
    const [status, code, message] = CLIENT_ERRORS[error.code ?? ''] ?? CLIENT_ERRORS.default;
    const requestId = randomUUID();
    const body = JSON.stringify({ status, code, message, request_id: requestId });
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `X-Request-Id: ${requestId}\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n${body}`,
    );
  };
}

/** Answers 404 `not_found`; mount last, before the error handler. */
export function notFound(): RequestHandler {
  return function notFoundHandler(_req, _res, next) {
    next(new NotFoundError());
  };
}

/** Answers 405 `method_not_allowed` with `Allow`; mount with `router.all(path, …)` after the routes. */
export function methodNotAllowed(allowed: readonly string[]): RequestHandler {
  const methods =
    allowed.includes('GET') && !allowed.includes('HEAD') ? [...allowed, 'HEAD'] : [...allowed];
  return function methodNotAllowedHandler(_req, _res, next) {
    next(new MethodNotAllowedError(methods));
  };
}
