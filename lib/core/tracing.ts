import {
  type Attributes,
  type Context,
  context as contexts,
  propagation,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  trace,
  TraceFlags,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';

/**
 * OpenTelemetry tracing of the doors, on `@opentelemetry/api` alone: without a registered tracer
 * provider every function here returns at its first line, so the kit costs a global lookup and a
 * comparison per request when tracing is off.
 *
 * One server span per request, named by its route template (`GET /api/v1/wallets/`), with the
 * stable HTTP attributes and the gate's decision as `tollgate.*` attributes; a child for the
 * upstream call, and for the key lookup and the admission of the limits when the gate is asked to
 * (`traceSteps`). When an instrumentation of the server already made the request's span (it is
 * the active span), the kit names that one and puts its children under it instead of making a
 * second server span. Never an attribute holding a secret,
 * a token, a body, a query or a header's value.
 */

/** The instrumentation scope of every span of the kit. */
export const TRACER_NAME = 'tollgate';

/** A request's span as the doors and the gate share it. */
export interface RequestSpan {
  /** The request's server span: the kit's own, or the one an instrumentation of the server made. */
  readonly span: Span;
  /** The context the kit's child spans start in (the server span in it). */
  readonly context: Context;
  /** @internal Whether the kit started `span`, and so ends it. */
  readonly owned: boolean;
  /** @internal Set once the span has been ended or handed back. */
  ended: boolean;
  /** @internal Set once the span carries the request's outcome. */
  decided: boolean;
}

/** What a door knows of a request when it starts its span. */
export interface RequestStart {
  /** The request's method, as received. */
  readonly method: string;
  /** The request target as received; only its path is recorded, never the query. */
  readonly target: string;
  /** The request's headers, by lower-case name: the caller's `traceparent` is read from them. */
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** `HTTP/1.1`'s `1.1`, when known. */
  readonly httpVersion?: string | undefined;
}

/**
 * The provider `@opentelemetry/api` falls back to while none is registered. The API tells it apart
 * only through its proxy provider, which a major version of the API may drop; then this module
 * changes with it.
 */
// eslint-disable-next-line @typescript-eslint/no-deprecated -- the one way to name the no-op provider
const NO_PROVIDER: TracerProvider = new ProxyTracerProvider().getDelegate();
let knownProvider: TracerProvider | undefined;
let knownTracer: Tracer | undefined;

/**
 * The kit's tracer, or `undefined` while no tracer provider is registered. Looked up on every
 * request (a provider may be registered after the app is built), cached per provider.
 */
export function kitTracer(): Tracer | undefined {
  const global = trace.getTracerProvider() as TracerProvider & {
    getDelegate?: () => TracerProvider;
  };
  const provider = typeof global.getDelegate === 'function' ? global.getDelegate() : global;
  if (provider === NO_PROVIDER) return undefined;
  if (provider !== knownProvider || knownTracer === undefined) {
    knownTracer = provider.getTracer(TRACER_NAME);
    knownProvider = provider;
  }
  return knownTracer;
}

/** The methods the HTTP conventions name; any other is recorded as `_OTHER`. */
const KNOWN_METHODS: ReadonlySet<string> = new Set([
  'CONNECT',
  'DELETE',
  'GET',
  'HEAD',
  'OPTIONS',
  'PATCH',
  'POST',
  'PUT',
  'QUERY',
  'TRACE',
]);

const HEADER_GETTER: TextMapGetter<RequestStart['headers']> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
};

/**
 * Starts the span of a request, or adopts the active one; `undefined` while tracing is off.
 * `loggablePath` removes credentials from the path (the kit's path redactor).
 */
