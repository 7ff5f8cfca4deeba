import { createHash, generateKeyPairSync, sign } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { context, SpanKind, trace } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace';
import express from 'express';
import { tollgate } from '../../lib';
import { startAdminGateway } from '../helpers/admin-gateway';
import { allSecrets, createFixtures } from '../helpers/fixtures';
import { captureLogs } from '../helpers/logs';
import { httpRequest } from '../helpers/process';
import { askAs } from '../helpers/forward-auth';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import {
  installTestTracing,
  parseTraceparent,
  spanTexts,
  type TestTracing,
  traceparent,
} from '../helpers/tracing';
import { samples, valueOf } from '../helpers/metrics';

/**
 * OpenTelemetry tracing of each door with the spans kept in memory: the request's server span
 * named by its route, the key lookup's and the admission's spans under it when asked for, the upstream call as a
 * CLIENT span whose context the upstream receives, the forward-auth door handing its span back to
 * the proxy, the caller's sampled flag not trusted, and never a credential in any span.
 */

const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

function byName(spans: readonly ReadableSpan[], name: string): ReadableSpan {
  const span = spans.find((each) => each.name === name);
  if (span === undefined) {
    throw new Error(`no span ${name}; got ${spans.map((each) => each.name).join(', ')}`);
  }
  return span;
}

function serverSpan(spans: readonly ReadableSpan[]): ReadableSpan {
  const servers = spans.filter((span) => span.kind === SpanKind.SERVER);
  expect(servers).toHaveLength(1);
  return servers[0]!;
}

function parentOf(span: ReadableSpan): string | undefined {
  return span.parentSpanContext?.spanId;
}

/** Every span of one trace, once `count` of them have ended. */
async function traceOf(tracing: TestTracing, traceId: string, count: number) {
  const spans = await tracing.waitFor(
    (all) => all.filter((span) => span.spanContext().traceId === traceId).length >= count,
  );
  return spans.filter((span) => span.spanContext().traceId === traceId);
}

function expectNoCredential(spans: readonly ReadableSpan[], credentials: readonly string[]): void {
  const texts = spanTexts(spans).join('\n');
  for (const credential of credentials) expect(texts).not.toContain(credential);
  expect(texts).not.toMatch(/bearer/i);
}

function randomTraceId(): string {
  return [...crypto.getRandomValues(new Uint8Array(16))]
    .map((byte) => byte.toString(16).padStart(2, '0'))
    .join('');
}

