import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { IdempotencyOutcome, DecisionEvent, RateLimitState, SecurityEvent } from '../lib';
import type { LimiterRedis, SharedStoreState } from '../lib/entry/redis';
import type { RedisCommandClient } from '../lib/entry/redis';
import { IDEMPOTENCY_OUTCOMES } from '../lib/internal';
import type { KeyStoreStatus, UpstreamState } from './readiness';

/**
 * The gateway's Prometheus metrics (`GET /metrics` on the admin listener), in a registry of its
 * own. Every label value comes from a closed set: route names of the route table, outcomes, error
 * codes, scope names, limiter states, Redis command names, upstream error kinds, HTTP statuses. No
 * key id, account or client address is ever a label, so the number of series stays bounded
 * whatever the traffic.
 *
 * The request path pays for a few map lookups and counter increments: children are looked up in
 * nested maps (no label objects or strings built per request), and everything that can be read
 * when scraped (limiter state, time degraded, key store, readiness) is read then.
 */

/** How a decision ended: `would_refuse` is allowed, with a rule in shadow mode that would refuse. */
export type DecisionOutcome = 'allowed' | 'refused' | 'limited' | 'would_refuse';

export const UPSTREAM_ERROR_KINDS = ['unavailable', 'timeout'] as const;
export type UpstreamErrorKind = (typeof UPSTREAM_ERROR_KINDS)[number];

export interface MetricsSources {
  /** The limit scopes, for the per-scope limiter state. */
  readonly scopes: readonly string[];
  readonly rateLimitState: () => RateLimitState;
  /** Since when Redis has been unusable (ms since the epoch), or `undefined`. */
  readonly degradedSince: () => number | undefined;
  readonly keys: () => KeyStoreStatus & { readonly count: number | undefined };
  readonly upstream: () => UpstreamState;
  readonly ready: () => boolean;
  /** The routes that take an `Idempotency-Key`, whose outcome counts are served from 0. */
  readonly idempotentRoutes?: readonly string[];
  /**
   * Whether the registry collects the process's own metrics (CPU, memory, event loop). Defaults to
   * `true`; `false` for the worker threads of one process, whose main thread reports them once.
   */
  readonly processMetrics?: boolean;
}

const RATE_LIMIT_STATES: readonly RateLimitState[] = ['shared', 'memory', 'degraded'];

/** Where a secret key leaked: the gate's findings, and secret scanning's report of a public place. */
export type LeakReason = SecurityEvent['reason'] | 'public_repository';

const LEAK_REASONS: readonly LeakReason[] = [
  'sent_as_publishable_key',
  'sent_from_browser',
  'sent_in_query_string',
  'public_repository',
];

/** The secret-scanning endpoint's refusals, each served from 0 so that the first one is seen. */
const SCANNING_REFUSALS = [
  'unsigned',
  'unknown_key',
  'bad_signature',
  'too_large',
  'malformed',
] as const;

/** Why a secret-scanning report was answered 503 for the programme to send it again. */
const SCANNING_DEFERRALS = ['keys_unavailable'] as const;

