import { validateHeaderName, validateHeaderValue } from 'node:http';
import type { NextFunction, RequestHandler, Response } from 'express';
import { type Dispatcher, Pool } from 'undici';
import { type Span, SpanStatusCode } from '@opentelemetry/api';
import { UpstreamError } from './errors';
import { identityHeaders } from '../lib/entry/core';
import {
  injectTraceContext,
  keepsAnswer,
  releaseAnswer,
  routeTemplateOf,
  startUpstreamSpan,
} from '../lib/internal';

/**
 * A streaming reverse proxy on an undici keep-alive pool, chosen over a node:http proxy on a
 * keep-alive agent for its higher throughput (figures in BENCHMARKS.md).
 * Method, path, query and body go upstream unchanged; the credentials and every identity header the client sent are stripped, and the
 * gateway's own identity headers are added. The response streams back as it arrives.
 */

export interface ProxyOptions {
  /** Base URL of the upstream, e.g. `http://127.0.0.1:8090`; a path prefix is kept. */
  upstreamUrl: string;
  /**
   * No answer's head within this many ms of the dispatch: 504. Once the head is out, no body chunk
   * for this long (the client holding the stream back does not count): the connection is cut.
   */
  timeoutMs: number;
  /** The publishable-key header, stripped like `Authorization`. */
  publicKeyHeader: string;
  /** Concurrent upstream connections. Defaults to 256. */
  maxSockets?: number;
  /** Told the time to each upstream answer's headers, in seconds (metrics). */
  onAnswer?: (seconds: number) => void;
  /** Told each request that got no usable answer (metrics). */
  onFailure?: (kind: 'unavailable' | 'timeout') => void;
}

export interface Proxy {
  readonly handler: RequestHandler;
  /** Closes idle upstream connections. */
  close(): void;
}

/**
 * Never forwarded: hop-by-hop headers, credentials, identity claims a client could
 * forge, method and URL overrides, and any header whose name holds `_` (CGI, WSGI and PHP read
 * `X_Gateway_Role` as `X-Gateway-Role`; nginx drops them too).
 */
const STRIPPED_REQUEST_HEADERS = [
  'connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'expect',
  'host',
  'content-length',
  'authorization',
  'cookie',
  'forwarded',
  'x-real-ip',
  'x-request-id',
  'x-client-ip',
  // Frameworks that honour these would run another method or route than the one authorised.
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
  'x-original-url',
  'x-rewrite-url',
];
const STRIPPED_REQUEST_PREFIXES = ['x-gateway-', 'x-forwarded-'];

const STRIPPED_RESPONSE_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'x-request-id',
]);

export function createProxy(options: ProxyOptions): Proxy {
  const base = new URL(options.upstreamUrl);
  const basePath = base.pathname.replace(/\/$/, '');
  const pool = new Pool(base.origin, {
    connections: options.maxSockets ?? 256,
    pipelining: 1,
    // Each exchange keeps its own deadline (`UpstreamExchange`). undici's own are fast timers of
    // half-second resolution, so a short timeout can fire most of a second late, and a cleared
    // one stays in undici's list until its next sweep, long enough to reach V8's old generation.
    headersTimeout: 0,
    bodyTimeout: 0,
    connectTimeout: Math.min(options.timeoutMs, 10_000),
  });
  const stripped = new Set([...STRIPPED_REQUEST_HEADERS, options.publicKeyHeader.toLowerCase()]);

  const handler: RequestHandler = function proxyHandler(req, res, next) {
    // The client hung up while the checks ran (a Redis round trip, a key lookup): forward nothing,
    // least of all a payout nobody is waiting for. Its 'close' has passed, so nothing would cancel it.
    // An Idempotency-Key's claim is released: its retry is the first the upstream sees.
    if (res.destroyed) {
      releaseAnswer(res);
      return;
    }
    const headers: Record<string, string | string[]> = {};
    const namedByConnection = connectionTokens(req.headers.connection);
    const received = req.headers;
    // `for…in` over Node's own headers object: no array of entries per request.
    for (const name in received) {
      const value = received[name];
      const drop =
        value === undefined ||
        stripped.has(name) ||
        name.includes('_') ||
        namedByConnection.includes(name) ||
        hasStrippedPrefix(name);
      if (!drop) headers[name] = value;
    }
    if (req.auth !== undefined) Object.assign(headers, identityHeaders(req.auth));
    if (req.requestId !== undefined) headers['x-request-id'] = req.requestId;
    const body = req.rawBody;
    if (body === undefined) delete headers['content-type'];
    const path = basePath + req.path;
    // Tracing on: the upstream call is a child span, and the upstream's parent (`traceparent`).
    const requestSpan = req.tollgateSpan;
    let span: Span | undefined;
    if (requestSpan !== undefined) {
      span = startUpstreamSpan(requestSpan, {
        method: req.method,
        routeTemplate: routeTemplateOf(req),
        url: base,
        path,
      });
      if (span !== undefined) injectTraceContext(span, requestSpan.context, headers);
    }

    pool.dispatch(
      {
        method: req.method,
        path: path + querySuffix(req.originalUrl),
        headers,
        body: body ?? null,
      },
      new UpstreamExchange(res, next, options, span),
    );
  };

  return {
    handler,
    close: () => {
      void pool.close();
    },
  };
}

