import http from 'node:http';

/** What `expressServerOptions()` reads of an Express app (4.21+ or 5). */
export interface ExpressPrototypes {
  /** The app's request prototype (`app.request`). */
  readonly request: object;
  /** The app's response prototype (`app.response`). */
  readonly response: object;
}

/** The two options of `http.createServer()` and `https.createServer()` that it sets. */
export type ExpressServerOptions = Pick<http.ServerOptions, 'IncomingMessage' | 'ServerResponse'>;

/**
 * Options for `http.createServer()` (or `https.createServer()`) under which Node builds every
 * request and response of the server with the app's own Express prototypes:
 *
 *     const server = http.createServer({ ...expressServerOptions(app) }, app).listen(3000);
 *
 * instead of `app.listen(3000)`. Express hands every request to `Object.setPrototypeOf(req,
 * app.request)` (and the response to `app.response`); changing the prototype of an object that
 * already exists makes V8 drop what it had optimised about it, in Express and in Node's own HTTP
 * code, for the whole request. An object born with that prototype makes the call a no-op, which
 * cuts the CPU each answer costs, in Express alone and in the sample gateway (figures in
 * BENCHMARKS.md).
 *
 * Everything else stays as Express does it: the objects are Express's request and response, so
 * every middleware sees what it saw before. A request that enters a mounted sub-app still has its
 * prototypes swapped there, as without these options; only the app given here gains.
 */
export function expressServerOptions(app: ExpressPrototypes): ExpressServerOptions {
  const { request, response } = app;
  if (!isObject(request) || !isObject(response)) {
    throw new TypeError('expressServerOptions(app): app must be an Express application');
  }
  // Node's own constructors are plain functions that subclasses call with `this`; should a Node
  // version make them classes, the server is built as without these options (and the tests, which
  // check that requests arrive born, say so).
  if (isClass(http.IncomingMessage) || isClass(http.ServerResponse)) return {};
  // Plain functions too: a class's `prototype` cannot be replaced, and the instances must have
  // the app's prototype objects themselves for Express's call to be a no-op. (`Reflect.construct`
  // with these as `new.target` also gives the instances that prototype, but it makes the gateway
  // no faster than Express's swap does.)
  function ExpressRequest(this: http.IncomingMessage, socket: unknown): void {
    (http.IncomingMessage as unknown as NodeConstructor).call(this, socket);
  }
  ExpressRequest.prototype = request;
  function ExpressResponse(this: http.ServerResponse, req: unknown, options: unknown): void {
    (http.ServerResponse as unknown as NodeConstructor).call(this, req, options);
  }
  ExpressResponse.prototype = response;
  return {
    IncomingMessage: ExpressRequest as unknown as typeof http.IncomingMessage,
    ServerResponse: ExpressResponse as unknown as typeof http.ServerResponse,
  };
}

type NodeConstructor = (this: unknown, ...args: unknown[]) => void;

function isClass(constructor: unknown): boolean {
  return /^class\b/.test(Function.prototype.toString.call(constructor));
}

function isObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null;
}
