import type { RequestHandler } from 'express';
import { Client } from 'undici';
import { errorBody, type IdempotencyStoreState, type KeyStore, type RateLimitState } from '../lib';
import { NotReadyError } from './errors';
import { faultName } from '../lib/internal';

/**
 * `GET /readyz`, on the main and the admin listener: whether this instance should
 * be sent traffic. Ready once the keys are loaded and the upstream answers; a Redis outage (limits
 * counted in memory) and a key database out of reach (the last keys stay in force) leave it ready
 * and are named in `warnings`. `/healthz` stays the liveness check: it never looks at the upstream.
 *
 * The upstream is checked by a probe every `intervalMs` (500 ms) off the request path, so /readyz
 * turns 503 within about a second of the upstream going down and 200 as soon after it is back,
 * and answering /readyz costs no upstream request.
 */

/** What a key store may say about its keys: `PgKeyStore.state()` does; the next key ring too. */
export interface KeyStoreStatus {
  /** `loading`: no keys in force yet (not ready); `stale`: the last keys stay in force (ready). */
  readonly status: 'loading' | 'ready' | 'stale';
  readonly reason?: string | undefined;
  /** The version of the keys in force, when the store counts them. */
  readonly version?: string | undefined;
  /** When the keys in force were last known current (ms since the epoch). */
  readonly lastSyncAt?: number | undefined;
}

/** A key store that reports its status. Stores without `state()` hold their keys once built. */
export interface ReportsKeyStoreStatus {
  state(): KeyStoreStatus;
}

export function reportsStatus(store: KeyStore): store is KeyStore & ReportsKeyStoreStatus {
  return typeof (store as Partial<ReportsKeyStoreStatus>).state === 'function';
}

export interface UpstreamState {
  readonly up: boolean;
  /** Why it is down: an error code or `answered 503`. */
  readonly reason: string | undefined;
  /** When the last probe ended (ms since the epoch); 0 before the first. */
  readonly checkedAt: number;
  /** The last probe's round trip, in seconds, when it answered. */
  readonly latencySeconds: number | undefined;
}

export interface UpstreamProbeOptions {
  readonly upstreamUrl: string;
  /** Pause between two probes. Defaults to 500 ms. */
  readonly intervalMs?: number;
  /** A probe not answered within this is a failure. Defaults to 1000 ms. */
  readonly timeoutMs?: number;
  /** Told the outcome of every probe (metrics). */
  readonly onProbe?: (state: UpstreamState) => void;
}

/** The probe's `User-Agent`, so upstream logs can tell it apart. */
export const READINESS_PROBE_AGENT = 'tollgate-readiness-probe';

/** Statuses that say the upstream's own front is up but nothing serves behind it. */
const NOT_SERVING: ReadonlySet<number> = new Set([502, 503, 504]);

/**
 * `GET` of the upstream's base path on a keep-alive connection of its own, one at a time. Any
 * HTTP answer counts as up (a 404 or 401 at the root is normal for an API), except 502, 503 and
 * 504; a refused or reset connection, or no answer within `timeoutMs`, counts as down.
 */
export class UpstreamProbe {
  private current: UpstreamState = {
    up: false,
    reason: 'not checked yet',
    checkedAt: 0,
    latencySeconds: undefined,
  };
  private readonly client: Client;
  private readonly path: string;
  private readonly intervalMs: number;
  private readonly timeoutMs: number;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private first: Promise<void> | undefined;

  constructor(private readonly options: UpstreamProbeOptions) {
    const base = new URL(options.upstreamUrl);
    this.path = base.pathname === '' ? '/' : base.pathname;
    this.intervalMs = options.intervalMs ?? 500;
    this.timeoutMs = options.timeoutMs ?? 1000;
    this.client = new Client(base.origin, {
      connectTimeout: this.timeoutMs,
      headersTimeout: this.timeoutMs,
      bodyTimeout: this.timeoutMs,
      keepAliveTimeout: 4000,
    });
  }

  get state(): UpstreamState {
    return this.current;
  }

