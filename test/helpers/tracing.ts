import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import * as sdk from '@opentelemetry/sdk-trace';
import type { TraceSamplerName } from '../../gateway/config';
import { edgeSampler } from '../../gateway/tracing';

/**
 * An OpenTelemetry SDK registered for one test file, with the gateway's sampler and every ended
 * span kept in memory (`InMemorySpanExporter`), exported at once (`SimpleSpanProcessor`).
 */

export interface TestTracing {
  readonly exporter: sdk.InMemorySpanExporter;
  /** Every span ended so far. */
  spans(): sdk.ReadableSpan[];
  /** Waits until `ready` holds of the spans ended so far (2 s at most), then returns them. */
  waitFor(ready: (spans: sdk.ReadableSpan[]) => boolean): Promise<sdk.ReadableSpan[]>;
  uninstall(): Promise<void>;
}

export interface TestTracingOptions {
  readonly sampler?: TraceSamplerName;
  readonly ratio?: number;
  readonly trustRemoteSampling?: boolean;
  /** Registers an AsyncLocalStorage context manager, as instrumentations need. */
  readonly contextManager?: boolean;
}

export function installTestTracing(options: TestTracingOptions = {}): TestTracing {
  const exporter = new sdk.InMemorySpanExporter();
  const provider = new sdk.TracerProvider({
    sampler: edgeSampler(
      sdk,
      options.sampler ?? 'parentbased_always_on',
      options.ratio ?? 1,
      options.trustRemoteSampling ?? false,
    ),
    spanProcessors: [new sdk.SimpleSpanProcessor({ exporter })],
  });
  let manager: AsyncLocalStorageContextManager | undefined;
  if (options.contextManager === true) {
    manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
  }
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  const spans = (): sdk.ReadableSpan[] => exporter.getFinishedSpans();
  return {
    exporter,
    spans,
    waitFor: async (ready) => {
      const deadline = Date.now() + 2000;
      while (!ready(spans()) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      return spans();
    },
    uninstall: async () => {
      await provider.shutdown();
      trace.disable();
      propagation.disable();
      if (manager !== undefined) context.disable();
    },
  };
}

/** A `traceparent` as a caller sends it. */
export function traceparent(traceId: string, spanId: string, sampled: boolean): string {
  return `00-${traceId}-${spanId}-${sampled ? '01' : '00'}`;
}

/** `traceparent`'s parts. */
export function parseTraceparent(
  value: unknown,
): { traceId: string; spanId: string; sampled: boolean } | undefined {
  if (typeof value !== 'string') return undefined;
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(value);
  if (match === null) return undefined;
  return { traceId: match[1] ?? '', spanId: match[2] ?? '', sampled: match[3] === '01' };
}

/** Every attribute value of `spans` (and their names), as text, for leak scans. */
export function spanTexts(spans: readonly sdk.ReadableSpan[]): string[] {
  const texts: string[] = [];
  for (const span of spans) {
    texts.push(span.name);
    for (const value of Object.values(span.attributes)) texts.push(JSON.stringify(value));
    for (const event of span.events) texts.push(JSON.stringify(event));
  }
  return texts;
}