/** An exchange's deadline, and what it tells the metrics. */
type ExchangeOptions = Pick<ProxyOptions, 'timeoutMs' | 'onAnswer' | 'onFailure'>;

/**
 * One request's exchange with the upstream, on undici's dispatch API: the answer's head is written
 * to the client when it arrives and each body chunk as it arrives, with the client's backpressure
 * passed back to the upstream connection. No response stream, promise or abort signal per request
 * (undici's `request()` makes all three; figures in BENCHMARKS.md).
 * undici documents `dispatch()` as free to change in a major version: undici is pinned, and
 * `test/integration/proxy.test.ts` covers what this handler relies on.
 */
class UpstreamExchange implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined;
  /** `waiting` for the answer's head, `streaming` its body, `over` once answered or failed. */
  private state: 'waiting' | 'streaming' | 'over' = 'waiting';
  private readonly started = performance.now();
  /** The client is holding the body back (`write()` said wait): the upstream is not idle. */
  private paused = false;
  /**
   * One native timer per exchange: until the answer's head, then between body chunks (refreshed,
   * never re-created). Cleared when the exchange ends, so it dies young.
   */
  private readonly deadline: NodeJS.Timeout;

  constructor(
    private readonly res: Response,
    private readonly next: NextFunction,
    private readonly options: ExchangeOptions,
    /** The upstream call's span while tracing is on; ended with the exchange. */
    private span?: Span,
  ) {
    // A client that hangs up cancels its upstream request instead of holding a pooled connection,
    // whether it is still queued for a connection, waiting for the answer or streaming it.
    res.once('close', this.clientClosed);
    this.deadline = setTimeout(this.timedOut, options.timeoutMs);
  }

  private readonly clientClosed = (): void => {
    if (this.res.writableFinished) return;
    // A request with an Idempotency-Key goes on: its answer is kept for the client's retry (a
    // body held back for the client now flows, since nobody is reading it).
    if (keepsAnswer(this.res)) {
      if (this.paused) {
        this.paused = false;
        this.controller?.resume();
      }
      return;
    }
    this.end('client_closed');
    this.controller?.abort(clientGone());
  };

  private readonly timedOut = (): void => {
    if (this.state === 'waiting') {
      this.end('timeout');
      this.controller?.abort(upstreamTimedOut());
      if (this.res.destroyed && !keepsAnswer(this.res)) return;
      this.options.onFailure?.('timeout');
      this.next(new UpstreamError('timeout'));
    } else if (this.state === 'streaming') {
      if (this.paused) {
        this.deadline.refresh();
        return;
      }
      // The head is out: the client can only be told by the connection closing.
      this.end('timeout');
      this.controller?.abort(upstreamTimedOut());
      this.res.destroy();
    }
  };

  /**
   * No more to do for this exchange: later events from undici are ignored. `failure` names why it
   * ended without the whole answer (the span's `error.type`). The span ends here, once.
   */
  private end(failure?: string): void {
    this.state = 'over';
    clearTimeout(this.deadline);
    const { span } = this;
    if (span === undefined) return;
    this.span = undefined;
    if (failure !== undefined) {
      span.setAttribute('error.type', failure);
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
    span.end();
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    // Over while it waited in the pool's queue: the client hung up, or the deadline passed.
    if (this.state === 'over') controller.abort(endedBeforeSent());
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    upstreamHeaders: Record<string, string | string[] | undefined>,
  ): void {
    // 1xx informational answers: the final one follows.
    if (statusCode < 200 || this.state !== 'waiting') return;
    if (statusCode > 599) {
      this.fail(controller, 'unavailable');
      return;
    }
    this.options.onAnswer?.((performance.now() - this.started) / 1000);
    this.span?.setAttribute('http.response.status_code', statusCode);
    const namedByUpstream = connectionTokens(upstreamHeaders.connection);
    // Every header is checked before any is set: one Node would refuse (a character it forbids)
    // leaves none of the upstream's headers on the 502 that answers instead.
    try {
      for (const name in upstreamHeaders) {
        const value = upstreamHeaders[name];
        if (value !== undefined && forwardedResponseHeader(name, namedByUpstream)) {
          validateHeaderName(name);
          if (typeof value === 'string') validateHeaderValue(name, value);
          else for (const each of value) validateHeaderValue(name, each);
        }
      }
    } catch {
      this.fail(controller, 'unavailable');
      return;
    }
    // Set one by one, then `writeHead` without an object: no copy of the headers per answer.
    for (const name in upstreamHeaders) {
      const value = upstreamHeaders[name];
      if (value !== undefined && forwardedResponseHeader(name, namedByUpstream)) {
        this.res.setHeader(name, value);
      }
    }
    this.res.writeHead(statusCode);
    if (statusCode >= 400) {
      this.span?.setAttribute('error.type', String(statusCode));
      this.span?.setStatus({ code: SpanStatusCode.ERROR });
    }
    this.state = 'streaming';
    this.deadline.refresh();
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.state !== 'streaming') return;
    this.deadline.refresh();
    if (!this.res.write(chunk)) {
      this.paused = true;
      controller.pause();
      this.res.once('drain', () => {
        this.paused = false;
        if (this.state !== 'streaming') return;
        this.deadline.refresh();
        controller.resume();
      });
    }
  }

  onResponseEnd(): void {
    if (this.state !== 'streaming') return;
    this.end();
    this.res.end();
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    const { state } = this;
    const kind = isConnectTimeout(error) ? 'timeout' : 'unavailable';
    // undici starts a request (`onRequestStart`) only on a connected socket, just before writing
    // it: an exchange that failed before that never reached the upstream.
    const sent = this.controller !== undefined;
    this.end(state === 'over' ? undefined : kind);
    if (state === 'streaming') {
      // The head is out: the client can only be told by the connection closing.
      this.res.destroy();
    } else if (state === 'waiting' && (!this.res.destroyed || keepsAnswer(this.res))) {
      this.options.onFailure?.(kind);
      this.next(new UpstreamError(kind, sent));
    }
  }

  private fail(controller: Dispatcher.DispatchController, kind: 'unavailable'): void {
    this.end(kind);
    controller.abort(new Error('the upstream answer cannot be forwarded'));
    this.options.onFailure?.(kind);
    this.next(new UpstreamError(kind));
  }
}