  /** Starts probing; resolves once the first probe has ended. */
  start(): Promise<void> {
    this.first ??= this.loop();
    return this.first;
  }

  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.client.destroy().catch(() => undefined);
  }

  private async loop(): Promise<void> {
    await this.probeOnce();
    this.schedule();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      void this.probeOnce().then(() => {
        this.schedule();
      });
    }, this.intervalMs);
    this.timer.unref();
  }

  /** One probe; never rejects. */
  async probeOnce(): Promise<UpstreamState> {
    const started = process.hrtime.bigint();
    let up = false;
    let reason: string | undefined;
    try {
      const answer = await this.client.request({
        method: 'GET',
        path: this.path,
        headers: { 'user-agent': READINESS_PROBE_AGENT },
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      await answer.body.dump();
      up = !NOT_SERVING.has(answer.statusCode);
      if (!up) reason = `answered ${answer.statusCode}`;
    } catch (error) {
      reason = faultName(error);
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    this.current = {
      up,
      reason,
      checkedAt: Date.now(),
      latencySeconds: up ? seconds : undefined,
    };
    this.options.onProbe?.(this.current);
    return this.current;
  }
}

export interface ReadinessOptions {
  readonly keyStore: KeyStore;
  readonly upstream: UpstreamProbe;
  readonly rateLimits: () => { state: RateLimitState; reason?: string };
  /** Where idempotency keys are kept: `degraded` while Redis cannot be used. */
  readonly idempotency?: () => IdempotencyStoreState;
  /**
   * Why other threads serving the same port are not ready, when there are some: the host is ready
   * only when every one of them is.
   */
  readonly peers?: () => readonly string[];
}

export interface ReadinessReport {
  readonly ready: boolean;
  /** Why not ready, for the 503 message. */
  readonly reasons: readonly string[];
  /** Conditions that leave it ready but that an operator should know of. */
  readonly warnings: readonly string[];
  readonly checks: {
    readonly keys: {
      status: KeyStoreStatus['status'];
      reason?: string;
      version?: string;
      last_sync_at?: string;
    };
    readonly upstream: { status: 'up' | 'down'; reason?: string; checked_at: string | null };
    readonly rate_limits: { status: RateLimitState; reason?: string };
    readonly idempotency: { status: IdempotencyStoreState };
  };
}

export interface Readiness {
  /** This gateway's readiness: its own, and its peers' when it has some. */
  report(): ReadinessReport;
  /** This thread's own readiness, leaving its peers out. */
  own(): ReadinessReport;
  /** `GET /readyz`: 200 `{"status":"ready",…}` or 503 with the JSON error body and `checks`. */
  readonly handler: RequestHandler;
}

export function createReadiness(options: ReadinessOptions): Readiness {
  const { keyStore, upstream } = options;
  const own = (): ReadinessReport => {
    const reasons: string[] = [];
    const warnings: string[] = [];
    const keys = reportsStatus(keyStore) ? keyStore.state() : { status: 'ready' as const };
    if (keys.status === 'loading') {
      reasons.push(`keys not loaded yet${keys.reason === undefined ? '' : ` (${keys.reason})`}`);
    } else if (keys.status === 'stale') {
      warnings.push(
        `keys: the key store is out of reach (${keys.reason ?? 'unknown'}); the last keys loaded stay in force`,
      );
    }
    const probe = upstream.state;
    if (!probe.up) reasons.push(`upstream not answering (${probe.reason ?? 'unknown'})`);
    const limits = options.rateLimits();
    if (limits.state === 'degraded') {
      warnings.push(
        `rate limits: Redis unusable${limits.reason === undefined ? '' : ` (${limits.reason})`}; counted in process memory`,
      );
    }
    const idempotency = options.idempotency?.() ?? 'memory';
    if (idempotency === 'degraded') {
      warnings.push(
        'idempotency keys: Redis unusable; requests carrying an Idempotency-Key are refused 503, requests without one are served',
      );
    }
    return {
      ready: reasons.length === 0,
      reasons,
      warnings,
      checks: {
        keys: {
          status: keys.status,
          ...(keys.reason === undefined ? {} : { reason: keys.reason }),
          ...(keys.version === undefined ? {} : { version: keys.version }),
          ...(keys.lastSyncAt === undefined
            ? {}
            : { last_sync_at: new Date(keys.lastSyncAt).toISOString() }),
        },
        upstream: {
          status: probe.up ? 'up' : 'down',
          ...(probe.reason === undefined ? {} : { reason: probe.reason }),
          checked_at: probe.checkedAt === 0 ? null : new Date(probe.checkedAt).toISOString(),
        },
        rate_limits: {
          status: limits.state,
          ...(limits.reason === undefined || limits.state !== 'degraded'
            ? {}
            : { reason: limits.reason }),
        },
        idempotency: { status: idempotency },
      },
    };
  };

  const report = (): ReadinessReport => {
    const others = options.peers?.() ?? [];
    if (others.length === 0) return own();
    const mine = own();
    return { ...mine, ready: false, reasons: [...mine.reasons, ...others] };
  };

  return { report, own, handler: readinessHandler(report) };
}

/** `GET /readyz` answering `report()`. */
export function readinessHandler(report: () => ReadinessReport): RequestHandler {
  return function readyzHandler(req, res) {
    const current = report();
    res.setHeader('Cache-Control', 'no-store');
    if (current.ready) {
      res.json({ status: 'ready', checks: current.checks, warnings: current.warnings });
      return;
    }
    const error = new NotReadyError(`Not ready: ${current.reasons.join('; ')}`);
    res.status(error.status).json({
      ...errorBody(error, req.requestId),
      checks: current.checks,
      warnings: current.warnings,
    });
  };
}
