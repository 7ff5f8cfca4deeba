import http from 'node:http';
import https from 'node:https';
import type { RequestHandler } from 'express';
import { UpstreamError } from '../lib/errors';

/**
 * A streaming reverse proxy on a keep-alive pool (node:http; measured faster here than
 * http-proxy-middleware or undici, see BENCHMARKS.md). Method, path, query and body go upstream
 * unchanged; the credentials and every identity header the client sent are stripped, and the
 * gateway's own identity headers are added. The response streams back as it arrives.
 */

export interface ProxyOptions {
  /** Base URL of the upstream, e.g. `http://127.0.0.1:8090`; a path prefix is kept. */
  upstreamUrl: string;
  /** No answer within this many ms: 504. */
  timeoutMs: number;
  /** The publishable-key header, stripped like `Authorization`. */
  publicKeyHeader: string;
  /** Concurrent upstream connections. Defaults to 256. */
  maxSockets?: number;
}

export interface Proxy {
  readonly handler: RequestHandler;
  /** Closes idle upstream connections. */
  close(): void;
}

/** Never forwarded: hop-by-hop headers, credentials, and identity claims a client could forge. */
const STRIPPED_REQUEST_HEADERS = [
  'connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
  'authorization',
  'cookie',
  'forwarded',
  'x-real-ip',
  'x-request-id',
  'x-client-ip',
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
  const client = base.protocol === 'https:' ? https : http;
  const agent = new client.Agent({
    keepAlive: true,
    maxSockets: options.maxSockets ?? 256,
    maxFreeSockets: 64,
  });
  const stripped = new Set([...STRIPPED_REQUEST_HEADERS, options.publicKeyHeader.toLowerCase()]);

  const handler: RequestHandler = function proxyHandler(req, res, next) {
    const headers: http.OutgoingHttpHeaders = {};
    const namedByConnection = connectionTokens(req.headers.connection);
    for (const [name, value] of Object.entries(req.headers)) {
      const drop =
        stripped.has(name) ||
        namedByConnection.includes(name) ||
        STRIPPED_REQUEST_PREFIXES.some((prefix) => name.startsWith(prefix));
      if (!drop) headers[name] = value;
    }
    const auth = req.auth;
    if (auth !== undefined) {
      headers['x-gateway-account-id'] = auth.accountId;
      headers['x-gateway-key-id'] = auth.keyId;
      headers['x-gateway-role'] = auth.role;
      headers['x-gateway-credential'] = auth.credential;
    }
    if (req.requestId !== undefined) headers['x-request-id'] = req.requestId;
    const body = req.rawBody;
    headers['content-length'] = String(body?.length ?? 0);
    if (body === undefined) delete headers['content-type'];

    let settled = false;
    const fail = (error: UpstreamError): void => {
      if (settled) return;
      settled = true;
      next(error);
    };
    const upstream = client.request(
      {
        protocol: base.protocol,
        hostname: base.hostname,
        port: base.port,
        method: req.method,
        path: basePath + originForm(req.originalUrl),
        headers,
        agent,
        timeout: options.timeoutMs,
      },
      (response) => {
        settled = true;
        const responseHeaders: http.OutgoingHttpHeaders = {};
        for (const [name, value] of Object.entries(response.headers)) {
          if (!STRIPPED_RESPONSE_HEADERS.has(name) && value !== undefined)
            responseHeaders[name] = value;
        }
        res.writeHead(response.statusCode ?? 502, responseHeaders);
        response.pipe(res);
        response.on('error', () => res.destroy());
      },
    );
    upstream.on('timeout', () => {
      fail(new UpstreamError('timeout'));
      upstream.destroy();
    });
    upstream.on('error', () => {
      fail(new UpstreamError('unavailable'));
      if (res.headersSent) res.destroy();
    });
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    upstream.end(body);
  };

  return {
    handler,
    close: () => {
      agent.destroy();
    },
  };
}

/** `scheme://authority` of a request target sent in absolute form (`GET http://host/path`). */
const ABSOLUTE_FORM_PREFIX = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/;

/**
 * The origin-form target (`/path?query`) of a request. An absolute-form target is routed by its
 * path, so only that path goes upstream: forwarded as is, it would let the client choose the host
 * a proxy-capable upstream connects to. Dot segments are left alone, exactly as they were routed.
 */
function originForm(url: string): string {
  const rest = url.replace(ABSOLUTE_FORM_PREFIX, '');
  return rest.startsWith('/') ? rest : `/${rest}`;
}

function connectionTokens(connection: string | undefined): string[] {
  if (connection === undefined) return [];
  return connection
    .split(',')
    .map((token) => token.trim().toLowerCase())
    .filter((token) => token !== '');
}
