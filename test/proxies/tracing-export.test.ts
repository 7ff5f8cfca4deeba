import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { allSecrets, createFixtures } from '../helpers/fixtures';
import { distScript, httpRequest, NodeProcess } from '../helpers/process';
import { describeWithProxy, type RunningProxy, startProxy } from '../helpers/proxies';
import { freePort } from '../helpers/redis';
import { parseTraceparent, traceparent } from '../helpers/tracing';
import { type RecordingUpstream, startRecordingUpstream } from '../helpers/upstream';

/**
 * The built gateway exporting its traces over OTLP/HTTP (JSON) to a receiver on loopback,
 * configured by the standard OTEL_* variables only: one request through the gateway's own proxy
 * and one through nginx (deploy/nginx, asking the forward-auth door) each arrive as one trace with
 * the caller, the gateway and the upstream in it, flushed when the gateway stops, with no
 * credential anywhere in what is exported. With no endpoint set, nothing is exported.
 */

interface OtlpAttribute {
  readonly key: string;
  readonly value: Record<string, unknown>;
}

interface OtlpSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId?: string;
  readonly name: string;
  readonly kind: number;
  readonly attributes?: readonly OtlpAttribute[];
}

interface Receiver {
  readonly url: string;
  /** Every export request's body, as received. */
  readonly bodies: string[];
  spans(): OtlpSpan[];
  close(): Promise<void>;
}

const SERVER = 2;
const CLIENT = 3;

async function startReceiver(): Promise<Receiver> {
  const bodies: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces') {
        bodies.push(Buffer.concat(chunks).toString('utf8'));
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    bodies,
    spans: () =>
      bodies.flatMap((body) => {
        const parsed = JSON.parse(body) as {
          resourceSpans?: { scopeSpans?: { spans?: OtlpSpan[] }[] }[];
        };
        return (parsed.resourceSpans ?? []).flatMap((resource) =>
          (resource.scopeSpans ?? []).flatMap((scope) => scope.spans ?? []),
        );
      }),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  };
}

function attribute(span: OtlpSpan, key: string): unknown {
  const found = span.attributes?.find((each) => each.key === key);
  if (found === undefined) return undefined;
  const { value } = found;
  if ('intValue' in value) return Number(value.intValue);
  return value.stringValue ?? value.boolValue ?? value.arrayValue;
}

function randomId(bytes: number): string {
  return [...crypto.getRandomValues(new Uint8Array(bytes))]
    .map((byte) => byte.toString(16).padStart(2, '0'))
    .join('');
}