describe('tracing through the gateway (protect() and the proxy)', () => {
  let tracing: TestTracing;
  let gateway: TestGateway;

  beforeAll(async () => {
    tracing = installTestTracing();
    gateway = await startTestGateway({ traceSteps: true });
  });

  afterAll(async () => {
    await gateway.close();
    await tracing.uninstall();
  });

  it('joins the caller trace, names the span by its route and passes the upstream call context on', async () => {
    const key = gateway.fixtures.keys.level1;
    // The caller says "not sampled": the local sampler (always on) records it all the same.
    const result = await gateway.send({
      path: '/api/v1/transactions/tx_42/?limit=5',
      headers: {
        ...bearer(key.secretKey),
        traceparent: traceparent(CALLER_TRACE, CALLER_SPAN, false),
        tracestate: 'vendor=caller',
      },
    });
    expect(result.status).toBe(200);
    const spans = await traceOf(tracing, CALLER_TRACE, 4);
    const server = serverSpan(spans);
    expect(server.name).toBe('GET /api/v1/transactions/:id/');
    expect(parentOf(server)).toBe(CALLER_SPAN);
    expect(server.parentSpanContext?.isRemote).toBe(true);
    expect(server.attributes).toMatchObject({
      'http.request.method': 'GET',
      'http.route': '/api/v1/transactions/:id/',
      'url.path': '/api/v1/transactions/tx_42/',
      'http.response.status_code': 200,
      'client.address': '127.0.0.1',
      'server.address': '127.0.0.1',
      'server.port': gateway.port,
      'tollgate.outcome': 'allowed',
      'tollgate.account.id': key.accountId,
      'tollgate.key.id': key.id,
      'tollgate.credential': 'secret',
      'tollgate.policy': '/api/v1/transactions/:id/',
    });
    expect(JSON.stringify(server.attributes)).not.toContain('limit=5');

    const lookup = byName(spans, 'tollgate.key_lookup');
    const admission = byName(spans, 'tollgate.admission');
    expect(parentOf(lookup)).toBe(server.spanContext().spanId);
    expect(lookup.attributes['tollgate.key.id']).toBe(key.id);
    expect(parentOf(admission)).toBe(server.spanContext().spanId);
    expect(admission.attributes).toMatchObject({
      'tollgate.limit.scopes': ['authenticated'],
      'tollgate.rate_limits': 'memory',
    });

    const client = spans.find((span) => span.kind === SpanKind.CLIENT);
    expect(client?.name).toBe('GET /api/v1/transactions/:id/');
    expect(parentOf(client!)).toBe(server.spanContext().spanId);
    expect(client!.attributes).toMatchObject({
      'http.request.method': 'GET',
      'http.response.status_code': 200,
      'server.address': '127.0.0.1',
      'url.path': '/api/v1/transactions/tx_42/',
    });

    // The upstream's parent is the upstream call, in the caller's trace; the caller's tracestate
    // stays with its trace.
    const upstreamRequest = gateway.upstream.requests.at(-1);
    const sent = parseTraceparent(upstreamRequest?.headers.traceparent);
    expect(sent).toEqual({
      traceId: CALLER_TRACE,
      spanId: client!.spanContext().spanId,
      sampled: true,
    });
    expect(upstreamRequest?.headers.tracestate).toBe('vendor=caller');

    // The access log line names the trace.
    const line = gateway.logs
      .entries()
      .find(
        (entry) => entry.event === 'http.request' && entry.path === '/api/v1/transactions/tx_42/',
      );
    expect(line).toMatchObject({
      trace_id: CALLER_TRACE,
      span_id: server.spanContext().spanId,
    });
    expectNoCredential(spans, allSecrets(gateway.fixtures));
  });

  it('records a refusal with its code, and makes no upstream call', async () => {
    const traceId = randomTraceId();
    const result = await gateway.send({
      path: '/api/v1/wallets/',
      headers: {
        authorization: 'Bearer sk_test_not_a_key_0123456789abcdef',
        traceparent: traceparent(traceId, CALLER_SPAN, true),
      },
    });
    expect(result.status).toBe(401);
    const spans = await traceOf(tracing, traceId, 2);
    const server = serverSpan(spans);
    expect(server.name).toBe('GET /api/v1/wallets/');
    expect(server.attributes).toMatchObject({
      'http.response.status_code': 401,
      'tollgate.outcome': 'refused',
      'tollgate.error.code': 'invalid_api_key',
    });
    expect(server.attributes['error.type']).toBeUndefined();
    expect(byName(spans, 'tollgate.key_lookup').attributes['tollgate.error.code']).toBe(
      'invalid_api_key',
    );
    expect(spans.some((span) => span.kind === SpanKind.CLIENT)).toBe(false);
    expectNoCredential(spans, ['sk_test_not_a_key_0123456789abcdef']);
  });

  it('starts a trace of its own for a request without trace context, and ends the span of an aborted one', async () => {
    tracing.exporter.reset();
    gateway.upstream.respond = () => {
      // Never answers: the client gives up first.
    };
    const request = http.request({
      host: '127.0.0.1',
      port: gateway.port,
      path: '/api/v1/wallets/',
      headers: bearer(gateway.fixtures.keys.level2.secretKey),
    });
    request.on('error', () => undefined);
    const before = gateway.upstream.requests.length;
    request.end();
    // Wait for the upstream to receive it, then hang up.
    const deadline = Date.now() + 2000;
    while (gateway.upstream.requests.length === before && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    request.destroy();
    const spans = await tracing.waitFor(
      (all) =>
        all.some((span) => span.kind === SpanKind.SERVER) &&
        all.some((span) => span.kind === SpanKind.CLIENT),
    );
    const server = serverSpan(spans);
    expect(server.name).toBe('GET /api/v1/wallets/');
    expect(server.parentSpanContext).toBeUndefined();
    expect(server.attributes['tollgate.client_aborted']).toBe(true);
    const client = spans.find((span) => span.kind === SpanKind.CLIENT)!;
    expect(client.attributes['error.type']).toBe('client_closed');
    // Each span ended once: one of each in the exporter, however long we wait.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(tracing.spans().filter((span) => span.kind === SpanKind.SERVER)).toHaveLength(1);
    gateway.upstream.reset();
  });

  it('by default records a proxied request as two spans, its own and the upstream call, the findings on its own', async () => {
    const plain = await startTestGateway();
    try {
      const key = plain.fixtures.keys.level1;
      const traceId = randomTraceId();
      const result = await plain.send({
        path: '/api/v1/wallets/',
        headers: { ...bearer(key.secretKey), traceparent: traceparent(traceId, CALLER_SPAN, true) },
      });
      expect(result.status).toBe(200);
      await traceOf(tracing, traceId, 2);
      // Nothing more arrives: the key lookup and the admission made no span.
      await new Promise((resolve) => setTimeout(resolve, 100));
      const spans = tracing.spans().filter((span) => span.spanContext().traceId === traceId);
      expect(spans.map((span) => span.kind).sort()).toEqual(
        [SpanKind.SERVER, SpanKind.CLIENT].sort(),
      );
      expect(serverSpan(spans).attributes).toMatchObject({
        'tollgate.outcome': 'allowed',
        'tollgate.account.id': key.accountId,
        'tollgate.key.id': key.id,
      });
    } finally {
      await plain.close();
    }
  });
});

/** The refusals of `route` with `code` in `tollgate_decisions_total`, as /metrics serves them. */
async function decisionCount(gateway: TestGateway, route: string, code: string): Promise<number> {
  const counted = valueOf(samples(await gateway.app.metrics.text()), 'tollgate_decisions_total', {
    route,
    outcome: 'refused',
    code,
    rate_limits: 'memory',
  });
  return counted ?? 0;
}

describe('refusals made outside the gate decision', () => {
  let tracing: TestTracing;
  let gateway: TestGateway;

  beforeAll(async () => {
    tracing = installTestTracing();
    gateway = await startTestGateway({ trustProxy: ['127.0.0.1'] });
  });

  afterAll(async () => {
    await gateway.close();
    await tracing.uninstall();
  });

  it('name a credential in the query string by its route, with the outcome and the code, and count it', async () => {
    const key = gateway.fixtures.keys.level2;
    const before = await decisionCount(gateway, '/api/v1/wallets/', 'invalid_request');
    const traceId = randomTraceId();
    const result = await gateway.send({
      path: `/api/v1/wallets/?api_key=${key.secretKey}`,
      headers: { traceparent: traceparent(traceId, CALLER_SPAN, true) },
    });
    expect(result.status).toBe(400);
    expect(result.body?.code).toBe('invalid_request');
    const server = serverSpan(await traceOf(tracing, traceId, 1));
    expect(server.name).toBe('GET /api/v1/wallets/');
    expect(server.attributes).toMatchObject({
      'http.route': '/api/v1/wallets/',
      'http.response.status_code': 400,
      'tollgate.policy': '/api/v1/wallets/',
      'tollgate.outcome': 'refused',
      'tollgate.error.code': 'invalid_request',
    });
    expect(await decisionCount(gateway, '/api/v1/wallets/', 'invalid_request')).toBe(before + 1);
    // The key sent where it leaks is reported, and appears in no span.
    expect(
      gateway.logs
        .entries()
        .some((entry) => entry.event === 'security.leaked_secret_key' && entry.key_id === key.id),
    ).toBe(true);
    expectNoCredential(tracing.spans(), [key.secretKey]);
  });

  it('refuse a credential in the query string before a body is read, on a route that reads one', async () => {
    const key = gateway.fixtures.keys.level2;
    const traceId = randomTraceId();
    const result = await gateway.send({
      method: 'POST',
      path: `/api/v1/payouts/?access_token=${key.secretKey}`,
      headers: {
        'content-type': 'application/json',
        traceparent: traceparent(traceId, CALLER_SPAN, true),
      },
      body: '{"amount": 10', // never read: an unreadable body would be another 400
    });
    expect(result.status).toBe(400);
    expect(result.body?.message).toMatch(/query string/);
    const server = serverSpan(await traceOf(tracing, traceId, 1));
    expect(server.attributes).toMatchObject({
      'http.route': '/api/v1/payouts/',
      'tollgate.error.code': 'invalid_request',
    });
  });

  it('carry the code of an answer no route gives, and of a body that cannot be read', async () => {
    const cases = [
      { method: 'GET', path: '/api/v1/nowhere/', status: 404, code: 'not_found', route: undefined },
      {
        method: 'DELETE',
        path: '/api/v1/wallets/',
        status: 405,
        code: 'method_not_allowed',
        route: undefined,
      },
      {
        method: 'GET',
        path: `/api/v1/nowhere/?api_key=${gateway.fixtures.keys.level1.secretKey}`,
        status: 400,
        code: 'invalid_request',
        route: undefined,
      },
      {
        method: 'POST',
        path: '/api/v1/payouts/',
        status: 400,
        code: 'invalid_request',
        route: '/api/v1/payouts/',
        body: '{"amount": 10',
      },
    ];
    for (const each of cases) {
      const traceId = randomTraceId();
      const result = await gateway.send({
        method: each.method,
        path: each.path,
        headers: {
          ...bearer(gateway.fixtures.keys.level2.secretKey),
          'content-type': 'application/json',
          traceparent: traceparent(traceId, CALLER_SPAN, true),
        },
        ...(each.body === undefined ? {} : { body: each.body }),
      });
      expect({ path: each.path, status: result.status }).toEqual({
        path: each.path,
        status: each.status,
      });
      const server = serverSpan(await traceOf(tracing, traceId, 1));
      expect(server.attributes['tollgate.outcome']).toBe('refused');
      expect(server.attributes['tollgate.error.code']).toBe(each.code);
      expect(server.attributes['http.route']).toBe(each.route);
    }
  });

  it('carry the code of a forward-auth refusal that no route decides', async () => {
    for (const [target, status, code] of [
      ['/api/v1/nowhere/', 404, 'not_found'],
      [
        `/api/v1/nowhere/?client_secret=${gateway.fixtures.keys.level1.secretKey}`,
        400,
        'invalid_request',
      ],
      [
        `/api/v1/wallets/?client_secret=${gateway.fixtures.keys.level1.secretKey}`,
        400,
        'invalid_request',
      ],
    ] as const) {
      const traceId = randomTraceId();
      const answer = await askAs('traefik', gateway, {
        method: 'GET',
        target,
        clientIp: '198.51.100.7',
        headers: { traceparent: traceparent(traceId, CALLER_SPAN, true) },
      });
      expect({ target, status: answer.status }).toEqual({ target, status });
      const server = serverSpan(await traceOf(tracing, traceId, 1));
      expect(server.attributes).toMatchObject({
        'tollgate.outcome': 'refused',
        'tollgate.error.code': code,
      });
    }
    expectNoCredential(tracing.spans(), allSecrets(gateway.fixtures));
  });
});

describe('tracing the secret-scanning endpoint', () => {
  const PATH = '/github/secret-scanning';
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const identifier = createHash('sha256')
    .update(publicKey.export({ type: 'spki', format: 'der' }))
    .digest('hex');
  let directory: string;
  let tracing: TestTracing;
  let gateway: TestGateway;

  beforeAll(async () => {
    directory = mkdtempSync(path.join(os.tmpdir(), 'tollgate-scanning-trace-'));
    const keysFile = path.join(directory, 'github-keys.json');
    writeFileSync(
      keysFile,
      JSON.stringify({
        public_keys: [
          {
            key_identifier: identifier,
            key: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
            is_current: true,
          },
        ],
      }),
    );
    tracing = installTestTracing();
    const fixtures = createFixtures();
    const refuseWrites = (): Promise<never> =>
      Promise.reject(new Error('a report of an unknown token changes no key'));
    gateway = await startTestGateway({
      fixtures,
      secretScanning: {
        config: {
          path: PATH,
          keysUrl: undefined,
          keysFile,
          action: 'revoke',
          graceSeconds: 0,
          limit: 100,
        },
        // The fixtures' key ring answers the lookups; these reports name no key, so nothing is written.
        writer: {
          peekBySecretKey: (secretKey) => fixtures.ring.findBySecretKey(secretKey),
          findByPublishableKey: (publishableKey) =>
            fixtures.ring.findByPublishableKey(publishableKey),
          revoke: refuseWrites,
          roll: refuseWrites,
        },
      },
    });
  });

  afterAll(async () => {
    await gateway.close();
    await tracing.uninstall();
    rmSync(directory, { recursive: true, force: true });
  });

  const post = async (body: Buffer, signature: string) => {
    const traceId = randomTraceId();
    const result = await gateway.send({
      method: 'POST',
      path: PATH,
      body,
      headers: {
        'content-type': 'application/json',
        'github-public-key-identifier': identifier,
        'github-public-key-signature': signature,
        traceparent: traceparent(traceId, CALLER_SPAN, true),
      },
    });
    return { result, server: serverSpan(await traceOf(tracing, traceId, 1)) };
  };

  it('names a report by its route, allowed once its signature is verified', async () => {
    const body = Buffer.from(
      JSON.stringify([
        { token: 'sk_live_not_a_key_of_ours_0123456789', type: 'tollgate_secret_key' },
      ]),
    );
    const signature = sign('sha256', body, { key: privateKey, dsaEncoding: 'der' }).toString(
      'base64',
    );
    const { result, server } = await post(body, signature);
    expect(result.status).toBe(200);
    expect(server.name).toBe(`POST ${PATH}`);
    expect(server.attributes).toMatchObject({
      'http.route': PATH,
      'tollgate.outcome': 'allowed',
    });
    expect(server.attributes['tollgate.error.code']).toBeUndefined();
  });

  it('names a report whose signature fails by its route, refused with its code', async () => {
    const body = Buffer.from('[]');
    const { result, server } = await post(body, Buffer.from('not a signature').toString('base64'));
    expect(result.status).toBe(401);
    expect(server.name).toBe(`POST ${PATH}`);
    expect(server.attributes).toMatchObject({
      'http.route': PATH,
      'tollgate.outcome': 'refused',
      'tollgate.error.code': 'invalid_credentials',
    });
  });
});

/** The server spans of requests to `path`. */
function spansOfPath(spans: readonly ReadableSpan[], path: string): ReadableSpan[] {
  return spans.filter(
    (span) => span.kind === SpanKind.SERVER && span.attributes['url.path'] === path,
  );
}

describe("operators' probes", () => {
  let tracing: TestTracing;

  beforeAll(() => {
    tracing = installTestTracing();
  });

  afterAll(async () => {
    await tracing.uninstall();
  });

  it('leave /healthz and /readyz untraced by default, and other requests traced', async () => {
    const gateway = await startTestGateway();
    try {
      tracing.exporter.reset();
      for (const path of ['/healthz', '/readyz']) {
        expect((await gateway.send({ path })).status).toBeLessThan(600);
      }
      const traceId = randomTraceId();
      const wallets = await gateway.send({
        path: '/api/v1/wallets/',
        headers: {
          ...bearer(gateway.fixtures.keys.level2.secretKey),
          traceparent: traceparent(traceId, CALLER_SPAN, true),
        },
      });
      expect(wallets.status).toBe(200);
      // The probes answered before the traced request, whose span has ended.
      const spans = await traceOf(tracing, traceId, 1);
      expect(spans.length).toBeGreaterThan(0);
      expect(spansOfPath(tracing.spans(), '/healthz')).toEqual([]);
      expect(spansOfPath(tracing.spans(), '/readyz')).toEqual([]);
    } finally {
      await gateway.close();
    }
  });

  it('are traced when asked for', async () => {
    const gateway = await startTestGateway({ traceProbes: true });
    try {
      tracing.exporter.reset();
      expect((await gateway.send({ path: '/healthz' })).status).toBe(200);
      const spans = await tracing.waitFor((all) => spansOfPath(all, '/healthz').length > 0);
      expect(spansOfPath(spans, '/healthz')).toHaveLength(1);
    } finally {
      await gateway.close();
    }
  });

  it("leave the admin listener's /metrics and /readyz untraced by default", async () => {
    const logs = captureLogs();
    const adminToken = 'admin-token-for-tracing-0123456789';
    const admin = await startAdminGateway(createFixtures().document, adminToken, logs.logger);
    try {
      tracing.exporter.reset();
      for (const path of ['/metrics', '/readyz']) {
        await httpRequest({ port: admin.adminPort, path });
      }
      const traceId = randomTraceId();
      const usage = await httpRequest({
        port: admin.adminPort,
        path: '/admin/v1/accounts/acct_open/usage',
        headers: {
          authorization: `Bearer ${adminToken}`,
          traceparent: traceparent(traceId, CALLER_SPAN, true),
        },
      });
      expect(usage.status).toBe(200);
      expect(await traceOf(tracing, traceId, 1)).toHaveLength(1);
      expect(spansOfPath(tracing.spans(), '/metrics')).toEqual([]);
      expect(spansOfPath(tracing.spans(), '/readyz')).toEqual([]);
    } finally {
      await admin.stop();
    }
  });
});

describe('tracing through forward authentication', () => {
  let tracing: TestTracing;
  let gateway: TestGateway;

  beforeAll(async () => {
    tracing = installTestTracing();
    gateway = await startTestGateway({ trustProxy: ['127.0.0.1'], traceSteps: true });
  });

  afterAll(async () => {
    await gateway.close();
    await tracing.uninstall();
  });

  it('joins the proxy trace and answers the context of its span for the upstream', async () => {
    const key = gateway.fixtures.keys.level2;
    const answer = await askAs('nginx', gateway, {
      method: 'POST',
      target: '/api/v1/payouts/?amount=10',
      clientIp: '198.51.100.7',
      headers: {
        ...bearer(key.secretKey),
        traceparent: traceparent(CALLER_TRACE, CALLER_SPAN, true),
      },
    });
    expect(answer.status).toBe(200);
    const spans = await traceOf(tracing, CALLER_TRACE, 3);
    const server = byName(spans, 'POST /api/v1/payouts/');
    expect(parentOf(server)).toBe(CALLER_SPAN);
    expect(server.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/api/v1/payouts/',
      'url.path': '/api/v1/payouts/',
      'http.response.status_code': 200,
      'client.address': '198.51.100.7',
      'tollgate.forward_auth.dialect': 'auth-request',
      'tollgate.outcome': 'allowed',
      'tollgate.key.id': key.id,
    });
    expect(parentOf(byName(spans, 'tollgate.key_lookup'))).toBe(server.spanContext().spanId);
    expect(parseTraceparent(answer.headers.traceparent)).toEqual({
      traceId: CALLER_TRACE,
      spanId: server.spanContext().spanId,
      sampled: true,
    });
    expectNoCredential(spans, allSecrets(gateway.fixtures));
  });

  it('hands no context back with a refusal, which the client would see', async () => {
    const answer = await askAs('traefik', gateway, {
      method: 'GET',
      target: '/api/v1/wallets/',
      clientIp: '198.51.100.7',
      headers: { traceparent: traceparent(randomTraceId(), CALLER_SPAN, true) },
    });
    expect(answer.status).toBe(401);
    expect(answer.headers.traceparent).toBeUndefined();
  });

  it('answers the context of its span to Envoy, which passes it upstream', async () => {
    const traceId = randomTraceId();
    const answer = await askAs('envoy', gateway, {
      method: 'GET',
      target: '/api/v1/wallets/',
      clientIp: '198.51.100.7',
      headers: {
        ...bearer(gateway.fixtures.keys.level1.secretKey),
        traceparent: traceparent(traceId, CALLER_SPAN, true),
      },
    });
    expect(answer.status).toBe(200);
    const spans = await traceOf(tracing, traceId, 3);
    const server = byName(spans, 'GET /api/v1/wallets/');
    expect(server.attributes['tollgate.forward_auth.dialect']).toBe('ext-authz');
    expect(parseTraceparent(answer.headers.traceparent)?.spanId).toBe(server.spanContext().spanId);
  });
});

