import type { MetricObjectWithValues, MetricValue } from 'prom-client';
import type { MinuteCounts } from '../decision-history';
import type { ReadinessReport } from '../readiness';
import type { ScopeUsage } from '../../lib/entry/core';
import type { GatewayConfig } from '../config';
import type { PackedTable } from '../../lib/internal';
import type { WorkerRole } from '../start';

/**
 * What the main thread and the worker threads of one gateway say to each other. Every message is
 * plain data (structured clone); a worker's requests are served by its own gateway.
 */

/**
 * What a worker starts from (`workerData`): its gateway's role, less what the worker makes of the
 * ready slots itself, and the configuration.
 */
export interface WorkerStart extends Omit<WorkerRole, 'peersNotReady'> {
  readonly config: GatewayConfig;
  /** One slot per worker: 1 while that worker is ready, 0 otherwise. */
  readonly readySlots: SharedArrayBuffer;
}

/** The metrics of one registry, as `Registry#getMetricsAsJSON()` gives them. */
export type RegistryJson = MetricObjectWithValues<MetricValue<string>>[];

/** A question the main thread asks a worker, answered by its id. */
export type Question =
  | { readonly what: 'metrics' }
  | { readonly what: 'decisions'; readonly accountId: string }
  | {
      readonly what: 'usage';
      readonly accountId: string;
      readonly limits: Readonly<Record<string, number>> | undefined;
    };

/** What each question is answered with. */
export interface Answers {
  metrics: RegistryJson;
  decisions: MinuteCounts[];
  usage: ScopeUsage[];
}

export type ToWorker =
  | { readonly type: 'ask'; readonly id: number; readonly question: Question }
  /** The keys file's new ring, in force on the main thread since a reload. */
  | { readonly type: 'keys'; readonly table: PackedTable }
  | { readonly type: 'stop'; readonly drainMs: number };

export type FromWorker =
  | { readonly type: 'listening'; readonly url: string }
  /** It could not start: the main thread stops the host with this reason. */
  | { readonly type: 'failed'; readonly configuration: boolean; readonly message: string }
  | { readonly type: 'readiness'; readonly report: ReadinessReport }
  | { readonly type: 'answer'; readonly id: number; readonly value: unknown }
  | { readonly type: 'unanswered'; readonly id: number; readonly message: string };