describeWithProxy('nginx')('the built gateway exporting its traces over OTLP/HTTP', () => {
  const fixtures = createFixtures();
  let directory: string;
  let receiver: Receiver;
  let upstream: RecordingUpstream;
  let keysFile: string;

  beforeAll(async () => {
    directory = mkdtempSync(path.join(os.tmpdir(), 'tollgate-tracing-'));
    keysFile = path.join(directory, 'keys.json');
    writeFileSync(keysFile, JSON.stringify(fixtures.document));
    receiver = await startReceiver();
    upstream = await startRecordingUpstream();
  });

  afterAll(async () => {
    await upstream.close();
    await receiver.close();
    rmSync(directory, { recursive: true, force: true });
  });

  async function startGateway(env: Record<string, string>) {
    const port = await freePort();
    const gateway = new NodeProcess(distScript('gateway/server.js'), [], {
      PORT: String(port),
      HOST: '127.0.0.1',
      TOLLGATE_KEYS_FILE: keysFile,
      TOLLGATE_UPSTREAM_URL: upstream.url,
      TOLLGATE_TRUST_PROXY: '127.0.0.1',
      ...env,
    });
    await gateway.waitForEntry((entry) => entry.event === 'gateway.started');
    return { gateway, port };
  }

  it('exports one trace per request, through its own proxy and through nginx, on stopping', async () => {
    const { gateway, port } = await startGateway({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: 'tollgate-under-test',
      TOLLGATE_TRACE_STEPS: 'true',
    });
    let nginx: RunningProxy | undefined;
    try {
      expect(gateway.entries().find((entry) => entry.event === 'gateway.started')).toMatchObject({
        tracing: 'otlp http/json',
      });
      const key = fixtures.keys.level2;
      const direct = { trace: randomId(16), span: randomId(8) };
      // The caller says "not sampled"; the gateway's sampler records it anyway.
      const proxied = await httpRequest({
        port,
        path: '/api/v1/wallets/?page=2',
        headers: {
          authorization: `Bearer ${key.secretKey}`,
          traceparent: traceparent(direct.trace, direct.span, false),
        },
      });
      expect(proxied.status).toBe(200);
      const directUpstream = parseTraceparent(upstream.requests.at(-1)?.headers.traceparent);
      expect(directUpstream?.traceId).toBe(direct.trace);

      nginx = await startProxy('nginx', {
        gateway: `127.0.0.1:${port}`,
        payments: new URL(upstream.url).host,
      });
      const viaNginx = { trace: randomId(16), span: randomId(8) };
      const forwarded = await httpRequest({
        port: nginx.port,
        method: 'POST',
        path: '/api/v1/payouts/',
        json: { amount: 10 },
        headers: {
          authorization: `Bearer ${key.secretKey}`,
          traceparent: traceparent(viaNginx.trace, viaNginx.span, true),
        },
      });
      expect(forwarded.status).toBe(200);
      const nginxUpstream = parseTraceparent(upstream.requests.at(-1)?.headers.traceparent);
      expect(nginxUpstream?.traceId).toBe(viaNginx.trace);
      await nginx.stop();
      nginx = undefined;

      // Stopping flushes the spans still buffered.
      gateway.kill('SIGTERM');
      expect((await gateway.exited).code).toBe(0);
      const spans = receiver.spans();
      const body = receiver.bodies.join('\n');
      const lines = gateway.entries().filter((entry) => entry.event === 'http.request');
      expect(lines.map((line) => line.trace_id)).toEqual([direct.trace, viaNginx.trace]);
      expect(body).toContain('tollgate-under-test');

      // Through the gateway's proxy: caller -> SERVER -> key lookup, admission, CLIENT -> upstream.
      const directSpans = spans.filter((span) => span.traceId === direct.trace);
      const server = directSpans.find((span) => span.kind === SERVER);
      const client = directSpans.find((span) => span.kind === CLIENT);
      expect(server?.name).toBe('GET /api/v1/wallets/');
      expect(server?.parentSpanId).toBe(direct.span);
      expect(attribute(server!, 'http.route')).toBe('/api/v1/wallets/');
      expect(attribute(server!, 'url.path')).toBe('/api/v1/wallets/');
      expect(attribute(server!, 'http.response.status_code')).toBe(200);
      expect(attribute(server!, 'tollgate.outcome')).toBe('allowed');
      expect(attribute(server!, 'tollgate.key.id')).toBe(key.id);
      expect(attribute(server!, 'tollgate.account.id')).toBe(key.accountId);
      expect(client?.parentSpanId).toBe(server?.spanId);
      expect(directUpstream?.spanId).toBe(client?.spanId);
      for (const name of ['tollgate.key_lookup', 'tollgate.admission']) {
        const child = directSpans.find((span) => span.name === name);
        expect(child?.parentSpanId).toBe(server?.spanId);
      }
      expect(body).not.toContain('page=2');

      // Through nginx: caller -> the forward-auth door's SERVER span -> the upstream nginx called.
      const nginxSpans = spans.filter((span) => span.traceId === viaNginx.trace);
      const authServer = nginxSpans.find((span) => span.kind === SERVER);
      expect(authServer?.name).toBe('POST /api/v1/payouts/');
      expect(authServer?.parentSpanId).toBe(viaNginx.span);
      expect(attribute(authServer!, 'tollgate.forward_auth.dialect')).toBe('auth-request');
      expect(attribute(authServer!, 'tollgate.outcome')).toBe('allowed');
      expect(nginxUpstream?.spanId).toBe(authServer?.spanId);
      expect(nginxSpans.find((span) => span.name === 'tollgate.key_lookup')?.parentSpanId).toBe(
        authServer?.spanId,
      );

      for (const secret of allSecrets(fixtures)) expect(body).not.toContain(secret);
      expect(body).not.toMatch(/bearer/i);
    } finally {
      await nginx?.stop();
      await gateway.stop();
    }
  });

  it("exports none of the operators' probes, and a refusal of a credential in the query string with its route, outcome and code", async () => {
    const adminPort = await freePort();
    const { gateway, port } = await startGateway({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      TOLLGATE_ADMIN_PORT: String(adminPort),
    });
    const before = receiver.spans().length;
    try {
      await gateway.waitForEntry((entry) => entry.event === 'admin.started');
      // A Prometheus and a load balancer at work: 20 calls to each probe.
      for (let round = 0; round < 20; round += 1) {
        expect((await httpRequest({ port, path: '/healthz' })).status).toBe(200);
        expect((await httpRequest({ port, path: '/readyz' })).status).toBeLessThan(600);
        expect((await httpRequest({ port: adminPort, path: '/readyz' })).status).toBeLessThan(600);
        expect((await httpRequest({ port: adminPort, path: '/metrics' })).status).toBe(200);
      }
      const key = fixtures.keys.level2;
      const refused = { trace: randomId(16), span: randomId(8) };
      const answer = await httpRequest({
        port,
        path: `/api/v1/wallets/?api_key=${key.secretKey}`,
        headers: { traceparent: traceparent(refused.trace, refused.span, true) },
      });
      expect(answer.status).toBe(400);
      const metrics = await httpRequest({ port: adminPort, path: '/metrics' });
      expect(metrics.text).toMatch(
        /^tollgate_decisions_total\{route="\/api\/v1\/wallets\/",outcome="refused",code="invalid_request",rate_limits="memory"\} 1$/m,
      );

      // Stopping flushes the spans still buffered.
      gateway.kill('SIGTERM');
      expect((await gateway.exited).code).toBe(0);
      const spans = receiver.spans().slice(before);
      const probes = spans.filter((span) =>
        ['/healthz', '/readyz', '/metrics'].includes(String(attribute(span, 'url.path'))),
      );
      expect(probes).toEqual([]);
      expect(spans.filter((span) => span.kind === SERVER)).toHaveLength(1);
      const server = spans.find((span) => span.traceId === refused.trace && span.kind === SERVER);
      expect(server?.name).toBe('GET /api/v1/wallets/');
      expect(server?.parentSpanId).toBe(refused.span);
      expect(attribute(server!, 'http.route')).toBe('/api/v1/wallets/');
      expect(attribute(server!, 'http.response.status_code')).toBe(400);
      expect(attribute(server!, 'tollgate.outcome')).toBe('refused');
      expect(attribute(server!, 'tollgate.error.code')).toBe('invalid_request');
      const body = receiver.bodies.join('\n');
      for (const secret of allSecrets(fixtures)) expect(body).not.toContain(secret);
      expect(body).not.toContain('api_key');
    } finally {
      await gateway.stop();
    }
  });

  it('exports nothing and sends no trace context of its own with no endpoint set', async () => {
    const before = receiver.bodies.length;
    const { gateway, port } = await startGateway({ OTEL_SERVICE_NAME: 'tollgate-untraced' });
    try {
      expect(gateway.entries().find((entry) => entry.event === 'gateway.started')).toMatchObject({
        tracing: 'off',
      });
      const sent = traceparent(randomId(16), randomId(8), true);
      const result = await httpRequest({
        port,
        path: '/api/v1/wallets/',
        headers: {
          authorization: `Bearer ${fixtures.keys.level1.secretKey}`,
          traceparent: sent,
        },
      });
      expect(result.status).toBe(200);
      // The caller's own context goes through untouched, as before tracing existed.
      expect(upstream.requests.at(-1)?.headers.traceparent).toBe(sent);
      gateway.kill('SIGTERM');
      expect((await gateway.exited).code).toBe(0);
      expect(receiver.bodies.length).toBe(before);
      const line = gateway.entries().find((entry) => entry.event === 'http.request');
      expect(line).toBeDefined();
      expect(line).not.toHaveProperty('trace_id');
    } finally {
      await gateway.stop();
    }
  });
});
