import { AggregatorRegistry, type Registry } from 'prom-client';
import type { MinuteCounts } from '../decision-history';
import { type Readiness, readinessHandler, type ReadinessReport } from '../readiness';
import type { RegistryJson } from './messages';

/**
 * How the worker threads of one host show as one gateway: readiness (ready only when every worker
 * is), metrics (summed, each gauge by its own rule) and an account's decisions (summed by minute).
 */

/** Every other worker whose slot says it is not ready, as a reason. */
export function peersNotReady(slots: Int32Array, own: number): string[] {
  const reasons: string[] = [];
  for (let i = 0; i < slots.length; i++) {
    if (i + 1 !== own && Atomics.load(slots, i) !== 1) reasons.push(`worker ${i + 1} not ready`);
  }
  return reasons;
}

/** What the main thread knows of one worker: its number and its last readiness report. */
export interface WorkerReadiness {
  readonly index: number;
  readonly report: ReadinessReport | undefined;
}

/**
 * The host's `/readyz` on the admin listener: ready when every worker has said it is; the reasons
 * of each worker that is not, named; the checks of the first worker that reported.
 */
export function hostReadiness(slots: readonly WorkerReadiness[]): Readiness {
  const report = (): ReadinessReport => {
    const reasons: string[] = [];
    const warnings = new Set<string>();
    let checks: ReadinessReport['checks'] | undefined;
    for (const slot of slots) {
      if (slot.report === undefined) {
        reasons.push(`worker ${slot.index} not ready (starting)`);
        continue;
      }
      checks ??= slot.report.checks;
      for (const reason of slot.report.reasons) reasons.push(`worker ${slot.index}: ${reason}`);
      for (const warning of slot.report.warnings) warnings.add(warning);
    }
    return {
      ready: reasons.length === 0,
      reasons,
      warnings: [...warnings],
      checks: checks ?? NOT_STARTED_CHECKS,
    };
  };
  return { report, own: report, handler: readinessHandler(report) };
}

const NOT_STARTED_CHECKS: ReadinessReport['checks'] = {
  keys: { status: 'loading' },
  upstream: { status: 'down', reason: 'not checked yet', checked_at: null },
  rate_limits: { status: 'memory' },
  idempotency: { status: 'memory' },
};

/** The decisions of several workers, summed minute by minute. */
export function sumDecisions(parts: readonly (readonly MinuteCounts[])[]): MinuteCounts[] {
  const byStart = new Map<
    number,
    { allowed: number; limited: number; refused: Map<string, number> }
  >();
  for (const minutes of parts) {
    for (const minute of minutes) {
      let cell = byStart.get(minute.start);
      if (cell === undefined) {
        cell = { allowed: 0, limited: 0, refused: new Map() };
        byStart.set(minute.start, cell);
      }
      cell.allowed += minute.allowed;
      cell.limited += minute.limited;
      for (const [code, n] of Object.entries(minute.refused)) {
        cell.refused.set(code, (cell.refused.get(code) ?? 0) + n);
      }
    }
  }
  return [...byStart]
    .sort(([a], [b]) => a - b)
    .map(([start, cell]) => ({
      start,
      allowed: cell.allowed,
      limited: cell.limited,
      refused: Object.fromEntries(cell.refused),
    }));
}

/**
 * The workers' registries as one: counters and histograms summed, each gauge by the aggregator it
 * declares (`min` for readiness, `max` for staleness); `own` (the process's metrics, which the main
 * thread reports once) added as it is.
 */
export function sumMetrics(parts: readonly RegistryJson[], own: Registry): Promise<string> {
  const workers = AggregatorRegistry.aggregate(parts as RegistryJson[]);
  return AggregatorRegistry.merge([workers as Registry, own]).metrics();
}
