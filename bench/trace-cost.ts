import { spawn } from 'node:child_process';
import path from 'node:path';
import { propagation, trace } from '@opentelemetry/api';
import { ExportResultCode, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import * as sdk from '@opentelemetry/sdk-trace';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { edgeSampler } from '../gateway/tracing';
import {
  endRequestSpan,
  injectTraceContext,
  nameRequestSpan,
  recordDecision,
  type RequestSpan,
  startChildSpan,
  startRequestSpan,
  startUpstreamSpan,
  traceStep,
} from '../lib/core/tracing';

/**
 * `node dist/bench/trace-cost.js`: where the CPU time of tracing a request goes, in one process,
 * without HTTP servers: the spans of one gateway request (the request's `SERVER` span, the
 * upstream `CLIENT` span and its `traceparent`; with TRACE_COST_STEPS=1 the key lookup's and the
 * admission's as well, as `TOLLGATE_TRACE_STEPS=true` makes them) made through the kit's own
 * functions, in turns of TRACE_COST_BATCH (32) requests per event-loop turn so that the batch
 * processor's timers and exports run between them as they do in the gateway. Each setup is
 * measured TRACE_COST_ROUNDS (5) times for TRACE_COST_SECONDS (1) of wall time, the setups
 * interleaved, and the median CPU time per request (the process's, user and system, export work
 * included) is printed with the difference from the setup before it:
 *
 * - off: no tracer provider (the kit's lookups);
 * - unsampled: the gateway's SDK with a ratio of 0 (every span made, none recorded);
 * - sampled, no processor: spans recorded and ended, nothing queued;
 * - sampled, batch, discard: the gateway's batch processor, an exporter that drops each batch;
 * - sampled, batch, protobuf (or JSON): the same, each batch serialised as the OTLP exporter does;
 * - sampled, OTLP/HTTP: the gateway's exporter sending to a receiver (bench/otlp-sink.js, started
 *   here as a child process; its own CPU per request is printed apart);
 * - the same with batches of 512, 1,024 and 2,048 spans (queues four times that);
 * - 10 %, OTLP/HTTP: the gateway's `parentbased_traceidratio` at 0.1.
 */

const BATCH = Number(process.env.TRACE_COST_BATCH ?? 32);
const ROUNDS = Number(process.env.TRACE_COST_ROUNDS ?? 5);
const SECONDS = Number(process.env.TRACE_COST_SECONDS ?? 1);
const SINK_PORT = Number(process.env.TRACE_COST_SINK_PORT ?? 42329);
/** TRACE_COST_ONLY: the setups whose name holds this text (all by default), e.g. to profile one. */
const ONLY = process.env.TRACE_COST_ONLY ?? '';
/** TRACE_COST_STEPS=1: the key lookup and the admission make spans of their own. */
const STEPS = process.env.TRACE_COST_STEPS === '1';

const HEADERS = {
  host: '127.0.0.1:8080',
  'user-agent': 'wrk',
  authorization: 'Bearer sk_test_not_a_real_key',
  'x-forwarded-for': '203.0.113.10',
};
const UPSTREAM = new URL('http://127.0.0.1:8093');
const AUTH = { accountId: 'acct_0042', keyId: 'key_0042', credential: 'secret', role: 'admin' };

/** One gateway request's spans, as the doors, the gate and the proxy make them. */
function oneRequest(): void {
  const requestSpan = startRequestSpan(
    { method: 'GET', target: '/api/v1/wallets/?page=2', headers: HEADERS, httpVersion: '1.1' },
    (value) => value,
  );
  if (requestSpan === undefined) return;
  nameRequestSpan(requestSpan, 'GET', '/api/v1/wallets/');
  if (STEPS) stepSpans(requestSpan);
  recordDecision(requestSpan, 'wallets', { allowed: true, auth: AUTH });
  const upstream = startUpstreamSpan(requestSpan, {
    method: 'GET',
    routeTemplate: '/api/v1/wallets/',
    url: UPSTREAM,
    path: '/api/v1/wallets/',
  });
  if (upstream !== undefined) {
    const headers: Record<string, string> = { accept: 'application/json' };
    injectTraceContext(upstream, requestSpan.context, headers);
    upstream.setAttribute('http.response.status_code', 200);
    upstream.end();
  }
  endRequestSpan(requestSpan, { status: 200, clientAddress: '127.0.0.1', aborted: false });
}

/** The key lookup's and the admission's spans, as `TOLLGATE_TRACE_STEPS=true` makes them. */
function stepSpans(requestSpan: RequestSpan): void {
  traceStep(
    requestSpan,
    'tollgate.key_lookup',
    () => AUTH,
    (span, auth) => {
      if (!span.isRecording()) return;
      span.setAttribute('tollgate.key.id', auth.keyId);
      span.setAttribute('tollgate.account.id', auth.accountId);
    },
  );
  const admission = startChildSpan(requestSpan, 'tollgate.admission');
  if (admission?.isRecording() === true) {
    admission.setAttribute('tollgate.limit.scopes', ['account', 'ip']);
    admission.setAttribute('tollgate.rate_limits', 'memory');
  }
  admission?.end();
}

/** An exporter that answers success at once, serialising each batch first when asked. */
function localExporter(serialise?: 'protobuf' | 'json'): sdk.SpanExporter {
  return {
    export: (spans, done) => {
      if (serialise === 'protobuf') ProtobufTraceSerializer.serializeRequest(spans);
      else if (serialise === 'json') JsonTraceSerializer.serializeRequest(spans);
      done({ code: ExportResultCode.SUCCESS });
    },
    shutdown: () => Promise.resolve(),
  };
}

interface Setup {
  readonly name: string;
  /** Registers the SDK (none for `off`); returns what stops it. */
  start(): (() => Promise<void>) | undefined;
}

function provider(
  sampler: 'parentbased_always_on' | 'parentbased_traceidratio',
  ratio: number,
  processor: sdk.SpanProcessor | undefined,
): () => Promise<void> {
  const tracerProvider = new sdk.TracerProvider({
    sampler: edgeSampler(sdk, sampler, ratio, false),
    spanProcessors: processor === undefined ? [] : [processor],
  });
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(tracerProvider);
  return async () => {
    await tracerProvider.shutdown();
    trace.disable();
    propagation.disable();
  };
}

const batch = (exporter: sdk.SpanExporter): sdk.SpanProcessor =>
  new sdk.BatchSpanProcessor({ exporter });
const otlp = (): sdk.SpanExporter =>
  new OTLPTraceExporter({ url: `http://127.0.0.1:${SINK_PORT}/v1/traces` });

const SETUPS: readonly Setup[] = [
  { name: 'off', start: () => undefined },
  {
    name: 'unsampled (ratio 0), OTLP/HTTP',
    start: () => provider('parentbased_traceidratio', 0, batch(otlp())),
  },
  { name: 'sampled, no processor', start: () => provider('parentbased_always_on', 1, undefined) },
  {
    name: 'sampled, batch, discard',
    start: () => provider('parentbased_always_on', 1, batch(localExporter())),
  },
  {
    name: 'sampled, batch, protobuf',
    start: () => provider('parentbased_always_on', 1, batch(localExporter('protobuf'))),
  },
  {
    name: 'sampled, batch, JSON',
    start: () => provider('parentbased_always_on', 1, batch(localExporter('json'))),
  },
  {
    name: 'sampled, OTLP/HTTP',
    start: () => provider('parentbased_always_on', 1, batch(otlp())),
  },
  ...[512, 1024, 2048].map((size) => ({
    name: `sampled, OTLP/HTTP, batches of ${size}`,
    start: () =>
      provider(
        'parentbased_always_on',
        1,
        new sdk.BatchSpanProcessor({
          exporter: otlp(),
          maxExportBatchSize: size,
          maxQueueSize: size * 4,
        }),
      ),
  })),
  {
    name: '10 %, OTLP/HTTP',
    start: () => provider('parentbased_traceidratio', 0.1, batch(otlp())),
  },
];

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** CPU µs per request of one setup over SECONDS of wall time (its export work included). */
async function measure(setup: Setup): Promise<{ perRequest: number; requests: number }> {
  const stop = setup.start();
  for (let i = 0; i < 2000; i += 1) oneRequest();
  await turn();
  const cpu = process.cpuUsage();
  const until = performance.now() + SECONDS * 1000;
  let requests = 0;
  while (performance.now() < until) {
    for (let i = 0; i < BATCH; i += 1) oneRequest();
    requests += BATCH;
    await turn();
  }
  // What is still queued is exported, and counted, before the clock stops.
  if (stop !== undefined) await stop();
  const used = process.cpuUsage(cpu);
  return { perRequest: (used.user + used.system) / requests, requests };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

async function sinkCpuMs(sink: ReturnType<typeof spawn>): Promise<number> {
  const line = await new Promise<string>((resolve) => {
    sink.stdout?.on('data', (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      if (text.includes('cpu')) resolve(text);
    });
    sink.kill('SIGTERM');
  });
  return Number(/cpu (\d+) ms/.exec(line)?.[1] ?? Number.NaN);
}

async function main(): Promise<void> {
  const sink = spawn(process.execPath, [path.join(__dirname, 'otlp-sink.js'), String(SINK_PORT)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve) => {
    sink.stdout.once('data', () => {
      resolve();
    });
  });
  const setups = SETUPS.filter((setup) => setup.name.includes(ONLY));
  const results = new Map<string, number[]>(setups.map((setup) => [setup.name, []]));
  // Requests whose spans reached the receiver: every one of a sampled OTLP setup, a tenth at 10 %.
  let exported = 0;
  for (let round = 0; round < ROUNDS; round += 1) {
    for (const setup of setups) {
      const { perRequest, requests } = await measure(setup);
      results.get(setup.name)?.push(perRequest);
      if (setup.name.startsWith('sampled, OTLP')) exported += requests;
      else if (setup.name.startsWith('10 %')) exported += requests / 10;
    }
  }
  const sinkMs = await sinkCpuMs(sink);
  process.stdout.write(
    `| setup | CPU µs per request (median of ${ROUNDS}) | added to the row above |\n|---|--:|--:|\n`,
  );
  let previous: number | undefined;
  for (const setup of setups) {
    const value = median(results.get(setup.name) ?? []);
    const added = previous === undefined ? '' : (value - previous).toFixed(1);
    process.stdout.write(`| ${setup.name} | ${value.toFixed(1)} | ${added} |\n`);
    previous = value;
  }
  process.stdout.write(
    `\nreceiver (bench/otlp-sink.js), in its own process: ${String(sinkMs)} ms of CPU for every OTLP round, ${((sinkMs * 1000) / exported).toFixed(1)} µs per request exported\n`,
  );
}

void main();