/** The reason an exchange is aborted with when its client hung up (made only then). */
function clientGone(): Error {
  return new Error('the client closed its connection');
}

/** The reason a request is aborted with when its exchange ended before undici sent it. */
function endedBeforeSent(): Error {
  return new Error('the exchange ended before the request was sent');
}

/** The reason an exchange is aborted with when the upstream ran out of time (made only then). */
function upstreamTimedOut(): Error {
  return new Error('the upstream did not answer in time');
}

/** undici's own connect timeout (`connectTimeout`); the exchange's deadline covers the rest. */
function isConnectTimeout(error: unknown): boolean {
  const code =
    typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return code === 'UND_ERR_CONNECT_TIMEOUT';
}

/**
 * The query of a request target, with its `?`, or `''`. The upstream gets the routed path and this
 * only: never a scheme or authority of an absolute-form target, never a fragment (a
 * target holding `#` is refused before routing).
 */
function querySuffix(url: string): string {
  const start = url.indexOf('?');
  return start === -1 ? '' : url.slice(start);
}

function hasStrippedPrefix(name: string): boolean {
  for (const prefix of STRIPPED_REQUEST_PREFIXES) if (name.startsWith(prefix)) return true;
  return false;
}

/** Whether a header of the upstream's answer goes on to the client. */
function forwardedResponseHeader(name: string, namedByConnection: readonly string[]): boolean {
  return !STRIPPED_RESPONSE_HEADERS.has(name) && !namedByConnection.includes(name);
}

const NO_TOKENS: readonly string[] = [];

function connectionTokens(connection: string | string[] | undefined): readonly string[] {
  if (connection === undefined) return NO_TOKENS;
  return (Array.isArray(connection) ? connection.join(',') : connection)
    .split(',')
    .map((token) => token.trim().toLowerCase())
    .filter((token) => token !== '');
}
