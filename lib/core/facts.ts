import type { RequestSpan } from './tracing';

/**
 * What a door knows about a request: the only input of the decision core besides the route's
 * policy. An Express (4 or 5) or `node:http` request with the kit's `clientIp()` and `requestId()`
 * applied is one as it is; a forward-auth door builds one from the headers its proxy sends.
 */
export interface RequestFacts {
  readonly method: string;
  /** The routed path, without the query. */
  readonly path: string;
  /**
   * Where the router that routed `path` is mounted (Express's `req.baseUrl`): the path from the
   * app's root is `baseUrl + path`. Absent: `path` is from the root.
   */
  readonly baseUrl?: string | undefined;
  /** The request target as received, query included (credentials in a query are refused). */
  readonly originalUrl: string;
  /** Every value of every header, by lower-case name (Node's `IncomingMessage.headersDistinct`). */
  readonly headersDistinct: NodeJS.Dict<string[]>;
  /** The parsed JSON body, for routes that read one (a publishable key or a key pair in it). */
  readonly body?: unknown;
  /**
   * The body's bytes as received, for routes that take an `Idempotency-Key` (part of a request's
   * fingerprint); absent: an empty body.
   */
  readonly rawBody?: Buffer | undefined;
  /** The canonical client address (an IPv4-mapped IPv6 address as its IPv4 form). */
  readonly clientIp?: string | undefined;
  /** For logs and security events. */
  readonly requestId?: string | undefined;
  /**
   * The request's span while tracing is on (set by the doors): the gate records its decision on it
   * and starts the key lookup's and the admission's spans under it.
   */
  readonly tollgateSpan?: RequestSpan | undefined;
}