/** Redis commands named as they are; any other is `OTHER`. */
const REDIS_COMMANDS: ReadonlySet<string> = new Set([
  'EVALSHA',
  'EVAL',
  'SCRIPT',
  'GET',
  'SET',
  'INCR',
  'DECR',
  'DEL',
  'PTTL',
  'PEXPIRE',
  'EXPIRE',
  'PING',
]);

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5];
const UPSTREAM_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly redisFailures: Counter<'command' | 'reason'>;
  private readonly upstreamLatency = new FastHistogram(UPSTREAM_BUCKETS);
  private readonly upstreamErrors: Counter<'kind'>;
  private readonly keyReloads: Counter<'outcome'>;
  private readonly leakedSecretKeys: Counter<'reason'>;
  private readonly scanningReports: Counter<'type' | 'label' | 'action'>;
  private readonly scanningRefusals: Counter<'reason'>;
  private readonly scanningDeferrals: Counter<'reason'>;
  private readonly degradations: Counter;
  private readonly idempotencyOutcomes: Counter<'route' | 'outcome'>;
  /**
   * Decision counts by route, outcome, code and limiter state, in plain numbers: prom-client
   * hashes a label set on every increment, costly on every request, so the request path
   * only bumps a number and the counts are handed to prom-client when scraped.
   */
  private readonly decisionCounts = new Map<
    string,
    Map<string, Map<string, Map<string, { n: number }>>>
  >();
  /** Answers by status (index), the same way. */
  private readonly statusCounts: number[] = [];
  private readonly redisLatency = new Map<string, FastHistogram>();
  /** Time degraded in outages that have ended, in ms. */
  private degradedMsEnded = 0;
  private reportedDegradedMs = 0;
  private lastDegradedSince: number | undefined;
  private fileReloads = 0;
  private fileReloadedAt = Date.now();

  constructor(private readonly sources: MetricsSources) {
    const registers = [this.registry];
    if (sources.processMetrics !== false) collectDefaultMetrics({ register: this.registry });

    const decisionCounts = this.decisionCounts;
    new Counter({
      name: 'tollgate_decisions_total',
      help: 'Decisions of the gate, by route (the route table name), outcome (allowed, refused, limited, would_refuse), error code (none when allowed) and where limits were counted',
      labelNames: ['route', 'outcome', 'code', 'rate_limits'],
      registers,
      collect() {
        this.reset();
        for (const [route, byOutcome] of decisionCounts) {
          for (const [outcome, byCode] of byOutcome) {
            for (const [code, byState] of byCode) {
              for (const [rate_limits, cell] of byState) {
                this.inc({ route, outcome, code, rate_limits }, cell.n);
              }
            }
          }
        }
      },
    });
    const statusCounts = this.statusCounts;
    new Counter({
      name: 'tollgate_http_requests_total',
      help: 'Requests answered on the main listener, by HTTP status',
      labelNames: ['status'],
      registers,
      collect() {
        this.reset();
        statusCounts.forEach((count, status) => {
          this.inc({ status: status === 0 ? 'other' : String(status) }, count);
        });
      },
    });
    const sources_ = sources;
    new Gauge({
      name: 'tollgate_rate_limit_state',
      help: 'Where each scope counts now: 1 for the current state (shared: Redis; memory: no Redis configured; degraded: Redis unusable, counted in memory)',
      labelNames: ['scope', 'state'],
      registers,
      aggregator: 'max',
      collect() {
        const current = sources_.rateLimitState();
        for (const scope of sources_.scopes) {
          for (const state of RATE_LIMIT_STATES) {
            this.set({ scope, state }, state === current ? 1 : 0);
          }
        }
      },
    });
    const degradedSecondsSinceLastScrape = (): number => {
      const total = this.degradedMs();
      const delta = total - this.reportedDegradedMs;
      this.reportedDegradedMs = total;
      return delta / 1000;
    };
    const fileReloads = (): number => this.fileReloads;
    const fileReloadedAt = (): number => this.fileReloadedAt;
    new Counter({
      name: 'tollgate_rate_limit_degraded_seconds_total',
      help: 'Time spent with Redis unusable and limits counted in process memory',
      registers,
      collect() {
        this.inc(degradedSecondsSinceLastScrape());
      },
    });
    this.degradations = new Counter({
      name: 'tollgate_rate_limit_degradations_total',
      help: 'Redis outages: times limits fell back to process memory',
      registers,
    });
    const redisLatency = this.redisLatency;
    this.registry.registerMetric(
      histogramMetric(
        'tollgate_redis_command_duration_seconds',
        'Round trip of the Redis commands the limits send, answered or failed',
        () => [...redisLatency].map(([command, histogram]) => [{ command }, histogram]),
      ),
    );
    this.redisFailures = new Counter({
      name: 'tollgate_redis_command_failures_total',
      help: 'Redis commands that failed, by reason (timeout, noscript, error)',
      labelNames: ['command', 'reason'],
      registers,
    });
    const upstreamLatency = this.upstreamLatency;
    this.registry.registerMetric(
      histogramMetric(
        'tollgate_upstream_request_duration_seconds',
        'Time from sending a request upstream to its response headers',
        () => [[{}, upstreamLatency]],
      ),
    );
    this.upstreamErrors = new Counter({
      name: 'tollgate_upstream_errors_total',
      help: 'Proxied requests without a usable upstream answer (unavailable: 502; timeout: 504)',
      labelNames: ['kind'],
      registers,
    });
    // Served from 0, so that the first failures show as an increase.
    for (const kind of UPSTREAM_ERROR_KINDS) this.upstreamErrors.labels(kind).inc(0);
    new Gauge({
      name: 'tollgate_upstream_up',
      help: 'Whether the readiness probe of the upstream got an answer (1) or not (0)',
      registers,
      aggregator: 'min',
      collect() {
        this.set(sources_.upstream().up ? 1 : 0);
      },
    });
    new Gauge({
      name: 'tollgate_ready',
      help: 'Whether /readyz answers 200 (1) or 503 (0)',
      registers,
      aggregator: 'min',
      collect() {
        this.set(sources_.ready() ? 1 : 0);
      },
    });
    new Gauge({
      name: 'tollgate_keys_loaded',
      help: 'Keys in force',
      registers,
      aggregator: 'min',
      collect() {
        const count = sources_.keys().count;
        if (count !== undefined) this.set(count);
      },
    });
    new Gauge({
      name: 'tollgate_keys_version',
      help: 'Version of the keys in force: the database change version, or the number of successful keys file reloads',
      registers,
      aggregator: 'min',
      collect() {
        const version = Number(sources_.keys().version ?? fileReloads());
        if (Number.isFinite(version)) this.set(version);
      },
    });
    new Gauge({
      name: 'tollgate_keys_age_seconds',
      help: 'Seconds since the keys in force were last known current (last file load, or last sync with the database)',
      registers,
      aggregator: 'max',
      collect() {
        const at = sources_.keys().lastSyncAt ?? fileReloadedAt();
        this.set(Math.max(0, (Date.now() - at) / 1000));
      },
    });
    new Gauge({
      name: 'tollgate_keys_stale',
      help: 'Whether the key database is out of reach and the last keys stay in force (1)',
      registers,
      aggregator: 'max',
      collect() {
        this.set(sources_.keys().status === 'stale' ? 1 : 0);
      },
    });
    this.keyReloads = new Counter({
      name: 'tollgate_keys_reloads_total',
      help: 'Keys file reloads (SIGHUP), by outcome (done, failed)',
      labelNames: ['outcome'],
      registers,
    });
    this.leakedSecretKeys = new Counter({
      name: 'tollgate_leaked_secret_keys_total',
      help: 'Secret keys sent where they can leak, by reason (sent_as_publishable_key, sent_from_browser, sent_in_query_string, public_repository)',
      labelNames: ['reason'],
      registers,
    });
    this.scanningReports = new Counter({
      name: 'tollgate_secret_scanning_reports_total',
      help: 'Tokens reported by secret scanning, by type (secret, publishable, unknown), label (true_positive, false_positive) and action (revoked, rolled, none)',
      labelNames: ['type', 'label', 'action'],
      registers,
    });
    this.scanningRefusals = new Counter({
      name: 'tollgate_secret_scanning_refusals_total',
      help: 'Secret scanning reports refused, nothing changed, by reason (unsigned, unknown_key, bad_signature, too_large, malformed)',
      labelNames: ['reason'],
      registers,
    });
    for (const reason of SCANNING_REFUSALS) this.scanningRefusals.labels(reason).inc(0);
    this.scanningDeferrals = new Counter({
      name: 'tollgate_secret_scanning_deferred_total',
      help: 'Secret scanning reports answered 503 for the programme to send again, nothing read or changed, by reason (keys_unavailable: the public keys cannot be read)',
      labelNames: ['reason'],
      registers,
    });
    for (const reason of SCANNING_DEFERRALS) this.scanningDeferrals.labels(reason).inc(0);
    // Served at 0 from the start: an alert on `increase()` sees the first failed reload or the
    // first leaked key, which a series born at 1 would hide.
    this.keyReloads.labels('failed').inc(0);
    this.keyReloads.labels('done').inc(0);
    for (const reason of LEAK_REASONS) this.leakedSecretKeys.labels(reason).inc(0);
    this.idempotencyOutcomes = new Counter({
      name: 'tollgate_idempotency_total',
      help: 'Requests carrying an Idempotency-Key (or missing a required one), by route and outcome (claimed, stored, too_large, not_stored, released, replayed, in_use, reused, unavailable, invalid, missing)',
      labelNames: ['route', 'outcome'],
      registers,
    });
    // Every series served from the start, so an alert on `increase()` sees the first occurrence.
    for (const route of sources.idempotentRoutes ?? []) {
      for (const outcome of IDEMPOTENCY_OUTCOMES) {
        this.idempotencyOutcomes.labels(route, outcome).inc(0);
      }
    }
  }

  /** What became of a request's `Idempotency-Key`. */
  idempotency(route: string, outcome: IdempotencyOutcome): void {
    this.idempotencyOutcomes.labels(route, outcome).inc();
  }

  /** The gate's observer: one count per decision. */
  decision(event: DecisionEvent, rateLimits: RateLimitState): void {
    const { decision } = event;
    let outcome: DecisionOutcome;
    let code: string;
    if (decision.allowed) {
      const finding = decision.shadow?.[0];
      outcome = finding === undefined ? 'allowed' : 'would_refuse';
      code = finding === undefined ? 'none' : finding.error.code;
    } else {
      code = decision.error.code;
      outcome = code === 'rate_limited' ? 'limited' : 'refused';
    }
    this.decisionCell(event.policy, outcome, code, rateLimits).n += 1;
  }

  /** A request answered on the main listener. */
  request(status: number): void {
    const index = status >= 100 && status <= 599 ? status : 0;
    this.statusCounts[index] = (this.statusCounts[index] ?? 0) + 1;
  }

  upstreamAnswered(seconds: number): void {
    this.upstreamLatency.observe(seconds);
  }

  upstreamFailed(kind: UpstreamErrorKind): void {
    this.upstreamErrors.labels(kind).inc();
  }

  /** Redis went unusable (`degraded`) or usable again (`shared`). */
  rateLimitsChanged(state: SharedStoreState, since: number | undefined): void {
    if (state === 'degraded') {
      this.degradations.inc();
      this.lastDegradedSince = since ?? Date.now();
    } else if (this.lastDegradedSince !== undefined) {
      this.degradedMsEnded += Date.now() - this.lastDegradedSince;
      this.lastDegradedSince = undefined;
    }
  }

  keysReloaded(outcome: 'done' | 'failed'): void {
    this.keyReloads.labels(outcome).inc();
    if (outcome === 'done') {
      this.fileReloads += 1;
      this.fileReloadedAt = Date.now();
    }
  }

  /** A secret key sent where it can leak: its key id is in the log line, never in a label. */
  secretKeyLeaked(reason: LeakReason): void {
    this.leakedSecretKeys.labels(reason).inc();
  }

  /** One token of a secret-scanning report, as it was answered and acted on. */
  secretScanningReport(
    type: 'secret' | 'publishable' | 'unknown',
    label: 'true_positive' | 'false_positive',
    action: 'revoked' | 'rolled' | 'none',
  ): void {
    this.scanningReports.labels(type, label, action).inc();
  }

  /** A secret-scanning report refused before anything was read or changed. */
  secretScanningRefused(reason: (typeof SCANNING_REFUSALS)[number]): void {
    this.scanningRefusals.labels(reason).inc();
  }

  /** A signed secret-scanning report that could not be checked now: answered 503, sent again. */
  secretScanningDeferred(reason: (typeof SCANNING_DEFERRALS)[number]): void {
    this.scanningDeferrals.labels(reason).inc();
  }

  /** The limiter's Redis connection, with each command's round trip and failure counted. */
  instrumentRedis(redis: LimiterRedis): LimiterRedis {
    const { client } = redis;
    const instrumented: RedisCommandClient = {
      get status() {
        return client.status;
      },
      call: (command, ...args) => {
        const name = REDIS_COMMANDS.has(command.toUpperCase()) ? command.toUpperCase() : 'OTHER';
        const started = process.hrtime.bigint();
        return client.call(command, ...args).then(
          (reply) => {
            this.redisHistogram(name).observe(Number(process.hrtime.bigint() - started) / 1e9);
            return reply;
          },
          (error: unknown) => {
            this.redisHistogram(name).observe(Number(process.hrtime.bigint() - started) / 1e9);
            this.redisFailures.labels(name, failureReason(error)).inc();
            throw error;
          },
        );
      },
    };
    return { client: instrumented, health: redis.health };
  }

  /** The text format, for `GET /metrics`. */
  async text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  private degradedMs(): number {
    const since = this.sources.degradedSince() ?? this.lastDegradedSince;
    return this.degradedMsEnded + (since === undefined ? 0 : Math.max(0, Date.now() - since));
  }

  private decisionCell(
    route: string,
    outcome: string,
    code: string,
    rateLimits: string,
  ): { n: number } {
    let byOutcome = this.decisionCounts.get(route);
    if (byOutcome === undefined) {
      byOutcome = new Map();
      this.decisionCounts.set(route, byOutcome);
    }
    let byCode = byOutcome.get(outcome);
    if (byCode === undefined) {
      byCode = new Map();
      byOutcome.set(outcome, byCode);
    }
    let byState = byCode.get(code);
    if (byState === undefined) {
      byState = new Map();
      byCode.set(code, byState);
    }
    let cell = byState.get(rateLimits);
    if (cell === undefined) {
      cell = { n: 0 };
      byState.set(rateLimits, cell);
    }
    return cell;
  }

  private redisHistogram(command: string): FastHistogram {
    let histogram = this.redisLatency.get(command);
    if (histogram === undefined) {
      histogram = new FastHistogram(LATENCY_BUCKETS);
      this.redisLatency.set(command, histogram);
    }
    return histogram;
  }
}

