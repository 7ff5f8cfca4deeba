import { Counter, Gauge, Registry } from 'prom-client';
import {
  hostReadiness,
  peersNotReady,
  sumDecisions,
  sumMetrics,
  type WorkerReadiness,
} from '../../../gateway/workers/face';
import type { ReadinessReport } from '../../../gateway/readiness';

/** The worker threads of one host, shown as one gateway. */

function report(ready: boolean, reasons: string[] = [], warnings: string[] = []): ReadinessReport {
  return {
    ready,
    reasons,
    warnings,
    checks: {
      keys: { status: 'ready' },
      upstream: { status: ready ? 'up' : 'down', checked_at: '2026-11-28T12:00:00.000Z' },
      rate_limits: { status: 'memory' },
      idempotency: { status: 'memory' },
    },
  };
}

describe('the host readiness', () => {
  it('is ready when every worker says it is', () => {
    const slots: WorkerReadiness[] = [
      { index: 1, report: report(true, [], ['w']) },
      { index: 2, report: report(true, [], ['w']) },
    ];
    expect(hostReadiness(slots).report()).toEqual({ ...report(true), warnings: ['w'] });
  });

  it('is not ready while a worker is starting or not ready, naming it', () => {
    const slots: WorkerReadiness[] = [
      { index: 1, report: report(false, ['upstream not answering (refused)']) },
      { index: 2, report: undefined },
    ];
    const host = hostReadiness(slots).report();
    expect(host.ready).toBe(false);
    expect(host.reasons).toEqual([
      'worker 1: upstream not answering (refused)',
      'worker 2 not ready (starting)',
    ]);
  });

  it('tells each worker which of its peers are not ready', () => {
    const slots = new Int32Array(new SharedArrayBuffer(12));
    Atomics.store(slots, 0, 1);
    expect(peersNotReady(slots, 1)).toEqual(['worker 2 not ready', 'worker 3 not ready']);
    Atomics.store(slots, 1, 1);
    Atomics.store(slots, 2, 1);
    expect(peersNotReady(slots, 2)).toEqual([]);
  });
});

describe('the host decisions', () => {
  it('sums the workers minute by minute, refusals by code', () => {
    expect(
      sumDecisions([
        [
          { start: 60_000, allowed: 2, limited: 1, refused: { invalid_api_key: 1 } },
          { start: 120_000, allowed: 1, limited: 0, refused: {} },
        ],
        [{ start: 60_000, allowed: 3, limited: 0, refused: { invalid_api_key: 2, forbidden: 1 } }],
      ]),
    ).toEqual([
      { start: 60_000, allowed: 5, limited: 1, refused: { invalid_api_key: 3, forbidden: 1 } },
      { start: 120_000, allowed: 1, limited: 0, refused: {} },
    ]);
  });
});

describe('the host metrics', () => {
  /** A worker's registry: a counter, and gauges that say how they sum. */
  async function worker(requests: number, ready: boolean, ageSeconds: number) {
    const registry = new Registry();
    const registers = [registry];
    new Counter({ name: 'requests_total', help: 'h', registers }).inc(requests);
    new Gauge({ name: 'ready', help: 'h', registers, aggregator: 'min' }).set(ready ? 1 : 0);
    new Gauge({ name: 'age_seconds', help: 'h', registers, aggregator: 'max' }).set(ageSeconds);
    return registry.getMetricsAsJSON();
  }

  it('sums counters, applies each gauge its aggregator, and adds the process metrics once', async () => {
    const own = new Registry();
    new Gauge({ name: 'process_thing', help: 'h', registers: [own] }).set(7);
    const text = await sumMetrics([await worker(3, true, 10), await worker(4, false, 25)], own);
    expect(text).toMatch(/^requests_total 7$/m);
    expect(text).toMatch(/^ready 0$/m);
    expect(text).toMatch(/^age_seconds 25$/m);
    expect(text).toMatch(/^process_thing 7$/m);
  });
});
