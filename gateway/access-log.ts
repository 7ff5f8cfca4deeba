import type { RequestHandler } from 'express';
import type { DecisionEvent, Logger } from '../lib';
import type { RateLimitState } from '../lib';
import type { DecisionOutcome, GatewayMetrics } from './metrics';
import { traceIds } from '../lib/internal';

/**
 * One access line per request, with the gate's decision folded in: who (account, key id,
 * credential, role), what (route, outcome, code), how long, and where limits were counted. Never
 * a query string, a header or a body, so never a credential; the path goes through the credential
 * redactor. Refusals are `info`: a refusal is the gateway doing its job. What an operator must
 * act on is logged apart at `warn` (a leaked key, Redis down, the upstream down, a failed reload).
 * `/healthz`, `/readyz` and `/metrics` are logged at `debug` only: probes every few seconds would
 * drown the rest. While the request's span is recorded (tracing on, sampled), the line carries its
 * `trace_id` and `span_id`.
 *
 * Every answer is counted by status for the metrics, whatever the log level.
 */

export interface AccessLog {
  readonly middleware: RequestHandler;
  /** The gate's observer: remembers the decision until the request's line is written. */
  readonly observe: (event: DecisionEvent, rateLimits: RateLimitState) => void;
}

interface Folded {
  readonly event: DecisionEvent;
  readonly rateLimits: RateLimitState;
}

/** The kit's logger, with pino's `debug` where the logger has one. */
type ProbeLogger = Logger & {
  debug?(fields: object, message?: string): void;
  isLevelEnabled?(level: 'info' | 'warn' | 'error' | 'debug'): boolean;
};

const PROBES: ReadonlySet<string> = new Set(['/healthz', '/healthz/', '/readyz', '/readyz/']);

export function createAccessLog(options: {
  logger: Logger;
  loggablePath: (path: string) => string;
  metrics: GatewayMetrics;
}): AccessLog {
  const { loggablePath, metrics } = options;
  const logger = options.logger as ProbeLogger;
  /** Decisions by request id, for requests whose line is still to be written. */
  const pending = new Map<string, Folded | null>();

  const observe = (event: DecisionEvent, rateLimits: RateLimitState): void => {
    const id = event.facts.requestId;
    if (id !== undefined && pending.has(id)) pending.set(id, { event, rateLimits });
  };

  const middleware: RequestHandler = function accessLogMiddleware(req, res, next) {
    const info = logger.isLevelEnabled?.('info') !== false;
    const probe = PROBES.has(req.path);
    const debug = typeof logger.debug === 'function' && logger.isLevelEnabled?.('debug') === true;
    if (!info || (probe && !debug)) {
      res.once('finish', () => {
        metrics.request(res.statusCode);
      });
      next();
      return;
    }
    const started = process.hrtime.bigint();
    const id = req.requestId;
    if (id !== undefined) pending.set(id, null);
    res.once('close', () => {
      const folded = id === undefined ? undefined : pending.get(id);
      if (id !== undefined) pending.delete(id);
      if (res.writableFinished) metrics.request(res.statusCode);
      const auth = folded?.event.decision.auth ?? req.auth;
      const line: Record<string, unknown> = {
        event: 'http.request',
        request_id: id,
        method: req.method,
        path: loggablePath(req.path),
        status: res.statusCode,
        duration_ms: Number(process.hrtime.bigint() - started) / 1e6,
        client_ip: req.clientIp,
        account_id: auth?.accountId,
        key_id: auth?.keyId,
        credential: auth?.credential,
      };
      if (!res.writableFinished) line.aborted = true;
      // The request's trace, while its span is recorded: the line and the trace find each other.
      const ids = traceIds(req.tollgateSpan);
      if (ids !== undefined) Object.assign(line, ids);
      if (folded !== undefined && folded !== null) Object.assign(line, decisionFields(folded));
      if (probe) logger.debug?.(line);
      else logger.info(line);
    });
    next();
  };

  return { middleware, observe };
}

function decisionFields({ event, rateLimits }: Folded): Record<string, unknown> {
  const { decision, facts, policy } = event;
  const fields: Record<string, unknown> = {
    route: `${facts.method} ${policy}`,
    rate_limits: rateLimits,
  };
  let outcome: DecisionOutcome;
  if (decision.allowed) {
    fields.role = decision.auth.role;
    const findings = decision.shadow;
    if (findings === undefined) outcome = 'allowed';
    else {
      // Shadow mode: what would have refused it, and why it passed.
      outcome = 'would_refuse';
      fields.reason = findings[0]?.error.code;
      fields.shadow = findings.map((finding) => ({
        rule: finding.rule,
        ...(finding.scope === undefined ? {} : { scope: finding.scope }),
        code: finding.error.code,
      }));
    }
  } else {
    outcome = decision.error.code === 'rate_limited' ? 'limited' : 'refused';
    fields.reason = decision.error.code;
    fields.refusal_status = decision.error.status;
  }
  fields.outcome = outcome;
  return fields;
}
