import type { DecisionEvent, Logger } from '../lib';

/**
 * The audit trail, an observer of the gate's decisions: one structured event per authentication or
 * authorisation decision, allowed or denied, with why, who (key id, account), from where (client
 * IP), on which route, and the request id. Never a credential: key ids identify keys, secrets are
 * never in hand here.
 */

const AUDITED_CODES: ReadonlySet<string> = new Set([
  'missing_credentials',
  'invalid_api_key',
  'invalid_credentials',
  'invalid_token',
  'expired_token',
  'credential_not_allowed',
  'insufficient_role',
  'ip_not_whitelisted',
  'rate_limited',
]);

export function auditDecision(logger: Logger): (event: DecisionEvent) => void {
  return function audit({ policy, facts, decision }) {
    if (logger.isLevelEnabled?.('info') === false) return;
    const { auth } = decision;
    const fields = {
      event: 'auth.decision',
      request_id: facts.requestId,
      route: `${facts.method} ${policy}`,
      client_ip: facts.clientIp,
      key_id: auth?.keyId,
      account_id: auth?.accountId,
      credential: auth?.credential,
    };
    if (decision.allowed) {
      logger.info({ ...fields, outcome: 'allowed', role: decision.auth.role });
    } else if (AUDITED_CODES.has(decision.error.code)) {
      logger.info({
        ...fields,
        outcome: 'denied',
        reason: decision.error.code,
        status: decision.error.status,
      });
    }
  };
}
