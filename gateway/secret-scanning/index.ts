import express, { type Request, type RequestHandler } from 'express';
import {
  ConflictError,
  KeyAlreadyRolledError,
  PayloadTooLargeError,
  InvalidRequestError,
  recordAdmission,
} from '../../lib/internal';
import { type Logger, TollgateError } from '../../lib';
import { type LimiterRedis } from '../../lib/entry/redis';
import { type PgKeyStore } from '../../lib/entry/postgres';
import { createRateLimiter, series } from '../../lib/entry/express';
import type { RouteTableEntry } from '../../lib/entry/core';
import type { KeyAdmin } from '../../lib/entry/postgres';
import type { SecretScanningConfig } from '../config';
import { asAdminError } from '../admin/database-store';
import type { GatewayMetrics } from '../metrics';
import {
  type Finding,
  findingOf,
  labelOf,
  parseReport,
  type ReportedToken,
  type ReportLookups,
  type TokenAnswer,
  tokenHash,
} from './reports';
import { VerificationKeys } from './verification-keys';

export { VerificationKeys, type VerificationKeySources } from './verification-keys';
export type { ReportLookups } from './reports';

/**
 * The secret-scanning partner endpoint (docs/secret-scanning.md), on the main listener at the path
 * configured. GitHub finds a Tollgate key in a public repository, gist or npm package and
 * posts it here, signed; a secret key in force is revoked at once (or rolled, keeping it alive for
 * a short grace period), through the database key store so that every instance refuses it, and
 * every token issued from it, within about a second. A publishable key is public by design: it is
 * logged, never revoked, as revoking it would let anyone who pastes a merchant's publishable key
 * in a public repository switch off the merchant's checkout.
 *
 * Nothing is read or changed before the signature verifies: a report that is unsigned, signed with
 * a key the programme does not list, or signed wrongly is a 401 that says the same in every case.
 * A report whose signing key cannot be looked up because the programme's public keys cannot be
 * read is a 503, for the programme to send it again rather than drop it.
 * A report sent again changes nothing new: a revoked key stays revoked (it answers
 * `false_positive`: it no longer works), a rolled key keeps the expiry its first report gave it,
 * and the replacement of a rolled key has another secret, which no old report names. A key is
 * rolled once across instances: the database refuses a second roll of a key in its grace period.
 * Looking a reported key up is not a use of it: its `last_used_at` is left as clients left it.
 */

export type SecretScanningAction = 'revoke' | 'roll';

/** The writes the endpoint makes: the database key store's. */
export type KeyWriter = Pick<KeyAdmin, 'revoke' | 'roll'>;

/** The database key store as the endpoint uses it: its writes, and lookups that are not a use. */
export type ReportKeyStore = KeyWriter &
  Pick<PgKeyStore, 'peekBySecretKey' | 'findByPublishableKey'>;

export interface SecretScanningOptions {
  readonly keys: VerificationKeys;
  /** Where reported tokens are looked up: never counted as a use of the key. */
  readonly lookups: ReportLookups;
  readonly writer: KeyWriter;
  /** `revoke` (the default): at once; `roll`: a replacement, the key expiring after `graceSeconds`. */
  readonly action: SecretScanningAction;
  readonly graceSeconds: number;
  readonly logger: Logger;
  readonly metrics: GatewayMetrics;
  /** Counts reports per client address; refused ones are 429s. */
  readonly limiter: RequestHandler;
  /** The largest report read, in bytes. */
  readonly maxBodyBytes: number;
}

/** Why a report was refused, in the log and the refusals metric (never in the answer). */
export type RefusalReason =
  'unsigned' | 'unknown_key' | 'bad_signature' | 'too_large' | 'malformed';

/** What was done to a reported key. */
type Change =
  | { readonly action: 'revoked' }
  | { readonly action: 'rolled'; readonly replacementId: string }
  | { readonly action: 'none' };

const NOTHING: Change = { action: 'none' };

/** What acting on a key came to: a change, a key already gone, or a change made just before. */
type Outcome =
  | Change
  | { readonly action: 'gone' }
  | { readonly action: 'repeat'; readonly of: 'revoked' | 'rolled' };

/**
 * How long a key acted on here is remembered: longer than the key store takes to reload past the
 * write (about a second), so a key reported again meanwhile is not taken for one still in force.
 */
const ACTED_ON_MS = 5000;

