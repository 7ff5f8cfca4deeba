import { propagation, trace } from '@opentelemetry/api';
import type { Sampler } from '@opentelemetry/sdk-trace';
import type { TraceSamplerName, TracingConfig } from './config';

/**
 * The gateway's OpenTelemetry SDK, set up from the standard `OTEL_*` variables
 * (docs/tracing.md) and loaded only when tracing is on: with no OTLP endpoint set, none of the
 * SDK's packages is read, and the kit's doors cost a lookup per request.
 *
 * Spans go out in batches over OTLP/HTTP (protobuf or JSON); W3C trace context is extracted from
 * requests and injected into the upstream's. A caller's sampled flag is not trusted unless
 * `TOLLGATE_TRACE_TRUST_REMOTE_SAMPLING=true`: its trace is joined, and the local sampler decides
 * (`edgeSampler`), so a client sending `sampled` on every request cannot make the gateway record
 * and export all its traffic.
 */

export interface Tracing {
  /** Exports the spans still buffered, then stops the exporter. */
  shutdown(): Promise<void>;
}

type SdkTrace = typeof import('@opentelemetry/sdk-trace');

/** A package of the SDK, read only when tracing is on. */
function load(name: string): unknown {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only when tracing is on
  return require(name) as unknown;
}

/**
 * The sampler of `OTEL_TRACES_SAMPLER`, with the remote-parent branches of the `parentbased_*`
 * samplers given to the root sampler unless remote sampling is trusted: a span whose parent came
 * from a caller keeps the caller's trace id and parent, and is recorded as a root would be.
 * A local parent is always followed (the kit's child spans live and die with the request's).
 */
export function edgeSampler(
  sdk: Pick<
    SdkTrace,
    'AlwaysOnSampler' | 'AlwaysOffSampler' | 'ParentBasedSampler' | 'TraceIdRatioBasedSampler'
  >,
  name: TraceSamplerName,
  ratio: number,
  trustRemoteSampling: boolean,
): Sampler {
  const rootOf = (kind: 'always_on' | 'always_off' | 'traceidratio'): Sampler => {
    switch (kind) {
      case 'always_on':
        return new sdk.AlwaysOnSampler();
      case 'always_off':
        return new sdk.AlwaysOffSampler();
      case 'traceidratio':
        return new sdk.TraceIdRatioBasedSampler(ratio);
    }
  };
  if (!name.startsWith('parentbased_')) return rootOf(name as 'always_on');
  const root = rootOf(name.slice('parentbased_'.length) as 'always_on');
  return trustRemoteSampling
    ? new sdk.ParentBasedSampler({ root })
    : new sdk.ParentBasedSampler({ root, remoteParentSampled: root, remoteParentNotSampled: root });
}

/** Registers the SDK as the global tracer provider and W3C trace context as the propagator. */
export function startTracing(config: TracingConfig): Tracing {
  const sdk = load('@opentelemetry/sdk-trace') as SdkTrace;
  const { W3CTraceContextPropagator } = load(
    '@opentelemetry/core',
  ) as typeof import('@opentelemetry/core');
  const resources = load('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  const { OTLPTraceExporter } =
    config.protocol === 'http/json'
      ? (load(
          '@opentelemetry/exporter-trace-otlp-http',
        ) as typeof import('@opentelemetry/exporter-trace-otlp-http'))
      : (load(
          '@opentelemetry/exporter-trace-otlp-proto',
        ) as typeof import('@opentelemetry/exporter-trace-otlp-proto'));
  // `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` win over the gateway's own name.
  const resource = resources.resourceFromAttributes({ 'service.name': 'tollgate-gateway' }).merge(
    resources.detectResources({
      detectors: [resources.envDetector],
    }),
  );
  // The exporter reads its endpoint, headers, timeout and compression from the environment.
  const exporter = new OTLPTraceExporter();
  const provider = new sdk.TracerProvider({
    resource,
    sampler: edgeSampler(sdk, config.sampler, config.ratio, config.trustRemoteSampling),
    spanProcessors: [new sdk.BatchSpanProcessor({ exporter })],
  });
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  return {
    shutdown: async () => {
      await provider.shutdown();
      trace.disable();
      propagation.disable();
    },
  };
}
