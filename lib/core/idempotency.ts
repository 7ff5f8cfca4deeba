import { randomBytes } from 'node:crypto';
import {
  IdempotencyKeyInUseError,
  IdempotencyKeyRequiredError,
  IdempotencyKeyReusedError,
  IdempotencyUnavailableError,
  type TollgateError,
} from '../errors';
import { decodeAnswer, encodeAnswer, type StoredAnswer } from '../idempotency/answer';
import { IDEMPOTENCY_HEADER, idempotencyKeyOf } from '../idempotency/key';
import { IdempotencySeal, SECRET_TAG_LENGTH } from '../idempotency/seal';
import {
  type IdempotencyStore,
  IdempotencyStoreError,
  type IdempotencyStoreState,
} from '../idempotency/store';
import type { AuthContext } from '../model/auth-context';
import type { RequestFacts } from './facts';

/**
 * Idempotent requests: a retry with the client's `Idempotency-Key` gets the first request's answer
 * instead of a second payout. The rule, once for every door, runs after the credential, the
 * whitelist, the role, the permission and the limits have let the request through (a refused
 * request claims and stores nothing):
 *
 * - no key: passes, unless the route requires one (`400 idempotency_key_required`);
 * - a malformed key: `400 idempotency_key_invalid`;
 * - a key new to the account: claimed, atomically across every instance sharing the store, and
 *   the request goes on; the door keeps its answer (`complete`), or releases the claim when the
 *   request surely never reached the upstream (`release`);
 * - the same key and the same request (method, routed path, body bytes) while the first is being
 *   answered: `409 idempotency_key_in_use` with `Retry-After: 1`; once answered: the answer again;
 * - the same key with another request: `422 idempotency_key_reused`;
 * - a store that cannot be used: `503 idempotency_unavailable`, nothing forwarded.
 *
 * Keys belong to the account of the credential: two accounts never share one. A claim that is never
 * completed (an instance killed mid-request, a forward-auth door, which never sees the answer)
 * holds until the key's lifetime ends, and its retries are refused `409`: never forwarded twice.
 */

/** Whether a route accepts an `Idempotency-Key` (`optional`) or refuses requests without one. */
export type IdempotencyMode = 'optional' | 'required';

/** What became of a request's key, for metrics and audit lines. */
export type IdempotencyOutcome =
  /** First use: claimed, the request goes on. */
  | 'claimed'
  /** Its answer is kept for the key's retries. */
  | 'stored'
  /** Its answer was larger than the bound: its retries are refused `409`, with the status. */
  | 'too_large'
  /** Its answer could not be kept (the store failed): its retries are refused `409`. */
  | 'not_stored'
  /** The request never reached the upstream: the claim is released, a retry is forwarded. */
  | 'released'
  | 'replayed'
  | 'in_use'
  | 'reused'
  | 'unavailable'
  | 'invalid'
  | 'missing';

export const IDEMPOTENCY_OUTCOMES: readonly IdempotencyOutcome[] = [
  'claimed',
  'stored',
  'too_large',
  'not_stored',
  'released',
  'replayed',
  'in_use',
  'reused',
  'unavailable',
  'invalid',
  'missing',
];

/** What became of a request's key, told to the gate's `idempotency.onOutcome`. */
export interface IdempotencyEvent {
  /** The route's policy id. */
  readonly policy: string;
  readonly outcome: IdempotencyOutcome;
  readonly facts: RequestFacts;
  readonly auth: AuthContext;
}

/** A first use's claim, handed to the door that answers the request. */
export interface IdempotencyClaim {
  /** The largest answer body kept for replays, in bytes. */
  readonly maxAnswerBytes: number;
  /** Keeps `answer` for the key's retries; settles once the store has it (or could not take it). */
  complete(answer: StoredAnswer): Promise<void>;
  /** The answer, of `status`, was larger than `maxAnswerBytes`: its retries are refused `409`. */
  tooLarge(status: number): Promise<void>;
  /** The request surely never reached the upstream: a retry may be forwarded. */
  release(): Promise<void>;
}

/** What the rule decided for an admitted request. */
export type IdempotencyStep =
  | { readonly kind: 'refused'; readonly error: TollgateError }
  | { readonly kind: 'claimed'; readonly claim: IdempotencyClaim }
  | { readonly kind: 'replay'; readonly answer: StoredAnswer };

export const DEFAULT_IDEMPOTENCY_TTL_SECONDS = 86_400;
export const MIN_IDEMPOTENCY_TTL_SECONDS = 60;
export const MAX_IDEMPOTENCY_TTL_SECONDS = 604_800;
export const DEFAULT_IN_FLIGHT_SECONDS = 60;
export const MAX_IN_FLIGHT_SECONDS = 3600;
export const DEFAULT_MAX_ANSWER_BYTES = 64 * 1024;
export const MIN_MAX_ANSWER_BYTES = 1024;
export const MAX_MAX_ANSWER_BYTES = 16 * 1024 * 1024;