export function startRequestSpan(
  request: RequestStart,
  loggablePath: (path: string) => string,
): RequestSpan | undefined {
  const tracer = kitTracer();
  if (tracer === undefined) return undefined;
  const active = contexts.active();
  const existing = trace.getSpan(active);
  if (existing !== undefined) {
    // An instrumentation of the server made the request's span: the kit's findings go on it.
    if (existing.isRecording()) existing.setAttributes(requestAttributes(request, loggablePath));
    return { span: existing, context: active, owned: false, ended: false, decided: false };
  }
  // The caller's context (W3C `traceparent`) is the parent; whether to record is the sampler's,
  // told the method only: the rest is worked out for a span that records.
  const parent = propagation.extract(ROOT_CONTEXT, request.headers, HEADER_GETTER);
  const name = KNOWN_METHODS.has(request.method) ? request.method : 'HTTP';
  const span = tracer.startSpan(
    name,
    { kind: SpanKind.SERVER, attributes: methodAttributes(request.method) },
    parent,
  );
  if (span.isRecording()) span.setAttributes(requestAttributes(request, loggablePath));
  return {
    span,
    context: trace.setSpan(parent, span),
    owned: true,
    ended: false,
    decided: false,
  };
}

/** What the request's span records of the request itself, besides its method. */
function requestAttributes(
  request: RequestStart,
  loggablePath: (path: string) => string,
): Attributes {
  const attributes = methodAttributes(request.method);
  const query = request.target.indexOf('?');
  attributes['url.path'] = loggablePath(
    query === -1 ? request.target : request.target.slice(0, query),
  );
  if (request.httpVersion !== undefined) {
    attributes['network.protocol.version'] = request.httpVersion;
  }
  return Object.assign(attributes, serverAttributes(request.headers.host));
}

/** `http.request.method`, and the method as sent when it is not one the conventions name. */
function methodAttributes(method: string): Attributes {
  return KNOWN_METHODS.has(method)
    ? { 'http.request.method': method }
    : { 'http.request.method': '_OTHER', 'http.request.method_original': method };
}

/** `server.address` and `server.port` from the `Host` header, when it has them. */
function serverAttributes(host: string | string[] | undefined): Attributes {
  if (typeof host !== 'string' || host === '') return {};
  const match = /^(\[[^\]]+\]|[^:]+)(?::(\d{1,5}))?$/.exec(host);
  if (match === null) return {};
  const [, address, port] = match;
  const attributes: Attributes = { 'server.address': address };
  if (port !== undefined) attributes['server.port'] = Number(port);
  return attributes;
}

/**
 * Names the request's span by its route template, as the route table knows it
 * (`GET /api/v1/wallets/`), and sets `http.route`.
 */
export function nameRequestSpan(
  requestSpan: RequestSpan,
  method: string,
  routeTemplate: string,
): void {
  if (!requestSpan.span.isRecording()) return;
  requestSpan.span.updateName(`${KNOWN_METHODS.has(method) ? method : 'HTTP'} ${routeTemplate}`);
  requestSpan.span.setAttribute('http.route', routeTemplate);
}

/**
 * Describes on the request's span the request a proxy asks the forward-auth door about: its
 * method, its path (never the query) and its route.
 */
export function describeOriginalRequest(
  requestSpan: RequestSpan,
  original: { readonly method: string; readonly path: string },
  routeTemplate: string | undefined,
  dialect: string,
  loggablePath: (path: string) => string,
): void {
  const { span } = requestSpan;
  if (!span.isRecording()) return;
  span.setAttributes(methodAttributes(original.method));
  span.setAttribute('url.path', loggablePath(original.path));
  span.setAttribute('tollgate.forward_auth.dialect', dialect);
  if (routeTemplate !== undefined) nameRequestSpan(requestSpan, original.method, routeTemplate);
}

/** What the request's span records of how the request ended. */
export interface RequestEnd {
  /** The status answered; `undefined` when no answer was started (the client hung up first). */
  readonly status: number | undefined;
  /** The client address as the door decided it (`client.address`). */
  readonly clientAddress?: string | undefined;
  /** The client closed the connection before the whole answer was written. */
  readonly aborted: boolean;
}

/**
 * Records the answer on the request's span and ends it, once, whether the answer was written or
 * the client hung up; a span the kit adopted is left for its maker to end.
 */