/** A histogram's counts in plain numbers: an observation allocates nothing and hashes nothing. */
class FastHistogram {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(readonly buckets: readonly number[]) {
    this.counts = new Float64Array(buckets.length);
  }

  observe(value: number): void {
    this.sum += value;
    this.count += 1;
    const { buckets } = this;
    for (let i = 0; i < buckets.length; i++) {
      if (value <= (buckets[i] ?? Infinity)) {
        this.counts[i] = (this.counts[i] ?? 0) + 1;
        return;
      }
    }
  }
}

type HistogramSeries = readonly [Readonly<Record<string, string>>, FastHistogram];

/**
 * A prom-client metric (what `Registry.registerMetric` takes: `name`, `get()`) that renders
 * `FastHistogram`s in the histogram text format: cumulative `_bucket` series with `le`, `_sum`,
 * `_count`.
 */
function histogramMetric(name: string, help: string, series: () => readonly HistogramSeries[]) {
  const get = () => {
    const values: { metricName: string; labels: Record<string, string | number>; value: number }[] =
      [];
    for (const [labels, histogram] of series()) {
      let cumulative = 0;
      histogram.buckets.forEach((bound, i) => {
        cumulative += histogram.counts[i] ?? 0;
        values.push({
          metricName: `${name}_bucket`,
          labels: { ...labels, le: bound },
          value: cumulative,
        });
      });
      values.push({
        metricName: `${name}_bucket`,
        labels: { ...labels, le: '+Inf' },
        value: histogram.count,
      });
      values.push({ metricName: `${name}_sum`, labels: { ...labels }, value: histogram.sum });
      values.push({ metricName: `${name}_count`, labels: { ...labels }, value: histogram.count });
    }
    return Promise.resolve({ name, help, type: 'histogram', values, aggregator: 'sum' });
  };
  return {
    name,
    help,
    type: 'histogram',
    aggregator: 'sum',
    get,
    reset: () => undefined,
  } as unknown as Parameters<Registry['registerMetric']>[0];
}

function failureReason(error: unknown): 'timeout' | 'noscript' | 'error' {
  const code =
    typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  if (code === 'REDIS_TIMEOUT') return 'timeout';
  if (error instanceof Error && error.message.startsWith('NOSCRIPT')) return 'noscript';
  return 'error';
}