export interface IdempotencyRuleOptions {
  readonly secret: string | Buffer;
  readonly store: IdempotencyStore;
  readonly ttlSeconds: number;
  readonly maxAnswerBytes: number;
  /** How long a first request may take to be answered, in seconds. Defaults to 60. */
  readonly inFlightSeconds?: number | undefined;
  readonly onOutcome?: ((event: IdempotencyEvent) => void) | undefined;
  /** Wall-clock milliseconds, shared in meaning by every instance. Defaults to `Date.now`. */
  readonly now?: (() => number) | undefined;
}

/** The kinds of record, by their first character. */
const CLAIM = 'c';
const ANSWERED = 'a';
const TOO_LARGE = 't';
/**
 * A claim's token (16 hex) and a fingerprint after the kind: the secret's tag (8 base64url), then
 * the request's (43 base64url).
 */
const TOKEN_LENGTH = 16;
const FINGERPRINT_LENGTH = SECRET_TAG_LENGTH + 43;

export class IdempotencyRule {
  private readonly seal: IdempotencySeal;
  private readonly store: IdempotencyStore;
  private readonly ttlMs: number;
  private readonly maxAnswerBytes: number;
  private readonly inFlightMs: number;
  private readonly onOutcome: ((event: IdempotencyEvent) => void) | undefined;
  private readonly now: () => number;

  constructor(options: IdempotencyRuleOptions) {
    this.seal = new IdempotencySeal(options.secret);
    this.store = options.store;
    this.ttlMs = options.ttlSeconds * 1000;
    this.maxAnswerBytes = options.maxAnswerBytes;
    this.inFlightMs = (options.inFlightSeconds ?? DEFAULT_IN_FLIGHT_SECONDS) * 1000;
    this.onOutcome = options.onOutcome;
    this.now = options.now ?? Date.now;
  }

  state(): IdempotencyStoreState {
    return this.store.state();
  }

  /**
   * The step for an admitted request of a route in `mode`; `undefined` when it carries no key and
   * needs none. `facts.rawBody` is the body as received (none: an empty body). Without a key, or
   * with a malformed one, the step is decided at once, without a promise: only a key goes to the
   * store.
   */
  check(
    facts: RequestFacts,
    policy: string,
    mode: IdempotencyMode,
    auth: AuthContext,
  ): IdempotencyStep | Promise<IdempotencyStep> | undefined {
    const key = idempotencyKeyOf(facts.headersDistinct[IDEMPOTENCY_HEADER]);
    if (key === undefined) {
      return mode === 'required'
        ? this.refuse(facts, policy, auth, 'missing', new IdempotencyKeyRequiredError())
        : undefined;
    }
    if (typeof key !== 'string') return this.refuse(facts, policy, auth, 'invalid', key);
    return this.claimKey(facts, policy, auth, key);
  }

  private reportOf(
    facts: RequestFacts,
    policy: string,
    auth: AuthContext,
    outcome: IdempotencyOutcome,
  ): void {
    const requestSpan = facts.tollgateSpan;
    if (requestSpan !== undefined && !requestSpan.ended) {
      requestSpan.span.setAttribute('tollgate.idempotency', outcome);
    }
    this.onOutcome?.({ policy, outcome, facts, auth });
  }

  private refuse(
    facts: RequestFacts,
    policy: string,
    auth: AuthContext,
    outcome: IdempotencyOutcome,
    error: TollgateError,
  ): IdempotencyStep {
    this.reportOf(facts, policy, auth, outcome);
    return { kind: 'refused', error };
  }