describe('the sampling rule', () => {
  it('keeps the caller trace but lets the local sampler decide: a sampled flag records nothing at ratio 0', async () => {
    const tracing = installTestTracing({ sampler: 'parentbased_traceidratio', ratio: 0 });
    const gateway = await startTestGateway();
    try {
      const result = await gateway.send({
        path: '/api/v1/wallets/',
        headers: {
          ...bearer(gateway.fixtures.keys.level1.secretKey),
          traceparent: traceparent(CALLER_TRACE, CALLER_SPAN, true),
        },
      });
      expect(result.status).toBe(200);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(tracing.spans()).toHaveLength(0);
      // The upstream stays in the caller's trace, told it is not sampled.
      const sent = parseTraceparent(gateway.upstream.requests.at(-1)?.headers.traceparent);
      expect(sent?.traceId).toBe(CALLER_TRACE);
      expect(sent?.sampled).toBe(false);
      const line = gateway.logs.entries().find((entry) => entry.event === 'http.request');
      expect(line).toBeDefined();
      expect(line).not.toHaveProperty('trace_id');
    } finally {
      await gateway.close();
      await tracing.uninstall();
    }
  });

  it('follows the caller sampled flag when remote sampling is trusted', async () => {
    const tracing = installTestTracing({
      sampler: 'parentbased_traceidratio',
      ratio: 0,
      trustRemoteSampling: true,
    });
    const gateway = await startTestGateway();
    try {
      await gateway.send({
        path: '/api/v1/wallets/',
        headers: {
          ...bearer(gateway.fixtures.keys.level1.secretKey),
          traceparent: traceparent(CALLER_TRACE, CALLER_SPAN, true),
        },
      });
      const spans = await traceOf(tracing, CALLER_TRACE, 2);
      expect(spans.map((span) => span.name)).toContain('GET /api/v1/wallets/');
    } finally {
      await gateway.close();
      await tracing.uninstall();
    }
  });
});

