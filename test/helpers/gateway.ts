import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { TokenService } from '../../lib/tokens/tokens';
import type { LimiterRedis } from '../../lib/rate-limit/window';
import { type AppOptions, createApp, type GatewayApp } from '../../gateway/app';
import { createGatewayServer } from '../../gateway/http-server';
import {
  DEFAULT_LIMITS,
  type LimitsConfig,
  type ShadowConfig,
  type TrustProxy,
} from '../../gateway/config';
import { createFixtures, type Fixtures, TOKEN_SECRET } from './fixtures';
import { captureLogs, type CapturedLogs } from './logs';
import { startRecordingUpstream, type RecordingUpstream } from './upstream';

/**
 * The sample gateway (`createApp`) listening on loopback in front of a recording upstream, with
 * the test fixtures' keys and a captured logger. `send()` talks to it over a real socket from a
 * chosen source address (any of 127.0.0.0/8, or ::1), so client addresses are real.
 */

export interface TestGatewayOptions {
  limits?: Partial<LimitsConfig>;
  redis?: LimiterRedis;
  redisPrefix?: string;
  trustProxy?: TrustProxy;
  /** Listen address: `'127.0.0.1'` (default) or `'::'` (dual stack: IPv4 clients appear as ::ffff:…). */
  host?: string;
  /** Frozen clock for tokens, in ms. */
  now?: () => number;
  tokenTtlSeconds?: number;
  upstreamTimeoutMs?: number;
  publicKeyHeader?: string;
  expectedInstances?: number;
  /** Keys to serve; defaults to fresh fixtures. Two gateways given the same fixtures share keys. */
  fixtures?: Fixtures;
  /** Rules in shadow mode. */
  shadow?: ShadowConfig;
  /** Idempotency keys: the sealing secret (two gateways sharing Redis need the same), routes, bounds. */
  idempotency?: AppOptions['idempotency'];
  /** Whether `/healthz` and `/readyz` are traced (not by default, as in the gateway). */
  traceProbes?: boolean;
  /** Whether the key lookup and the admission get spans of their own (not by default, as in the gateway). */
  traceSteps?: boolean;
  /** The secret-scanning endpoint, and the key store it looks reported tokens up in and writes to. */
  secretScanning?: AppOptions['secretScanning'];
  /**
   * Where the gateway forwards to, instead of its own recording upstream (which is still started,
   * and receives nothing): an upstream shared by two gateways, or a closed port.
   */
  upstreamUrl?: string;
}

export interface TestGateway {
  readonly app: GatewayApp;
  readonly url: string;
  readonly port: number;
  readonly fixtures: Fixtures;
  readonly upstream: RecordingUpstream;
  readonly logs: CapturedLogs;
  readonly tokens: TokenService;
  send(request: SendOptions): Promise<SendResult>;
  /** Stops the gateway's listener only (the upstream stays): a gateway that went down. */
  closeGatewayOnly(): Promise<void>;
  close(): Promise<void>;
}

export interface SendOptions {
  method?: string;
  path: string;
  headers?: Record<string, string | string[]>;
  /** An object is sent as JSON (with Content-Type unless given); a string or Buffer as is. */
  body?: unknown;
  /** Source address of the connection, e.g. `'127.0.0.2'`. */
  from?: string;
}

export interface SendResult {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly text: string;
  /** The parsed JSON body, or `undefined`. */
  readonly body: Record<string, unknown> | undefined;
}

export async function startTestGateway(options: TestGatewayOptions = {}): Promise<TestGateway> {
  const fixtures = options.fixtures ?? createFixtures();
  const upstream = await startRecordingUpstream();
  const logs = captureLogs();
  const tokens = new TokenService({
    secret: TOKEN_SECRET,
    ttlSeconds: options.tokenTtlSeconds ?? 1800,
    ...(options.now === undefined ? {} : { now: options.now }),
  });
  const app = createApp({
    keyStore: fixtures.ring,
    tokens,
    upstreamUrl: options.upstreamUrl ?? upstream.url,
    logger: logs.logger,
    redis: options.redis,
    redisPrefix: options.redisPrefix,
    limits: { ...DEFAULT_LIMITS, ...options.limits },
    trustProxy: options.trustProxy ?? false,
    upstreamTimeoutMs: options.upstreamTimeoutMs ?? 2000,
    publicKeyHeader: options.publicKeyHeader,
    expectedInstances: options.expectedInstances,
    shadow: options.shadow,
    idempotency: options.idempotency,
    traceProbes: options.traceProbes,
    traceSteps: options.traceSteps,
    secretScanning: options.secretScanning,
  });
  const host = options.host ?? '127.0.0.1';
  // The server `npm start` runs (Host optional, JSON parser errors), on an ephemeral port.
  const server = createGatewayServer(app).listen(0, host);
  await new Promise<void>((resolve) => server.once('listening', resolve));
  const { port } = server.address() as AddressInfo;
  const agent = new http.Agent({ keepAlive: false });
  const url = `http://127.0.0.1:${port}`;

  const send = (request: SendOptions): Promise<SendResult> =>
    new Promise((resolve, reject) => {
      const headers: Record<string, string | string[]> = { ...request.headers };
      let payload: Buffer | undefined;
      if (request.body !== undefined) {
        if (Buffer.isBuffer(request.body)) payload = request.body;
        else if (typeof request.body === 'string') payload = Buffer.from(request.body);
        else {
          payload = Buffer.from(JSON.stringify(request.body));
          if (!Object.keys(headers).some((name) => name.toLowerCase() === 'content-type')) {
            headers['content-type'] = 'application/json';
          }
        }
      }
      const target = request.from?.includes(':') === true ? '::1' : '127.0.0.1';
      const req = http.request(
        {
          host: target,
          port,
          method: request.method ?? 'GET',
          path: request.path,
          headers:
            payload === undefined
              ? headers
              : { ...headers, 'content-length': String(payload.length) },
          agent,
          ...(request.from === undefined ? {} : { localAddress: request.from }),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let body: Record<string, unknown> | undefined;
            try {
              body = JSON.parse(text) as Record<string, unknown>;
            } catch {
              body = undefined;
            }
            resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body });
          });
        },
      );
      req.on('error', reject);
      req.end(payload);
    });

  const stopListening = async (): Promise<void> => {
    if (!server.listening) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) =>
      server.close(() => {
        resolve();
      }),
    );
  };

  return {
    app,
    url,
    port,
    fixtures,
    upstream,
    logs,
    tokens,
    send,
    closeGatewayOnly: stopListening,
    close: async () => {
      await stopListening();
      app.shutdown();
      agent.destroy();
      await upstream.close();
    },
  };
}

export function bearer(value: string): Record<string, string> {
  return { authorization: `Bearer ${value}` };
}