/** The one answer to every report whose signature does not verify: it says nothing of why. */
class UnverifiedReportError extends TollgateError {
  override readonly name = 'UnverifiedReportError';
  constructor() {
    super(
      401,
      'invalid_credentials',
      'The report is not signed by a key of the secret scanning programme',
    );
  }
}

/**
 * A signed report whose signing key cannot be looked up: the programme's public-keys document
 * cannot be read and no key already known verifies it. Nothing was read or changed; a 503 has the
 * programme send the report again, where a 401 would have it dropped. The code is the one every
 * answer of the gateway uses for a service it depends on being out of reach.
 */
class VerificationKeysUnavailableError extends TollgateError {
  override readonly name = 'VerificationKeysUnavailableError';
  constructor(retryAfterSeconds: number) {
    super(
      503,
      'upstream_unavailable',
      "The secret scanning programme's public keys cannot be read now; nothing was changed: send the report again",
      { 'Retry-After': String(retryAfterSeconds) },
    );
  }
}

const IDENTIFIER_HEADER = 'github-public-key-identifier';
const SIGNATURE_HEADER = 'github-public-key-signature';
/** Identifiers are 64 hex digits and signatures about 96 base64 characters: bounded generously. */
const MAX_HEADER_LENGTH = 512;

export function secretScanning(options: SecretScanningOptions): RequestHandler {
  const { logger, metrics } = options;
  const refuse = (req: Request, reason: RefusalReason): void => {
    metrics.secretScanningRefused(reason);
    logger.warn(
      {
        event: 'secret_scanning.refused',
        reason,
        client_ip: req.clientIp,
        request_id: req.requestId,
      },
      'a secret scanning report was refused; nothing was changed',
    );
  };
  const readRaw = express.raw({ type: () => true, limit: options.maxBodyBytes, inflate: false });
  const readBody: RequestHandler = function readReport(req, res, next) {
    if (Number(req.headers['content-length'] ?? 0) > options.maxBodyBytes) {
      refuse(req, 'too_large');
      next(new PayloadTooLargeError());
      return;
    }
    // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment -- req is the IncomingMessage Node created
    readRaw(req, res, (error?: unknown) => {
      if (error === undefined) {
        next();
        return;
      }
      const tooLarge = (error as { type?: unknown }).type === 'entity.too.large';
      refuse(req, tooLarge ? 'too_large' : 'malformed');
      next(tooLarge ? new PayloadTooLargeError() : new InvalidRequestError('Unreadable body'));
    });
  };
  const writes = new Map<string, Promise<Outcome>>();

  const handle: RequestHandler = function secretScanningReport(req, res, next) {
    const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    const identifier = singleHeader(req, IDENTIFIER_HEADER);
    const signature = singleHeader(req, SIGNATURE_HEADER);
    if (identifier === undefined || signature === undefined) {
      refuse(req, 'unsigned');
      next(new UnverifiedReportError());
      return;
    }
    const verified = async (): Promise<TokenAnswer[]> => {
      const outcome = await options.keys.check(identifier, signature, body);
      if (outcome === 'keys_unavailable') {
        metrics.secretScanningDeferred('keys_unavailable');
        logger.warn(
          {
            event: 'secret_scanning.deferred',
            reason: 'keys_unavailable',
            key_identifier: identifier,
            client_ip: req.clientIp,
            request_id: req.requestId,
          },
          'a secret scanning report could not be verified: the public keys cannot be read; answered 503 for it to be sent again, nothing was changed',
        );
        throw new VerificationKeysUnavailableError(options.keys.retryAfterSeconds());
      }
      if (outcome !== 'verified') {
        refuse(req, outcome);
        throw new UnverifiedReportError();
      }
      const tokens = parseReport(body);
      if (typeof tokens === 'string') {
        refuse(req, 'malformed');
        throw new InvalidRequestError(tokens);
      }
      // A signed, well-formed report is admitted: its span says so, as a decision's would.
      if (req.tollgateSpan !== undefined) recordAdmission(req.tollgateSpan);
      // GitHub batches: a token found in several places comes once per place, acted on once.
      const answered = new Map<string, TokenAnswer>();
      const answers: TokenAnswer[] = [];
      for (const reported of tokens) {
        const earlier = answered.get(reported.token);
        const current =
          earlier === undefined
            ? await answer(req, reported)
            : { ...earlier, token_type: reported.type };
        answered.set(reported.token, current);
        answers.push(current);
      }
      return answers;
    };
    verified().then((answers) => {
      res.setHeader('Cache-Control', 'no-store');
      res.status(200).json(answers);
    }, next);
  };

  /** Acts on one token; a database that does not answer fails the report (the programme retries). */
  const answer = async (req: Request, reported: ReportedToken): Promise<TokenAnswer> => {
    const finding = findingOf(
      options.lookups,
      reported.token,
      Date.now(),
      options.action === 'roll' ? options.graceSeconds : undefined,
    );
    const outcome = finding.kind === 'live' ? await act(finding.key.id) : NOTHING;
    const label = labelAfter(finding, outcome);
    const done = outcome.action === 'gone' || outcome.action === 'repeat' ? NOTHING : outcome;
    metrics.secretScanningReport(typeOf(finding), label, done.action);
    if (finding.kind !== 'unknown') record(req, reported, finding, label, done);
    return { token_hash: tokenHash(reported.token), token_type: reported.type, label };
  };

  /** Keys revoked or rolled here lately, until the key store has surely reloaded past the write. */
  const actedOn = new Map<string, { readonly of: 'revoked' | 'rolled'; readonly until: number }>();
  const actedBefore = (keyId: string, now: number): Outcome | undefined => {
    for (const [id, entry] of actedOn) if (entry.until <= now) actedOn.delete(id);
    const entry = actedOn.get(keyId);
    return entry === undefined ? undefined : { action: 'repeat', of: entry.of };
  };

  /**
   * One write per key: a key reported twice at once, or again before the key store shows the
   * first write, is revoked or rolled once, and logged and counted once.
   */
  const act = async (keyId: string): Promise<Outcome> => {
    const before = actedBefore(keyId, Date.now());
    if (before !== undefined) return before;
    const pending = writes.get(keyId);
    if (pending !== undefined) {
      const first = await pending;
      return first.action === 'revoked' || first.action === 'rolled'
        ? { action: 'repeat', of: first.action }
        : first;
    }
    const write = writeOnce(keyId)
      .then(
        (change): Outcome => {
          if (change.action !== 'none') {
            actedOn.set(keyId, { of: change.action, until: Date.now() + ACTED_ON_MS });
          }
          return change;
        },
        (error: unknown): Outcome => {
          // Rolled by another instance (or an operator) just before: its replacement exists, and
          // the key works until the expiry that roll gave it.
          if (error instanceof KeyAlreadyRolledError) return { action: 'repeat', of: 'rolled' };
          // Revoked or expired by someone else since it was looked up: nothing left to do.
          if (error instanceof ConflictError) return { action: 'gone' };
          throw asAdminError(error, logger);
        },
      )
      .finally(() => writes.delete(keyId));
    writes.set(keyId, write);
    return write;
  };
  const writeOnce = async (keyId: string): Promise<Change> => {
    if (options.action === 'roll') {
      // Once per key across instances: a key another instance rolled just before is refused.
      const rolled = await options.writer.roll(keyId, options.graceSeconds);
      return { action: 'rolled', replacementId: rolled.key.id };
    }
    await options.writer.revoke(keyId);
    return { action: 'revoked' };
  };

  /** The log lines of a reported key in force here or once in force: never the token. */
  const record = (
    req: Request,
    reported: ReportedToken,
    finding: Exclude<Finding, { kind: 'unknown' }>,
    label: TokenAnswer['label'],
    change: Change,
  ): void => {
    const { action } = change;
    const { key } = finding;
    const fields = {
      key_id: key.id,
      account_id: key.accountId,
      key_type: finding.kind === 'publishable' ? 'publishable' : 'secret',
      source_url: reported.url ?? null,
      source: reported.source ?? null,
      label,
      client_ip: req.clientIp,
      request_id: req.requestId,
    };
    if (action === 'none') {
      logger.info(
        { event: 'secret_scanning.key_reported', ...fields, action },
        finding.kind === 'publishable'
          ? 'a publishable key was found in public: it is public by design and stays in force'
          : 'a secret key already revoked, expired or rolled was reported: nothing changed',
      );
      return;
    }
    metrics.secretKeyLeaked('public_repository');
    // The replacement of a rolled key, for the operator to roll again and hand its secret over.
    const replacement =
      change.action === 'rolled' ? { replacement_key_id: change.replacementId } : {};
    logger.warn(
      {
        event: 'security.leaked_secret_key',
        reason: 'public_repository',
        ...fields,
        action,
        ...replacement,
      },
      action === 'revoked'
        ? 'a secret key was found in public: revoked; the merchant needs a new key'
        : `a secret key was found in public: rolled, the old key stops in ${String(options.graceSeconds)} s`,
    );
    // The audit trail's line, as an operator's revoke or roll on the admin listener writes it.
    logger.info({
      event: 'admin.audit',
      action: action === 'revoked' ? 'keys.revoke' : 'keys.roll',
      actor: 'secret_scanning',
      target: key.id,
      account_id: key.accountId,
      source_url: reported.url ?? null,
      ...replacement,
      outcome: 'done',
      client_ip: req.clientIp,
      request_id: req.requestId,
    });
  };

  return series([options.limiter, readBody, handle]);
}