describe('tracing an app that uses protect() on its own routes', () => {
  const fixtures = createFixtures();

  async function serve(app: express.Express): Promise<{ url: string; close: () => Promise<void> }> {
    const server = app.listen(0, '127.0.0.1');
    await new Promise<void>((resolve) => server.once('listening', resolve));
    const { port } = server.address() as AddressInfo;
    return {
      url: `http://127.0.0.1:${port}`,
      close: () =>
        new Promise((resolve) => {
          server.closeAllConnections();
          server.close(() => {
            resolve();
          });
        }),
    };
  }

  function appWith(outer?: express.RequestHandler): express.Express {
    const gate = tollgate({
      keyStore: fixtures.ring,
      scopes: { orders: { limit: 1 } },
      traceSteps: true,
    });
    const app = express();
    if (outer !== undefined) app.use(outer);
    app.use(gate.context());
    const orders = express.Router();
    orders.get('/:id', gate.protect({ accept: ['secret'], limit: 'orders' }), (_req, res) => {
      res.json({ ok: true });
    });
    app.use('/orders', orders);
    app.use(gate.errorHandler());
    return app;
  }

  it('names the span by the Express route and records the limit that refused', async () => {
    const tracing = installTestTracing();
    const server = await serve(appWith());
    try {
      const headers = bearer(fixtures.keys.level1.secretKey);
      expect((await fetch(`${server.url}/orders/o_1`, { headers })).status).toBe(200);
      const traceId = randomTraceId();
      const refused = await fetch(`${server.url}/orders/o_2`, {
        headers: { ...headers, traceparent: traceparent(traceId, CALLER_SPAN, false) },
      });
      expect(refused.status).toBe(429);
      const spans = await traceOf(tracing, traceId, 3);
      const span = byName(spans, 'GET /orders/:id');
      expect(span.attributes).toMatchObject({
        'http.route': '/orders/:id',
        'http.response.status_code': 429,
        'tollgate.outcome': 'refused',
        'tollgate.error.code': 'rate_limited',
        'tollgate.limit.scope': 'orders',
      });
      expect(byName(spans, 'tollgate.admission').attributes['tollgate.limit.scope']).toBe('orders');
      expectNoCredential(tracing.spans(), allSecrets(fixtures));
    } finally {
      await server.close();
      await tracing.uninstall();
    }
  });

  it('puts its findings on the server span an instrumentation made instead of making a second one', async () => {
    const tracing = installTestTracing({ contextManager: true });
    const tracer = trace.getTracer('test-instrumentation');
    // What @opentelemetry/instrumentation-http does: a SERVER span, active while the app runs.
    const instrumentation: express.RequestHandler = (_req, res, next) => {
      const span = tracer.startSpan('GET', { kind: SpanKind.SERVER });
      res.once('finish', () => {
        span.end();
      });
      context.with(trace.setSpan(context.active(), span), next);
    };
    const server = await serve(appWith(instrumentation));
    try {
      const result = await fetch(`${server.url}/orders/o_3`, {
        headers: bearer(fixtures.keys.level2.secretKey),
      });
      expect(result.status).toBe(200);
      const spans = await tracing.waitFor((all) => all.length >= 3);
      const servers = spans.filter((span) => span.kind === SpanKind.SERVER);
      expect(servers).toHaveLength(1);
      const [outer] = servers as [ReadableSpan];
      expect(outer.instrumentationScope.name).toBe('test-instrumentation');
      expect(outer.name).toBe('GET /orders/:id');
      expect(outer.attributes).toMatchObject({
        'http.route': '/orders/:id',
        'tollgate.outcome': 'allowed',
        'tollgate.key.id': fixtures.keys.level2.id,
      });
      expect(parentOf(byName(spans, 'tollgate.key_lookup'))).toBe(outer.spanContext().spanId);
      expect(parentOf(byName(spans, 'tollgate.admission'))).toBe(outer.spanContext().spanId);
    } finally {
      await server.close();
      await tracing.uninstall();
    }
  });

  it('makes no span and sends no trace context while no tracer provider is registered', async () => {
    let seen: unknown = 'unset';
    const app = appWith((req, _res, next) => {
      _res.once('finish', () => {
        seen = req.tollgateSpan;
      });
      next();
    });
    const server = await serve(app);
    try {
      const result = await fetch(`${server.url}/orders/o_4`, {
        headers: {
          ...bearer(fixtures.keys.level3.secretKey),
          traceparent: traceparent(CALLER_TRACE, CALLER_SPAN, true),
        },
      });
      expect(result.status).toBe(200);
      expect(result.headers.get('traceparent')).toBeNull();
      expect(seen).toBeUndefined();
    } finally {
      await server.close();
    }
  });
});

