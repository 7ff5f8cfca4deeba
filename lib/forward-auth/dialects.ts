import type { HeaderPair } from '../core/limits';
import { identityHeaders } from '../core/identity';
import { errorBody, InvalidRequestError, type TollgateError } from '../errors';
import type { AuthContext } from '../model/auth-context';

/**
 * The three ways reverse proxies ask an auth service, without a framework: where each
 * describes the original request, and how each must be answered.
 *
 * | dialect        | asked by                       | original method, target              |
 * |----------------|--------------------------------|--------------------------------------|
 * | `forward-auth` | Traefik ForwardAuth, Caddy     | `X-Forwarded-Method`, `X-Forwarded-Uri` |
 * | `auth-request` | nginx `auth_request`           | `X-Original-Method`, `X-Original-URI` (or `X-Original-URL`) |
 * | `ext-authz`    | Envoy `ext_authz` (HTTP), Istio | its own method, its path after the prefix |
 */

export type ForwardAuthDialect = 'forward-auth' | 'auth-request' | 'ext-authz';

export const FORWARD_AUTH_DIALECTS: readonly ForwardAuthDialect[] = [
  'forward-auth',
  'auth-request',
  'ext-authz',
];

/** The request the proxy asks about. */
export interface OriginalRequest {
  readonly method: string;
  /** The target as the client sent it: path and query, never decoded. */
  readonly target: string;
  /** `target` without its query. */
  readonly path: string;
}

/** What the proxy's own request to the auth service looks like, for the dialect that reads it. */
export interface AuthRequest {
  readonly method: string;
  /** For `ext-authz`: the request's own target after the door's prefix. */
  readonly target: string;
  readonly headersDistinct: NodeJS.Dict<string[]>;
}

const METHOD_PATTERN = /^[A-Z]{1,16}$/;
/** An origin-form target of visible ASCII: no space, no control character, no fragment. */
const TARGET_PATTERN = /^\/[\x21-\x22\x24-\x7e]*$/;
const MAX_TARGET_LENGTH = 8192;

/**
 * The original request a proxy describes, or the `400 invalid_request` due when it describes none
 * (the proxy is misconfigured, or something else called the door).
 */
export function originalRequest(
  dialect: ForwardAuthDialect,
  request: AuthRequest,
): OriginalRequest | InvalidRequestError {
  switch (dialect) {
    case 'forward-auth':
      return described(
        single(request, 'x-forwarded-method'),
        single(request, 'x-forwarded-uri'),
        'X-Forwarded-Method and X-Forwarded-Uri',
      );
    case 'auth-request': {
      const url = single(request, 'x-original-url');
      return described(
        single(request, 'x-original-method'),
        single(request, 'x-original-uri') ?? (typeof url === 'string' ? targetOfUrl(url) : url),
        'X-Original-Method and X-Original-URI',
      );
    }
    case 'ext-authz':
      return described(request.method, request.target, 'the original path after /authz/ext-authz');
  }
}

/** The one value of a header; `null` when it was sent more than once. */
function single(request: AuthRequest, name: string): string | undefined | null {
  const values = request.headersDistinct[name];
  if (values === undefined || values.length === 0) return undefined;
  return values.length === 1 ? values[0] : null;
}

function described(
  method: string | undefined | null,
  target: string | undefined | null,
  what: string,
): OriginalRequest | InvalidRequestError {
  if (method === undefined || target === undefined || target === '') {
    return new InvalidRequestError(`The proxy must send ${what}`);
  }
  if (method === null || target === null) {
    return new InvalidRequestError(`The proxy must send ${what} once`);
  }
  if (!METHOD_PATTERN.test(method)) {
    return new InvalidRequestError('The original method is not an HTTP method');
  }
  if (target.length > MAX_TARGET_LENGTH || !TARGET_PATTERN.test(target)) {
    return new InvalidRequestError(
      target.includes('#')
        ? 'The request target must not hold a fragment (#)'
        : 'The original target is not a path',
    );
  }
  const query = target.indexOf('?');
  return { method, target, path: query === -1 ? target : target.slice(0, query) };
}

/** `https://host/a/b?c` as `/a/b?c`, as sent: never normalised by a URL parser. */
function targetOfUrl(url: string): string | undefined {
  const scheme = /^https?:\/\//i.exec(url);
  if (scheme === null) return undefined;
  const slash = url.indexOf('/', scheme[0].length);
  return slash === -1 ? '/' : url.slice(slash);
}

/** An answer to the proxy: status, headers and body. */
export interface AuthzAnswer {
  readonly status: number;
  readonly headers: readonly HeaderPair[];
  readonly body: string;
}

export interface AllowOptions {
  /** Headers the Envoy door asks Envoy to remove from the upstream request: the credentials. */
  readonly credentialHeaders: readonly string[];
}

/**
 * Allow: `200` (Envoy takes nothing else), an empty body, `Cache-Control: no-store`, every
 * identity header, the limit's headers. Envoy is also asked to strip the credentials, so a secret
 * key never reaches the upstream (the gateway's own proxy never forwards them either).
 */
export function allowAnswer(
  dialect: ForwardAuthDialect,
  auth: AuthContext,
  limitHeaders: readonly HeaderPair[],
  options: AllowOptions,
): AuthzAnswer {
  const headers: HeaderPair[] = [
    ['Cache-Control', 'no-store'],
    ...Object.entries(identityHeaders(auth)),
    ...limitHeaders,
  ];
  if (dialect === 'ext-authz') {
    headers.push(['x-envoy-auth-headers-to-remove', options.credentialHeaders.join(',')]);
  }
  return { status: 200, headers, body: '' };
}

/**
 * Deny. Traefik, Caddy and Envoy pass the status, headers and body to the client, so they get
 * JSON error body as it is. nginx's `auth_request` passes only 401 and 403 (anything else becomes a
 * 500), so that dialect answers every other refusal `403` and names the real one in
 * `X-Tollgate-Status` and `X-Tollgate-Code`; every refusal of that dialect also carries the real
 * body in `X-Tollgate-Body`, which nginx never reads from a subrequest's body, so the shipped
 * configuration can answer the client exactly what the gateway would.
 */
export function refusalAnswer(
  dialect: ForwardAuthDialect,
  error: TollgateError,
  limitHeaders: readonly HeaderPair[],
  requestId: string | undefined,
): AuthzAnswer {
  // Header-safe as well as a body: no character outside printable ASCII.
  const body = JSON.stringify(errorBody(error, requestId)).replace(
    /[^\x20-\x7e]/g,
    (character) => `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
  const headers: HeaderPair[] = [
    ...limitHeaders,
    ...Object.entries(error.headers).filter(([name]) => name !== 'Connection'),
    ['Cache-Control', 'no-store'],
    ['Content-Type', 'application/json; charset=utf-8'],
  ];
  if (dialect !== 'auth-request') return { status: error.status, headers, body };
  headers.push(
    ['X-Tollgate-Status', String(error.status)],
    ['X-Tollgate-Code', error.code],
    ['X-Tollgate-Body', body],
  );
  const passedByNginx = error.status === 401 || error.status === 403;
  return { status: passedByNginx ? error.status : 403, headers, body };
}