/** A header sent once, of a bounded length; anything else counts as not sent. */
function singleHeader(req: Request, name: string): string | undefined {
  const value = req.headers[name];
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_HEADER_LENGTH
    ? value
    : undefined;
}

/**
 * A key gone meanwhile, or revoked just before, no longer works: `false_positive`, as a revoked key
 * reported again answers. A key rolled just before still works during its grace: `true_positive`.
 */
function labelAfter(finding: Finding, outcome: Outcome): TokenAnswer['label'] {
  if (outcome.action === 'gone') return 'false_positive';
  if (outcome.action === 'repeat')
    return outcome.of === 'revoked' ? 'false_positive' : 'true_positive';
  return labelOf(finding);
}

function typeOf(finding: Finding): 'secret' | 'publishable' | 'unknown' {
  if (finding.kind === 'unknown') return 'unknown';
  return finding.kind === 'publishable' ? 'publishable' : 'secret';
}

/** The largest report read: GitHub's carry a few tokens, well under 1 KiB each. */
const BODY_LIMIT = 64 * 1024;

export interface SecretScanningRouteOptions {
  readonly config: SecretScanningConfig;
  /** The database key store: the endpoint's writes and lookups. */
  readonly writer: ReportKeyStore;
  readonly logger: Logger;
  readonly metrics: GatewayMetrics;
  /** Where reports are counted per client address; without it, in memory. */
  readonly redis?: LimiterRedis | undefined;
  readonly redisPrefix?: string | undefined;
  readonly expectedInstances?: number | undefined;
}