describe('tracing the admin listener', () => {
  it('names an admin request by its route and puts its trace in the audit line', async () => {
    const tracing = installTestTracing();
    const logs = captureLogs();
    const adminToken = 'admin-token-for-tracing-0123456789';
    const admin = await startAdminGateway(createFixtures().document, adminToken, logs.logger);
    try {
      const traceId = randomTraceId();
      const result = await httpRequest({
        port: admin.adminPort,
        path: '/admin/v1/accounts/acct_open/usage',
        headers: {
          authorization: `Bearer ${adminToken}`,
          traceparent: traceparent(traceId, CALLER_SPAN, true),
        },
      });
      expect(result.status).toBe(200);
      const spans = await traceOf(tracing, traceId, 1);
      const server = serverSpan(spans);
      expect(server.name).toBe('GET /admin/v1/accounts/:id/usage');
      expect(server.attributes).toMatchObject({
        'http.route': '/admin/v1/accounts/:id/usage',
        'tollgate.admin.action': 'accounts.usage',
        'http.response.status_code': 200,
      });
      const audit = logs.entries().find((entry) => entry.event === 'admin.audit');
      expect(audit).toMatchObject({ trace_id: traceId, span_id: server.spanContext().spanId });
      expectNoCredential(spans, [adminToken]);
    } finally {
      await admin.stop();
      await tracing.uninstall();
    }
  });
});
