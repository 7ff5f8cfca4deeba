import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { READINESS_PROBE_AGENT } from '../../gateway/readiness';

/**
 * A real upstream on loopback that records what the gateway sends it. By default it answers
 * `200 {"ok": true, "path": …}`; `respond` changes that (delay, status, hang up). The gateway's
 * readiness probes are answered 404 and not recorded.
 */

export interface RecordedRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
}

export type Responder = (request: RecordedRequest, res: http.ServerResponse) => void;

export interface RecordingUpstream {
  readonly url: string;
  readonly requests: RecordedRequest[];
  respond: Responder;
  reset(): void;
  close(): Promise<void>;
}

export const defaultResponder: Responder = (request, res) => {
  const body = JSON.stringify({ ok: true, method: request.method, path: request.url });
  res.writeHead(200, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
};

/**
 * A responder that answers every request with `status` (any number Node writes, 100 to 999),
 * exactly these headers (plus `Content-Length`) and `body`: for what an upstream should never
 * pass to a client.
 */
export function replyWith(
  status: number,
  headers: Readonly<Record<string, string>>,
  body: string,
): Responder {
  return (_request, res) => {
    res.writeHead(status, { ...headers, 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
}

export async function startRecordingUpstream(): Promise<RecordingUpstream> {
  const requests: RecordedRequest[] = [];
  const upstream = {
    respond: defaultResponder,
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      // The gateway's readiness probe (`/readyz`) is answered, never recorded: tests count what
      // the gateway proxies.
      if (req.headers['user-agent'] === READINESS_PROBE_AGENT) {
        res.writeHead(404, { 'content-length': '0' }).end();
        return;
      }
      const recorded = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks),
      };
      requests.push(recorded);
      upstream.respond(recorded, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(upstream, {
    url: `http://127.0.0.1:${port}`,
    requests,
    reset: () => {
      requests.length = 0;
      upstream.respond = defaultResponder;
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) =>
        server.close(() => {
          resolve();
        }),
      );
    },
  });
}

/**
 * An upstream that refuses every connection: port 1 of loopback, where nothing listens. A port
 * found free a moment before would not do: another test file's server may take it meanwhile, and
 * answer in the upstream's place.
 */
export const REFUSING_UPSTREAM_URL = 'http://127.0.0.1:1';
