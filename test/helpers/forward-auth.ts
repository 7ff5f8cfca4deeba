import type { SendResult, TestGateway } from './gateway';

/**
 * The requests each reverse proxy sends to an auth service, written from their sources
 * (`../shared/notes/forward-auth.md`), for the proxies this machine cannot run (Traefik, Envoy)
 * and for unit-level checks of the dialects. nginx and Caddy are also run for real
 * (`test/proxies/`).
 */

/** The client request the proxy asks about. */
export interface ClientRequest {
  readonly method: string;
  /** Path and query, as the client sent them. */
  readonly target: string;
  /** The client's own headers (credentials, `Origin`, ...). */
  readonly headers?: Readonly<Record<string, string>>;
  /** The client's address, as the proxy saw it. */
  readonly clientIp: string;
}

export type ProxyKind = 'traefik' | 'caddy' | 'nginx' | 'envoy';

export const PROXY_KINDS: readonly ProxyKind[] = ['traefik', 'caddy', 'nginx', 'envoy'];

/** The gateway's dialect each proxy speaks. */
export const DIALECT_OF: Readonly<Record<ProxyKind, string>> = {
  traefik: 'forward-auth',
  caddy: 'forward-auth',
  nginx: 'auth-request',
  envoy: 'ext-authz',
};

/**
 * Asks `gateway` about `request` the way `proxy` does, from the proxy's address `from` (loopback,
 * 127.0.0.1 by default: the address the test gateways trust).
 */
export function askAs(
  proxy: ProxyKind,
  gateway: TestGateway,
  request: ClientRequest,
  from = '127.0.0.1',
): Promise<SendResult> {
  const host = 'api.example.test';
  const client = request.headers ?? {};
  switch (proxy) {
    case 'traefik':
      // pkg/middlewares/auth/forward.go: GET to the configured address, every client header but
      // hop-by-hop ones, and the X-Forwarded set (with trustForwardHeader: false, the client's own
      // X-Forwarded-* are deleted first and X-Forwarded-For is the peer).
      return gateway.send({
        method: 'GET',
        path: '/authz/forward-auth',
        from,
        headers: {
          ...client,
          'x-forwarded-method': request.method,
          'x-forwarded-proto': 'https',
          'x-forwarded-port': '443',
          'x-forwarded-host': host,
          'x-forwarded-uri': request.target,
          'x-forwarded-for': request.clientIp,
        },
      });
    case 'caddy':
      // forward_auth: a reverse_proxy rewritten to GET `uri`, every client header, X-Forwarded-Method
      // and X-Forwarded-Uri, and reverse_proxy's own X-Forwarded-For/-Proto/-Host.
      return gateway.send({
        method: 'GET',
        path: '/authz/forward-auth',
        from,
        headers: {
          ...client,
          'x-forwarded-method': request.method,
          'x-forwarded-uri': request.target,
          'x-forwarded-for': request.clientIp,
          'x-forwarded-proto': 'https',
          'x-forwarded-host': host,
        },
      });
    case 'nginx':
      // auth_request: a GET subrequest with every client header and no body; the headers below
      // are those the shipped deploy/nginx/tollgate-locations.conf sets.
      return gateway.send({
        method: 'GET',
        path: '/authz/auth-request',
        from,
        headers: {
          ...client,
          'x-original-method': request.method,
          'x-original-uri': request.target,
          'x-original-url': `https://${host}${request.target}`,
          'x-real-ip': request.clientIp,
          'x-forwarded-for': request.clientIp,
        },
      });
    case 'envoy': {
      // ext_authz HTTP service: the original method, path_prefix + the original path and query,
      // only Host, Content-Length and Authorization by default plus `allowed_headers` (those of
      // the shipped deploy/envoy/envoy.yaml).
      const allowed = Object.fromEntries(
        Object.entries(client).filter(([name]) => ENVOY_ALLOWED_HEADERS.has(name.toLowerCase())),
      );
      return gateway.send({
        method: request.method,
        path: `/authz/ext-authz${request.target}`,
        from,
        headers: {
          ...allowed,
          'content-length': '0',
          'x-forwarded-for': request.clientIp,
          'x-forwarded-proto': 'https',
        },
      });
    }
  }
}

/** The client headers deploy/envoy/envoy.yaml lets Envoy send (besides Host and Authorization). */
const ENVOY_ALLOWED_HEADERS: ReadonlySet<string> = new Set([
  'authorization',
  'traceparent',
  'tracestate',
  'x-service-public-api-key',
  'idempotency-key',
  'origin',
  'sec-fetch-site',
  'sec-fetch-dest',
  'sec-fetch-user',
]);