  /** A well-formed key: claimed, or the record found under it. */
  private async claimKey(
    facts: RequestFacts,
    policy: string,
    auth: AuthContext,
    key: string,
  ): Promise<IdempotencyStep> {
    const report = (outcome: IdempotencyOutcome): void => {
      this.reportOf(facts, policy, auth, outcome);
    };
    const refuse = (outcome: IdempotencyOutcome, error: TollgateError): IdempotencyStep =>
      this.refuse(facts, policy, auth, outcome, error);
    const name = `idem:{${auth.accountId}}:${this.seal.recordName(auth.accountId, key)}`;
    const fingerprint =
      this.seal.secretTag + this.seal.fingerprint(facts.method, routedPath(facts), facts.rawBody);
    // The claim says when it was made: a claim older than a first request may take is no longer
    // in flight, and its retries are told its outcome is unknown.
    const claim =
      CLAIM + randomBytes(TOKEN_LENGTH / 2).toString('hex') + fingerprint + String(this.now());
    let found: string | undefined;
    try {
      // A claim outlives the in-flight window by a whole lifetime: a slow first request is never
      // forgotten while it may still be answered, so its retry is never forwarded.
      found = await this.store.claim(name, claim, this.ttlMs + this.inFlightMs);
    } catch (error) {
      // The claim may have landed after all (a Redis that answered late): nothing was forwarded,
      // so it is withdrawn, if it is there, and the retry is free to claim the key.
      this.store.release(name, claim).catch(() => undefined);
      return refuse('unavailable', unavailable(error));
    }
    if (found === undefined) {
      report('claimed');
      return { kind: 'claimed', claim: this.claimOf(name, claim, fingerprint, report) };
    }
    const kind = found.charAt(0);
    const start = kind === CLAIM ? 1 + TOKEN_LENGTH : 1;
    const foundFingerprint = found.slice(start, start + FINGERPRINT_LENGTH);
    if (foundFingerprint !== fingerprint) {
      // Written under another secret (it changed): whether this is the same request cannot be
      // told, and the outcome is unknown, so nothing is replayed and nothing is forwarded again.
      if (!foundFingerprint.startsWith(this.seal.secretTag)) {
        return refuse('in_use', unknownOutcome());
      }
      return refuse('reused', new IdempotencyKeyReusedError());
    }
    const rest = found.slice(start + FINGERPRINT_LENGTH);
    if (kind === CLAIM) {
      const age = this.now() - Number(rest);
      return refuse(
        'in_use',
        age <= this.inFlightMs
          ? new IdempotencyKeyInUseError(
              'A request with this Idempotency-Key is still being answered: retry shortly',
              1,
            )
          : new IdempotencyKeyInUseError(
              "The request with this Idempotency-Key was not answered in time, so its outcome is unknown: check the operation's state, then use a new key",
            ),
      );
    }
    if (kind === TOO_LARGE) {
      return refuse(
        'in_use',
        new IdempotencyKeyInUseError(
          `The request with this Idempotency-Key was answered with status ${rest}, too large to keep for retries: check the operation's state, then use a new key`,
        ),
      );
    }
    const opened = kind === ANSWERED ? this.seal.open(rest, name + fingerprint) : undefined;
    const answer = opened === undefined ? undefined : decodeAnswer(opened);
    if (answer === undefined) {
      // Sealed under another secret, or damaged: the outcome is unknown, so nothing is replayed
      // and nothing is forwarded again.
      return refuse('in_use', unknownOutcome());
    }
    report('replayed');
    return { kind: 'replay', answer };
  }

  private claimOf(
    name: string,
    claim: string,
    fingerprint: string,
    report: (outcome: IdempotencyOutcome) => void,
  ): IdempotencyClaim {
    let settled = false;
    const once = (): boolean => {
      if (settled) return false;
      settled = true;
      return true;
    };
    const settle = async (record: string, outcome: IdempotencyOutcome): Promise<void> => {
      let kept: boolean;
      try {
        kept = await this.store.settle(name, claim, record, this.ttlMs);
      } catch {
        kept = false;
      }
      report(kept ? outcome : 'not_stored');
    };
    return {
      maxAnswerBytes: this.maxAnswerBytes,
      complete: (answer) => {
        if (!once()) return Promise.resolve();
        const bytes = encodeAnswer(answer);
        if (answer.kind === 'answer' && answer.body.length > this.maxAnswerBytes) {
          return settle(TOO_LARGE + fingerprint + String(answer.status), 'too_large');
        }
        return settle(ANSWERED + fingerprint + this.seal.seal(bytes, name + fingerprint), 'stored');
      },
      tooLarge: (status) => {
        if (!once()) return Promise.resolve();
        return settle(TOO_LARGE + fingerprint + String(status), 'too_large');
      },
      release: async () => {
        if (!once()) return;
        try {
          await this.store.release(name, claim);
          report('released');
        } catch {
          // Still claimed: its retries are refused until the key's lifetime ends.
          report('not_stored');
        }
      },
    };
  }
}

/**
 * The request's path from the app's root: an Express request routed by a router mounted under a
 * prefix holds it in two parts (`baseUrl`, then `path`), and two routers mounted at two prefixes
 * must never share a fingerprint (a key used on one would be replayed the other's answer).
 */
function routedPath(facts: RequestFacts): string {
  return facts.baseUrl === undefined ? facts.path : facts.baseUrl + facts.path;
}

function unavailable(error: unknown): IdempotencyUnavailableError {
  return error instanceof IdempotencyStoreError && error.reason === 'full'
    ? new IdempotencyUnavailableError(
        'Too many idempotency keys are held right now; nothing was done, retry later',
      )
    : new IdempotencyUnavailableError();
}

function unknownOutcome(): IdempotencyKeyInUseError {
  return new IdempotencyKeyInUseError(
    "The outcome of the request with this Idempotency-Key is unknown: check the operation's state, then use a new key",
  );
}
