import type { MetricObjectWithValues, MetricValue } from 'prom-client';
import type { MinuteCounts } from '../decision-history';
import type { ReadinessReport } from '../readiness';
import type { ScopeUsage } from '../../lib/entry/core';
import type { GatewayConfig } from '../config';
import type { DemoCredential } from '../demo-keys';
import type { PackedTable } from '../../lib/internal';
import type { ThreadLink } from '../../lib';

/**
 * What the main thread and the worker threads of one gateway say to each other. Every message is
 * plain data (structured clone); a worker's requests are served by its own gateway.
 */

/** What a worker starts from (`workerData`). */
export interface WorkerStart {
  readonly config: GatewayConfig;
  /** From 1. */
  readonly index: number;
  readonly upstreamUrl: string;
  readonly secret: string;
  readonly demoCredentials: readonly DemoCredential[] | undefined;
  /** The keys file's ring in force, in shared memory: every worker serves the same bytes. */
  readonly keysTable: PackedTable | undefined;
  /** The host's share of limits, idempotency records and the failure budget (its port transferred). */
  readonly threads: ThreadLink;
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
