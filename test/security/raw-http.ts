import net from 'node:net';

/**
 * Raw HTTP/1.1 over a plain socket, for requests node:http refuses to build: duplicate or invalid
 * headers, bare LF, absolute-form targets, `Transfer-Encoding` with `Content-Length`, unnormalised
 * paths. The answer is parsed just enough to assert on: status line, headers, body.
 */

export interface RawResponse {
  /** 0 when the connection closed without a status line. */
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly text: string;
  /** The parsed JSON body, or `undefined`. */
  readonly body: Record<string, unknown> | undefined;
  /** Everything received, for leak checks. */
  readonly raw: string;
  /** True when the server ended or reset the connection (rather than the client letting go). */
  readonly closedByServer: boolean;
}

export interface RawRequestOptions {
  port: number;
  /** The exact bytes to write; built with `rawRequest()` or by hand. */
  bytes: Buffer | string;
  /** Source address to bind, e.g. `'127.0.0.2'`. */
  from?: string;
  /** Give up after this many ms (the socket is destroyed). Defaults to 3000. */
  timeoutMs?: number;
  /**
   * After a complete answer, wait (until the timeout) for the server to close the connection, and
   * say in `closedByServer` whether it did. Defaults to false: resolve at the first answer.
   */
  awaitClose?: boolean;
}

/** Writes `bytes`, half-closes nothing, and resolves with the first response on the connection. */
export function sendRaw(options: RawRequestOptions): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({
      host: '127.0.0.1',
      port: options.port,
      ...(options.from === undefined ? {} : { localAddress: options.from }),
    });
    const chunks: Buffer[] = [];
    const awaitClose = options.awaitClose ?? false;
    let done = false;
    let closedByServer = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(parseResponse(Buffer.concat(chunks), closedByServer));
    };
    const timer = setTimeout(() => {
      if (done) return;
      if (awaitClose && isComplete(Buffer.concat(chunks))) {
        finish();
        return;
      }
      done = true;
      socket.destroy();
      reject(new Error(`no complete answer within ${options.timeoutMs ?? 3000} ms`));
    }, options.timeoutMs ?? 3000);
    socket.on('connect', () => socket.write(options.bytes));
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (!awaitClose && isComplete(Buffer.concat(chunks))) finish();
    });
    const closed = (): void => {
      closedByServer = true;
      finish();
    };
    socket.on('end', closed);
    socket.on('close', closed);
    socket.on('error', (error: NodeJS.ErrnoException) => {
      // A reset after the server answered still counts as an answer.
      if (chunks.length > 0 || error.code === 'ECONNRESET' || error.code === 'EPIPE') closed();
      else if (!done) {
        done = true;
        clearTimeout(timer);
        reject(error);
      }
    });
  });
}

export interface RawRequestParts {
  method?: string;
  target: string;
  /** Header lines as [name, value]; written verbatim, duplicates kept. */
  headers?: readonly (readonly [string, string])[];
  body?: string | Buffer;
  /** Adds `Content-Length` for the body unless a header of that name is given. Defaults to true. */
  contentLength?: boolean;
  /** Line ending. Defaults to CRLF. */
  eol?: string;
  /** Leave out the `Host` line. Defaults to false. */
  withoutHost?: boolean;
  /** Leave out `Connection: close` (the connection is kept alive). Defaults to false. */
  keepAlive?: boolean;
}

/**
 * Builds a request with `Host` and `Connection: close` first (unless left out), then the given
 * headers verbatim.
 */
export function rawRequest(parts: RawRequestParts): Buffer {
  const eol = parts.eol ?? '\r\n';
  const headers: (readonly [string, string])[] = [
    ...(parts.withoutHost === true ? [] : [['Host', '127.0.0.1'] as const]),
    ...(parts.keepAlive === true ? [] : [['Connection', 'close'] as const]),
    ...(parts.headers ?? []),
  ];
  const body = parts.body === undefined ? Buffer.alloc(0) : Buffer.from(parts.body);
  const named = (name: string): boolean =>
    headers.some(([header]) => header.toLowerCase() === name);
  if (
    parts.body !== undefined &&
    (parts.contentLength ?? true) &&
    !named('content-length') &&
    !named('transfer-encoding')
  ) {
    headers.push(['Content-Length', String(body.length)]);
  }
  const head = `${parts.method ?? 'GET'} ${parts.target} HTTP/1.1${eol}${headers.map(([name, value]) => `${name}: ${value}${eol}`).join('')}${eol}`;
  return Buffer.concat([Buffer.from(head, 'latin1'), body]);
}

function parseResponse(data: Buffer, closedByServer: boolean): RawResponse {
  const raw = data.toString('utf8');
  const headEnd = raw.indexOf('\r\n\r\n');
  const head = headEnd === -1 ? raw : raw.slice(0, headEnd);
  const [statusLine = '', ...headerLines] = head.split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    if (colon > 0)
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let text = headEnd === -1 ? '' : raw.slice(headEnd + 4);
  if (headers['transfer-encoding']?.toLowerCase() === 'chunked') text = dechunk(text);
  let body: Record<string, unknown> | undefined;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    body = undefined;
  }
  return { status, headers, text, body, raw, closedByServer };
}

function isComplete(data: Buffer): boolean {
  const raw = data.toString('latin1');
  const headEnd = raw.indexOf('\r\n\r\n');
  if (headEnd === -1) return false;
  const length = /\r\ncontent-length:\s*(\d+)/i.exec(raw.slice(0, headEnd))?.[1];
  if (length !== undefined) return data.length >= headEnd + 4 + Number(length);
  return raw.endsWith('\r\n0\r\n\r\n');
}

function dechunk(text: string): string {
  let out = '';
  let rest = text;
  for (;;) {
    const lineEnd = rest.indexOf('\r\n');
    if (lineEnd === -1) return out;
    const size = parseInt(rest.slice(0, lineEnd), 16);
    if (!Number.isFinite(size) || size === 0) return out;
    out += rest.slice(lineEnd + 2, lineEnd + 2 + size);
    rest = rest.slice(lineEnd + 2 + size + 2);
  }
}