/** The gateway's route for reports, from its settings; `shutdown()` stops the limiter's timers. */
export function secretScanningRoute(options: SecretScanningRouteOptions): {
  entry: RouteTableEntry<RequestHandler>;
  shutdown(): void;
} {
  const { config, logger } = options;
  const limiter = createRateLimiter({
    name: 'secret-scanning',
    limit: config.limit,
    key: 'ip',
    redis: options.redis,
    prefix: options.redisPrefix,
    expectedInstances: options.expectedInstances,
  });
  const keys = new VerificationKeys({ url: config.keysUrl, file: config.keysFile }, (read) => {
    if (read.outcome === 'done') {
      logger.info(
        { event: 'secret_scanning.keys_read', keys: read.keys },
        'secret scanning: verification keys read',
      );
    } else if (read.outcome === 'skipped') {
      logger.warn(
        { event: 'secret_scanning.key_skipped', key_identifier: read.identifier },
        'secret scanning: a verification key that is not ECDSA P-256 was left out',
      );
    } else {
      logger.error(
        { event: 'secret_scanning.keys_failed', reason: read.reason },
        'secret scanning: the verification keys could not be read; reports signed with keys not yet known are answered 503 until they are',
      );
    }
  });
  const { writer } = options;
  const handler = secretScanning({
    keys,
    lookups: {
      findBySecretKey: (secretKey) => writer.peekBySecretKey(secretKey),
      findByPublishableKey: (publishableKey) => writer.findByPublishableKey(publishableKey),
    },
    writer,
    action: config.action,
    graceSeconds: config.graceSeconds,
    logger,
    metrics: options.metrics,
    limiter: limiter.middleware,
    maxBodyBytes: BODY_LIMIT,
  });
  return {
    entry: { method: 'POST', path: config.path, value: handler },
    shutdown: () => {
      limiter.store.shutdown();
    },
  };
}
