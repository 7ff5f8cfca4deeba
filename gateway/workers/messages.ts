import type { MetricObjectWithValues, MetricValue } from 'prom-client';
import type { MinuteCounts } from '../decision-history';
import type { ReadinessReport } from '../readiness';
import type { ScopeUsage } from '../../lib/entry/core';
import type { GatewayConfig } from '../config';
import type { KeysNews, WorkerRole } from '../start';
import type { KeyWrite, WriteFailure } from './key-writes';

/**
 * What the main thread and the worker threads of one gateway say to each other. Every message is
 * plain data (structured clone); a worker's requests are served by its own gateway.
 */

/**
 * What a worker starts from (`workerData`): its gateway's role, less what the worker makes of the
 * ready slots itself, and the configuration.
 */
export interface WorkerStart extends Omit<WorkerRole, 'peersNotReady' | 'writeKey'> {
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
  | KeysNews
  /** A key write the worker asked for, made and in force on the main thread. */
  | { readonly type: 'written'; readonly id: number; readonly value: unknown }
  | { readonly type: 'unwritten'; readonly id: number; readonly failure: WriteFailure }
  | { readonly type: 'stop'; readonly drainMs: number };

export type FromWorker =
  | { readonly type: 'listening'; readonly url: string }
  /** It could not start: the main thread stops the host with this reason. */
  | { readonly type: 'failed'; readonly configuration: boolean; readonly message: string }
  | { readonly type: 'readiness'; readonly report: ReadinessReport }
  | { readonly type: 'answer'; readonly id: number; readonly value: unknown }
  | { readonly type: 'unanswered'; readonly id: number; readonly message: string }
  /** Database keys the worker served: each id with how many milliseconds ago it was last used. */
  | { readonly type: 'used'; readonly uses: [string, number][] }
  /** A key write for the main thread's database store to make, answered by its id. */
  | { readonly type: 'write'; readonly id: number; readonly write: KeyWrite };