export function endRequestSpan(requestSpan: RequestSpan, end: RequestEnd): void {
  if (requestSpan.ended) return;
  requestSpan.ended = true;
  const { span } = requestSpan;
  if (end.clientAddress !== undefined) span.setAttribute('client.address', end.clientAddress);
  if (!requestSpan.owned) return;
  if (end.status !== undefined) {
    span.setAttribute('http.response.status_code', end.status);
    if (end.status >= 500) {
      span.setAttribute('error.type', String(end.status));
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
  }
  if (end.aborted) span.setAttribute('tollgate.client_aborted', true);
  span.end();
}

/** What the request's span records of a decision (the gate's `Decision`). */
interface DecisionFacts {
  readonly allowed: boolean;
  readonly auth?:
    | {
        readonly accountId: string;
        readonly keyId: string;
        readonly credential: string;
        readonly role: string;
      }
    | undefined;
  readonly error?: { readonly code: string; readonly scope?: string | undefined };
  readonly shadow?: readonly { readonly error: { readonly code: string } }[] | undefined;
}

/** The gate's decision, as `tollgate.*` attributes of the request's span. */
export function recordDecision(
  requestSpan: RequestSpan,
  policy: string,
  decision: DecisionFacts,
): void {
  requestSpan.decided = true;
  const { span } = requestSpan;
  if (!span.isRecording()) return;
  span.setAttribute('tollgate.policy', policy);
  span.setAttribute('tollgate.outcome', decision.allowed ? 'allowed' : 'refused');
  const { auth } = decision;
  if (auth !== undefined) {
    span.setAttribute('tollgate.account.id', auth.accountId);
    span.setAttribute('tollgate.key.id', auth.keyId);
    span.setAttribute('tollgate.credential', auth.credential);
    span.setAttribute('tollgate.role', auth.role);
  }
  if (decision.shadow !== undefined) {
    span.setAttribute(
      'tollgate.shadow.codes',
      decision.shadow.map((finding) => finding.error.code),
    );
  }
  const { error } = decision;
  if (decision.allowed || error === undefined) return;
  span.setAttribute('tollgate.error.code', error.code);
  if (typeof error.scope === 'string') span.setAttribute('tollgate.limit.scope', error.scope);
}

/**
 * A refusal made outside the gate's decision (a body that cannot be read, a path with no route,
 * a method the route does not take, a report that fails its signature check), as the same
 * `tollgate.*` attributes a refused decision has; a span that already carries its outcome keeps it.
 */
export function recordRefusal(
  requestSpan: RequestSpan,
  error: { readonly code: string; readonly status: number },
): void {
  if (requestSpan.decided || error.status >= 500) return;
  requestSpan.decided = true;
  const { span } = requestSpan;
  if (!span.isRecording()) return;
  span.setAttribute('tollgate.outcome', 'refused');
  span.setAttribute('tollgate.error.code', error.code);
}

/**
 * Marks a request admitted by a check of its own (a signed report, not a credential) as allowed,
 * unless the span already carries its outcome.
 */
export function recordAdmission(requestSpan: RequestSpan): void {
  if (requestSpan.decided) return;
  requestSpan.decided = true;
  if (requestSpan.span.isRecording()) requestSpan.span.setAttribute('tollgate.outcome', 'allowed');
}

/**
 * An internal child span of the request's span; `undefined` while tracing is off, and for a
 * request that is not sampled.
 */
export function startChildSpan(
  requestSpan: RequestSpan,
  name: string,
  attributes?: Attributes,
): Span | undefined {
  if (unsampled(requestSpan)) return undefined;
  const tracer = kitTracer();
  if (tracer === undefined) return undefined;
  return tracer.startSpan(name, { kind: SpanKind.INTERNAL, attributes }, requestSpan.context);
}

/**
 * Whether the request's span is neither recorded nor sampled: then none of its children would be
 * either (a parent-based sampler follows a local parent, and a ratio sampler decides by the trace
 * id, which the children share), so none is made: the request costs its own span only.
 */
function unsampled(requestSpan: RequestSpan): boolean {
  const { span } = requestSpan;
  return (span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0 && !span.isRecording();
}

/**
 * A child span around a synchronous step: ended when `step` returns or throws. A throw that is not
 * a refusal (a fault) marks the span as an error, by the error's class name only.
 */
export function traceStep<T>(
  requestSpan: RequestSpan,
  name: string,
  step: () => T,
  describe: (span: Span, result: T) => void,
): T {
  const span = startChildSpan(requestSpan, name);
  if (span === undefined) return step();
  try {
    const result = step();
    describe(span, result);
    return result;
  } catch (error) {
    recordFailure(span, error);
    throw error;
  } finally {
    span.end();
  }
}

/** A refusal (`code` and a 4xx `status`) as its code; a fault as an error of the span. */
export function recordFailure(span: Span, error: unknown): void {
  const { code, status } = (typeof error === 'object' && error !== null ? error : {}) as {
    code?: unknown;
    status?: unknown;
  };
  if (typeof code === 'string' && typeof status === 'number' && status < 500) {
    span.setAttribute('tollgate.error.code', code);
    return;
  }
  span.setAttribute(
    'error.type',
    error instanceof Error ? error.constructor.name || 'Error' : typeof error,
  );
  span.setStatus({ code: SpanStatusCode.ERROR });
}

/**
 * A CLIENT span for the request's call to its upstream, with the stable HTTP client attributes;
 * for a request that is not sampled, a span that records nothing and carries the request's own
 * context, for `injectTraceContext`.
 */
export function startUpstreamSpan(
  requestSpan: RequestSpan,
  call: {
    readonly method: string;
    readonly routeTemplate: string | undefined;
    readonly url: URL;
    /** The path sent upstream, without the query. */
    readonly path: string;
  },
): Span | undefined {
  // Not sampled: the upstream is told the request's own context (its trace, not sampled), which
  // is what a child that records nothing would tell it, without making one.
  if (unsampled(requestSpan)) return trace.wrapSpanContext(requestSpan.span.spanContext());
  const tracer = kitTracer();
  if (tracer === undefined) return undefined;
  const span = tracer.startSpan(
    call.method,
    { kind: SpanKind.CLIENT, attributes: methodAttributes(call.method) },
    requestSpan.context,
  );
  if (!span.isRecording()) return span;
  const { url } = call;
  if (call.routeTemplate !== undefined) {
    span.updateName(`${call.method} ${call.routeTemplate}`);
    span.setAttribute('url.template', call.routeTemplate);
  }
  span.setAttributes({
    'server.address': url.hostname,
    'server.port': Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
    'url.scheme': url.protocol.slice(0, -1),
    'url.path': call.path,
  });
  return span;
}

/**
 * Writes the W3C trace context of `span` (`traceparent`, and `tracestate` when it has one) into
 * `headers`, through the registered propagator, replacing any the client sent.
 */
export function injectTraceContext(
  span: Span,
  parent: Context,
  headers: Record<string, string | string[]>,
): void {
  // Deleted only when there: a `delete` turns the object into a slow dictionary for undici to walk.
  if (headers.traceparent !== undefined) delete headers.traceparent;
  if (headers.tracestate !== undefined) delete headers.tracestate;
  // A span standing for the request's own context (not sampled) is already the parent's.
  const context =
    trace.getSpanContext(parent) === span.spanContext() ? parent : trace.setSpan(parent, span);
  propagation.inject(context, headers);
}

/** The W3C trace context of the request's span, as headers for an answer to a proxy. */
export function traceContextHeaders(requestSpan: RequestSpan): [string, string][] {
  const carrier: Record<string, string> = {};
  propagation.inject(requestSpan.context, carrier);
  return Object.entries(carrier);
}

/** The trace and span ids of a recording span, for log lines; `undefined` otherwise. */
export function traceIds(
  requestSpan: RequestSpan | undefined,
): { trace_id: string; span_id: string } | undefined {
  if (!requestSpan?.span.isRecording()) return undefined;
  const { traceId, spanId } = requestSpan.span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}
