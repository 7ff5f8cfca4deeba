import { credentialResolver, refuseCredentialsInQuery, type SecurityEvent } from './credentials';
import {
  ConfigurationError,
  TollgateError,
  InsufficientPermissionError,
  InsufficientRoleError,
  IpNotWhitelistedError,
  type RateLimitedError,
} from '../errors';
import { permissionNames } from '../model/permissions';
import { IpWhitelist } from '../model/ip-whitelist';
import {
  type Check,
  check,
  checkOptions,
  either,
  isBoolean,
  isFunction,
  isNonEmptyString,
  isObject,
  isString,
  isStringList,
  KEY_STORE,
  LIMITER_REDIS,
  listOf,
  oneOf,
  type OptionChecks,
  required,
  THREAD_LINK,
  TOKEN_SERVICE,
  wholeNumber,
} from '../options';
import type { KeyStore } from '../model/key-record';
import {
  type AuthFailureLimiter,
  authFailureLimiterOn,
  DEFAULT_AUTH_FAILURE_LIMIT,
} from '../rate-limit/auth-failures';
import {
  DEFAULT_PREFIX,
  DEFAULT_WINDOW_MS,
  type LimiterRedis,
  MAX_WINDOW_MS,
  MIN_WINDOW_MS,
} from '../rate-limit/window';
import type { RateLimitState } from '../rate-limit/redis-health';
import { parseRole, type Role, ROLES, roleRank } from '../model/roles';
import { keyPairResolver } from './key-pair';
import type { TokenService } from '../tokens/tokens';
import { type AuthContext, CREDENTIAL_KINDS, type CredentialKind } from '../model/auth-context';
import type { RequestFacts } from './facts';
import type { AccountLimits } from '../model/key-record';
import {
  admitAll,
  type HeaderPair,
  type LimitUse,
  readUsage,
  SCOPE_DEFINITION_CHECKS,
  ScopeCounter,
  type ScopeDefinition,
  type ScopeUsage,
} from './limits';
import { AdmissionStore } from '../rate-limit/admission-store';
import { SharedCounters } from '../rate-limit/shared-counters';
import { HostClient } from '../host/host-client';
import { HostIdempotencyStore } from '../host/host-idempotency-store';
import type { ThreadLink } from '../host/thread-share';
import {
  DEFAULT_IDEMPOTENCY_TTL_SECONDS,
  DEFAULT_MAX_ANSWER_BYTES,
  MAX_IN_FLIGHT_SECONDS,
  type IdempotencyEvent,
  type IdempotencyMode,
  IdempotencyRule,
  type IdempotencyStep,
  MAX_IDEMPOTENCY_TTL_SECONDS,
  MAX_MAX_ANSWER_BYTES,
  MIN_IDEMPOTENCY_TTL_SECONDS,
  MIN_MAX_ANSWER_BYTES,
} from './idempotency';
import {
  type IdempotencyStore,
  type IdempotencyStoreState,
  MemoryIdempotencyStore,
  RedisIdempotencyStore,
} from '../idempotency/store';
import { context as contexts, trace, type Span } from '@opentelemetry/api';
import {
  recordDecision,
  recordFailure,
  type RequestSpan,
  startChildSpan,
  traceStep,
} from './tracing';

/**
 * The decision core (no Express, no HTTP objects): `decide(facts, policy)` says whether a request
 * may pass, and with which headers. It owns the order of the checks, so no caller can get it wrong:
 *
 * 1. credentials in the query string: `400`;
 * 2. the failed-authentication budget, checked and counted in the same synchronous step as the
 *    comparison of the credential, so no concurrent request slips a guess past a spent budget;
 * 3. the credential, against the key store as it is now (revocations and role changes apply to
 *    tokens already issued);
 * 4. the account's IP whitelist, then the route's own address list when it has one (a refusal by
 *    either counts against the budget), then the route's role, then its permission, which a restricted key must hold (publishable keys, which only
 *    browser-safe routes take, are never restricted);
 * 5. the limits, all or nothing in one store call: a publishable key's cap per client IP
 *    (counted per account and IP) and the route's scope; a refusal by one
 *    spends none of the others;
 * 6. shadow mode: a limit scope or an account's whitelist in shadow adds a finding to an allowed
 *    decision instead of refusing (never credentials, roles or the failed-authentication budget);
 * 7. on a route that takes an `Idempotency-Key`, the key: claimed for a first use, the stored
 *    answer for a retry, or a refusal (`lib/core/idempotency.ts`).
 *
 * A refusal is a decision, not an exception: `decide()` rejects only on a fault (a key store that
 * throws), which a door reports as `500 internal_error`.
 */

export type Scopes = Readonly<Record<string, ScopeDefinition>>;

export interface GateOptions<S extends Scopes = Scopes> {
  /** Where keys are looked up; read on every request, so a reloaded store applies at once. */
  readonly keyStore: KeyStore;
  /** Verifies tokens; required by policies that accept `'token'` and by the token exchange. */
  readonly tokens?: TokenService | undefined;
  /**
   * The limit scopes, declared once: `{ orders: { limit: 100, per: 'account' } }`, each with its
   * own `window` if it needs one (`{ limit: 10, window: 1000 }` for ten a second).
   */
  readonly scopes: S;
  /**
   * Window of the failure budget and of every scope without its own `window`, in ms, from 1 000
   * to 86 400 000. Defaults to 60 000.
   */
  readonly windowMs?: number;
  /** Failed authentications allowed per client IP and window. Defaults to 20. */
  readonly authFailureLimit?: number;
  /** Shared counters; without it every limit counts in this process's memory. */
  readonly redis?: LimiterRedis | undefined;
  /** Prefix of every Redis key. Defaults to `tollgate:rl:`. */
  readonly redisPrefix?: string | undefined;
  /** Instances expected to share the limits, used while Redis is unusable. Defaults to 1. */
  readonly expectedInstances?: number | undefined;
  /** Name of the publishable-key header. Defaults to `X-Service-Public-API-Key`. */
  readonly publicKeyHeader?: string | undefined;
  /** Refuse secret keys from browsers (`Origin`, `Sec-Fetch-*`). Defaults to `true`. */
  readonly refuseSecretKeysFromBrowsers?: boolean | undefined;
  /** A secret key seen where it can leak; receives the key id, never the secret. */
  readonly onSecurityEvent?: ((event: SecurityEvent, facts: RequestFacts) => void) | undefined;
  /** Every decision, allowed or refused, for audit logs and metrics. */
  readonly onDecision?: ((event: DecisionEvent) => void) | undefined;
  /**
   * Rules tried before they are enforced: a request they would refuse passes, and its decision
   * carries a `ShadowFinding` (log it, count it as `would_refuse`). Only limit scopes and accounts'
   * IP whitelists can be in shadow: credentials, roles and the failed-authentication budget are
   * always enforced. Defaults to none.
   */
  readonly shadow?: ShadowOptions | undefined;
  /**
   * Permission names a route may require besides the seven built-in ones (`wallets:read`, …), each
   * `resource:action`; at most 16 in all. Give the key store the same (its `permissions` option).
   * Defaults to none.
   */
  readonly permissions?: readonly string[] | undefined;
  /**
   * Idempotent requests, for routes whose policy names `idempotency`: a retry with the same
   * `Idempotency-Key` gets the first answer instead of running twice. Kept in Redis when `redis` is
   * given (a Redis that cannot be used refuses keyed requests `503`), in memory otherwise.
   * Defaults to none: a policy naming `idempotency` is then refused at start.
   */
  readonly idempotency?: IdempotencyOptions | undefined;
  /**
   * Whether a traced request's key lookup and admission get child spans of their own
   * (`tollgate.key_lookup`, `tollgate.admission`). Defaults to `false`: what they find (the key,
   * the account, the refusing scope) is on the request's span already, and each span more is
   * recorded, serialised and sent for every sampled request.
   */
  readonly traceSteps?: boolean | undefined;
  /**
   * This gate's share of what the worker threads of its process count together
   * (`ThreadShare#link()`, made on the main thread): limits and idempotency records kept in memory
   * count once for the process, and its failed-authentication budget is one budget whatever thread
   * a guess reaches. Give every thread's gate the same options. Defaults to none: this thread
   * counts alone.
   */
  readonly threads?: ThreadLink | undefined;
}

/** The gate's idempotent requests: the secret their records are sealed under, and their bounds. */
export interface IdempotencyOptions {
  /**
   * At least 32 bytes, kept secret (the token secret fits): stored answers are sealed, and keys
   * and fingerprints hashed, under keys derived from it. Every instance sharing Redis needs the
   * same one; a stored answer sealed under another is never replayed (its retries get `409`).
   */
  readonly secret: string | Buffer;
  /** How long an answer is replayed, from when it was stored, in seconds: 60 to 604 800. Defaults to 86 400. */
  readonly ttlSeconds?: number | undefined;
  /**
   * The largest answer body kept for replays, in bytes: 1 024 to 16 777 216. The retries of a
   * larger answer are refused `409 idempotency_key_in_use`, naming its status. Defaults to 65 536.
   */
  readonly maxAnswerBytes?: number | undefined;
  /**
   * How long a first request may take to be answered, in seconds: 1 to 3 600. Its retries meanwhile
   * are told to retry shortly (`409` with `Retry-After: 1`); after it, a key still unanswered (its
   * instance stopped, its answer could not be kept, or a reverse proxy forwarded it) is of unknown
   * outcome: `409` without `Retry-After`. Defaults to 60.
   */
  readonly inFlightSeconds?: number | undefined;
  /** Without Redis: the records kept in memory at most (each key, answered or in flight). Defaults to 100 000. */
  readonly maxRecords?: number | undefined;
  /** What became of each key: for metrics and audit lines. Never told a body. */
  readonly onOutcome?: ((event: IdempotencyEvent) => void) | undefined;
}

export interface ShadowOptions {
  /** Scopes whose limit is counted but not enforced (their `RateLimit` headers are not sent). */
  readonly scopes?: readonly string[] | undefined;
  /** Accounts whose IP whitelist is checked but not enforced. */
  readonly ipWhitelistAccounts?: readonly string[] | undefined;
}

/** A rule in shadow mode that would have refused the request. */
export interface ShadowFinding {
  readonly rule: 'limit' | 'ip_whitelist';
  /** The scope, for `limit`. */
  readonly scope?: string | undefined;
  /** The refusal that was not given. */
  readonly error: TollgateError;
}

/** What a route requires. `limit` names one of the gate's scopes. */
export interface RoutePolicy<Name extends string = string> {
  /** The credentials the route accepts, or `'key-pair'` for the token exchange. */
  readonly accept: readonly CredentialKind[] | 'key-pair';
  /** The lowest role allowed. Defaults to none (every authenticated key). */
  readonly role?: Role | undefined;
  /**
   * The permission a restricted key must hold, checked after the role; keys without
   * a list, and publishable keys, are not restricted. Defaults to none.
   */
  readonly permission?: string | undefined;
  /** The scope every allowed request counts against. */
  readonly limit: Name;
  /**
   * A per-IP scope that requests made with a publishable key also count against, per account and
   * client IP, so one browser cannot spend the account's whole `limit`; both are
   * admitted all or nothing. `limit` must then count per account. Defaults to none.
   */
  readonly publishableLimit?: Name | undefined;
  /**
   * `true` (the default) applies the account's IP whitelist to secret keys and tokens; `false`
   * skips it. A list of addresses and CIDR ranges (`['10.0.0.0/8']`) applies the account's
   * whitelist and also this route's own: a request, whatever its credential, from a client outside
   * the list is refused with `403 ip_not_whitelisted`.
   */
  readonly ipWhitelist?: boolean | readonly string[] | undefined;
  /** A name for logs and metrics. Defaults to the scope's name. */
  readonly id?: string | undefined;
  /**
   * `'optional'` takes an `Idempotency-Key` and replays the first answer to its retries;
   * `'required'` also refuses requests without one (`400 idempotency_key_required`). Needs the
   * gate's `idempotency` option. Defaults to none: the header is passed on, never read.
   */
  readonly idempotency?: IdempotencyMode | undefined;
}

/**
 * A route policy checked and compiled by `gate.policy()`, once at start, for `decide()`. Only its
 * id and whether the credential may be in the body are public; the rest is the gate's own.
 */
export interface CompiledPolicy {
  readonly id: string;
  readonly readsBody: boolean;
  /** @internal */
  readonly resolve: (facts: RequestFacts) => AuthContext;
  /** @internal */
  readonly minimumRank: number | undefined;
  /** @internal */
  readonly role: Role | undefined;
  /** @internal */
  readonly permission: string | undefined;
  /** @internal */
  readonly whitelist: boolean;
  /** @internal The route's own whitelist, for every credential. */
  readonly routeWhitelist?: IpWhitelist | undefined;
  /** @internal The limits of a request made with a secret key or a token. */
  readonly limits: readonly LimitUse[];
  /** @internal The limits of a request made with a publishable key (its cap first). */
  readonly publishableLimits: readonly LimitUse[];
  /** Whether the route takes an `Idempotency-Key`, and requires it; `undefined`: it does not. */
  readonly idempotency: IdempotencyMode | undefined;
}

/** A first use's claim, or the stored answer of a retry, on an allowed decision. */
export type IdempotencyPass = Exclude<IdempotencyStep, { readonly kind: 'refused' }>;

export type Decision =
  | {
      readonly allowed: true;
      readonly auth: AuthContext;
      readonly headers: readonly HeaderPair[];
      /** Rules in shadow mode that would have refused it; absent when none. */
      readonly shadow?: readonly ShadowFinding[] | undefined;
      /**
       * On a route that takes an `Idempotency-Key`, for a request carrying one: the claim of a
       * first use, whose answer the door keeps (`claim.complete()`), or the answer to replay
       * instead of going on. Absent otherwise.
       */
      readonly idempotency?: IdempotencyPass | undefined;
    }
  | {
      readonly allowed: false;
      readonly error: TollgateError;
      readonly auth: AuthContext | undefined;
      readonly headers: readonly HeaderPair[];
    };

export interface DecisionEvent {
  readonly policy: string;
  readonly facts: RequestFacts;
  readonly decision: Decision;
}

export interface Gate<Name extends string = string> {
  /** Checks a route's policy against the gate's scopes and options; throws `ConfigurationError`. */
  policy(policy: RoutePolicy<Name>): CompiledPolicy;
  decide(facts: RequestFacts, policy: CompiledPolicy): Promise<Decision>;
  /**
   * The refusal due before the body is read, as a decision (observers see it): a credential in
   * the query string (reported when it is a known key), or the client's spent failure budget (so
   * a correct credential read later is refused like a wrong one); `undefined` when `decide()` may
   * run. `decide()` checks the query too, at no second cost, for a door that does not call this.
   */
  refuseEarly(facts: RequestFacts, policy: CompiledPolicy): Decision | undefined;
  /**
   * Step 1 alone, for a request no policy covers (a path with no route): the refusal of a
   * credential in its query string, reported when it is a known key; `undefined` when there is
   * none. Not a decision: observers see the answer, not a policy's outcome.
   */
  queryRefusal(facts: RequestFacts): TollgateError | undefined;
  /** Where limits are counted now. */
  rateLimitState(): RateLimitState;
  /** Where idempotency keys are kept now; `undefined` without the `idempotency` option. */
  idempotencyState(): IdempotencyStoreState | undefined;
  /**
   * An account's use of every per-account scope in the current window, read from the counters
   * that decide (Redis, or memory while it is unusable) without spending any.
   * `limits`: the account's overrides, as a key of the account carries them.
   */
  usage(accountId: string, limits?: AccountLimits): Promise<ScopeUsage[]>;
  /** Stops timers. The Redis connection is the caller's. */
  close(): void;
  readonly authFailures: AuthFailureLimiter;
}

/**
 * The credentials an account's IP whitelist restricts: secret keys and tokens. Publishable keys are
 * made for browsers, which call from any address.
 */
const WHITELISTED_CREDENTIALS: ReadonlySet<CredentialKind> = new Set(['secret', 'token']);

/** The rule of each option of the gate, checked when it is created. */
export const GATE_OPTION_CHECKS: OptionChecks<GateOptions> = {
  keyStore: required(KEY_STORE),
  tokens: TOKEN_SERVICE,
  scopes: required(
    check('an object of scopes, { orders: { limit: 100 } }', (value) => isObject.test(value)),
  ),
  windowMs: wholeNumber(MIN_WINDOW_MS, MAX_WINDOW_MS),
  authFailureLimit: wholeNumber(1),
  redis: LIMITER_REDIS,
  redisPrefix: isString,
  expectedInstances: wholeNumber(1),
  publicKeyHeader: isNonEmptyString,
  refuseSecretKeysFromBrowsers: isBoolean,
  onSecurityEvent: isFunction,
  onDecision: isFunction,
  shadow: isObject,
  permissions: isStringList,
  idempotency: isObject,
  traceSteps: isBoolean,
  threads: THREAD_LINK,
};

const SHADOW_OPTION_CHECKS: OptionChecks<ShadowOptions> = {
  scopes: isStringList,
  ipWhitelistAccounts: isStringList,
};

/**
 * The rule of each field of a route's policy. `accept`'s and `limit`'s are completed by the gate,
 * which knows its scopes; a list given as `ipWhitelist` is the route's own whitelist.
 */
export const ROUTE_POLICY_CHECKS: OptionChecks<RoutePolicy> = {
  accept: required(either(listOf(CREDENTIAL_KINDS), oneOf(['key-pair']))),
  role: oneOf(ROLES),
  permission: isString,
  limit: required(isString),
  publishableLimit: isString,
  ipWhitelist: check(
    "true or false (apply the account's own whitelist, true by default), or a list of CIDR ranges the route also requires",
    (value) => isBoolean.test(value) || isStringList.test(value),
  ),
  id: isString,
  idempotency: oneOf(['optional', 'required']),
};

const IDEMPOTENCY_OPTION_CHECKS: OptionChecks<IdempotencyOptions> = {
  secret: required(
    check(
      'a secret of at least 32 bytes (a string or a Buffer)',
      (value) =>
        (typeof value === 'string' && Buffer.byteLength(value, 'utf8') >= 32) ||
        (Buffer.isBuffer(value) && value.length >= 32),
    ),
  ),
  ttlSeconds: wholeNumber(MIN_IDEMPOTENCY_TTL_SECONDS, MAX_IDEMPOTENCY_TTL_SECONDS),
  maxAnswerBytes: wholeNumber(MIN_MAX_ANSWER_BYTES, MAX_MAX_ANSWER_BYTES),
  inFlightSeconds: wholeNumber(1, MAX_IN_FLIGHT_SECONDS),
  maxRecords: wholeNumber(1),
  onOutcome: isFunction,
};

/** What a scope option accepts: one of the names declared. */
export function scopeNameCheck(declared: Iterable<string>): Check {
  return check(
    `the name of a declared scope (${[...declared].join(', ') || 'none declared'})`,
    isString.test,
  );
}

/** The checks of a route's policy, with the scope names of a gate in the messages. */
export function routePolicyChecks(declared: Iterable<string>): OptionChecks<RoutePolicy> {
  const scopeName = scopeNameCheck(declared);
  return { ...ROUTE_POLICY_CHECKS, limit: required(scopeName), publishableLimit: scopeName };
}

/** How messages name a route's declaration: `protect("orders")`, by its scope when it has one. */
export function protectCall(spec: unknown): string {
  const limit = typeof spec === 'object' && spec !== null ? (spec as RoutePolicy).limit : undefined;
  return typeof limit === 'string' ? `protect(${JSON.stringify(limit)})` : 'protect()';
}

/**
 * The decision core: checks `options` and returns the gate that decides every request of the
 * routes compiled with `gate.policy()`.
 */
export function createGate<S extends Scopes>(options: GateOptions<S>): Gate<keyof S & string> {
  return buildGate(options, 'createGate()');
}

/** `createGate()`, naming `where` (the factory the user called) in its errors. */
export function buildGate<S extends Scopes>(
  options: GateOptions<S>,
  where: string,
): Gate<keyof S & string> {
  checkOptions(where, options, GATE_OPTION_CHECKS);
  const windowMs = options.windowMs ?? DEFAULT_WINDOW_MS;
  const traceSteps = options.traceSteps === true;
  const expectedInstances = options.expectedInstances;
  if (options.shadow !== undefined) {
    checkOptions(`${where}: shadow`, options.shadow, SHADOW_OPTION_CHECKS);
  }
  if (Object.hasOwn(options.scopes, 'auth-failures')) {
    throw new ConfigurationError(
      `${where}: scope name "auth-failures" is the failure budget's own`,
    );
  }
  for (const [name, definition] of Object.entries(options.scopes)) {
    checkOptions(`${where}: scope ${name}`, definition, SCOPE_DEFINITION_CHECKS);
  }
  assertLimitScopes(options.keyStore, options.scopes);
  if (options.idempotency !== undefined) {
    checkOptions(`${where}: idempotency`, options.idempotency, IDEMPOTENCY_OPTION_CHECKS);
  }
  const permissions = permissionNames(options.permissions, 'tollgate()');
  assertPermissionNames(options.keyStore, permissions);
  const prefix = options.redisPrefix ?? DEFAULT_PREFIX;
  // One store for every scope, so a request meeting several is admitted in one step, and for the
  // failure budget: one fallback and one health signal for every counter of the gate.
  const host = options.threads === undefined ? undefined : new HostClient(options.threads.port);
  const sharedCounters =
    options.threads === undefined ? undefined : new SharedCounters(options.threads.counters);
  const store = new AdmissionStore({
    windowMs,
    redis: options.redis,
    expectedInstances,
    sharedCounters,
  });
  const scopes = new Map<string, ScopeCounter>();
  for (const [name, definition] of Object.entries(options.scopes)) {
    scopes.set(
      name,
      new ScopeCounter({
        name,
        definition,
        windowMs,
        prefix,
        redis: options.redis,
        expectedInstances,
        store,
      }),
    );
  }
  const authFailures = authFailureLimiterOn(store, {
    limit: options.authFailureLimit ?? DEFAULT_AUTH_FAILURE_LIMIT,
    windowMs,
    redis: options.redis,
    prefix,
    expectedInstances,
    sharedFailures: options.threads?.failures,
  });
  const shadowScopes = new Set(options.shadow?.scopes ?? []);
  for (const name of shadowScopes) {
    if (!scopes.has(name)) {
      throw new ConfigurationError(
        `tollgate: shadow.scopes: unknown scope ${JSON.stringify(name)}; declared: ${[...scopes.keys()].join(', ') || 'none'}`,
      );
    }
  }
  const shadowWhitelists: ReadonlySet<string> = new Set(options.shadow?.ipWhitelistAccounts ?? []);
  const idempotency =
    options.idempotency === undefined
      ? undefined
      : new IdempotencyRule({
          secret: options.idempotency.secret,
          // Shared when limits are: a per-instance fallback could forward a retry twice.
          store: idempotencyStore(options.idempotency, options.redis, prefix, host),
          ttlSeconds: options.idempotency.ttlSeconds ?? DEFAULT_IDEMPOTENCY_TTL_SECONDS,
          maxAnswerBytes: options.idempotency.maxAnswerBytes ?? DEFAULT_MAX_ANSWER_BYTES,
          inFlightSeconds: options.idempotency.inFlightSeconds,
          onOutcome: options.idempotency.onOutcome,
        });
  const { keyStore, tokens } = options;
  const onSecurityEvent = options.onSecurityEvent;
  const onDecision = options.onDecision;

  const scopeNamed = (name: string | undefined, where: string): ScopeCounter => {
    const scope = name === undefined ? undefined : scopes.get(name);
    if (scope === undefined) {
      throw new ConfigurationError(
        `${where}: unknown scope ${JSON.stringify(name)}; declared: ${[...scopes.keys()].join(', ') || 'none'}`,
      );
    }
    return scope;
  };

  const policyChecks = routePolicyChecks(scopes.keys());

  const policy = (spec: RoutePolicy<keyof S & string>): CompiledPolicy => {
    const where = protectCall(spec);
    checkOptions(where, spec, policyChecks);
    const scope = scopeNamed(spec.limit, `${where} limit`);
    const publishableScope =
      spec.publishableLimit === undefined
        ? undefined
        : scopeNamed(spec.publishableLimit, `${where} publishableLimit`);
    if (publishableScope !== undefined && (scope.per !== 'account' || publishableScope === scope)) {
      // The cap protects an account's budget, and shares its Redis hash slot.
      throw new ConfigurationError(
        `${where} publishableLimit: another scope than limit, which must count per account`,
      );
    }
    const limits: LimitUse[] = [limitUse(scope, false)];
    const publishableLimits: LimitUse[] =
      publishableScope === undefined ? limits : [limitUse(publishableScope, true), ...limits];
    const role = spec.role === undefined ? undefined : parseRole(spec.role, `${where} role`);
    if (spec.permission !== undefined && !permissions.includes(spec.permission)) {
      throw new ConfigurationError(
        `${where} permission: unknown permission ${JSON.stringify(spec.permission)}; declared: ${permissions.join(', ')}`,
      );
    }
    if (spec.idempotency !== undefined && idempotency === undefined) {
      throw new ConfigurationError(
        `${where} idempotency: ${where.startsWith('protect') ? 'tollgate()' : 'the gate'} needs the idempotency option ({ secret })`,
      );
    }
    if (spec.idempotency !== undefined && spec.accept === 'key-pair') {
      throw new ConfigurationError(`${where} idempotency: not for the token exchange`);
    }
    let resolve: (facts: RequestFacts) => AuthContext;
    let readsBody: boolean;
    if (spec.accept === 'key-pair') {
      resolve = keyPairResolver({
        keyStore,
        refuseSecretKeysFromBrowsers: options.refuseSecretKeysFromBrowsers,
        onSecurityEvent,
      });
      readsBody = true;
    } else {
      if (spec.accept.length === 0) {
        throw new ConfigurationError(
          `${where} accept: name at least one of ${CREDENTIAL_KINDS.join(', ')}`,
        );
      }
      resolve = credentialResolver({
        keyStore,
        accept: spec.accept,
        tokens,
        publicKeyHeader: options.publicKeyHeader,
        refuseSecretKeysFromBrowsers: options.refuseSecretKeysFromBrowsers,
        onSecurityEvent,
      });
      readsBody = spec.accept.includes('publishable');
    }
    return {
      id: spec.id ?? spec.limit,
      readsBody,
      resolve,
      role,
      minimumRank: role === undefined ? undefined : roleRank(role),
      permission: spec.permission,
      whitelist: spec.ipWhitelist !== false,
      routeWhitelist:
        typeof spec.ipWhitelist === 'object'
          ? IpWhitelist.parse(spec.ipWhitelist, `${where} ipWhitelist`)
          : undefined,
      limits,
      publishableLimits,
      idempotency: spec.idempotency,
    };
  };

  const limitUse = (scope: ScopeCounter, perAccountIp: boolean): LimitUse => ({
    scope,
    perAccountIp,
    enforced: !shadowScopes.has(scope.name),
  });

  const rateLimitState = (): RateLimitState =>
    options.redis === undefined ? 'memory' : options.redis.health.state;

  const accountScopes = [...scopes.values()].filter((scope) => scope.per === 'account');
  const usage = (accountId: string, limits?: AccountLimits): Promise<ScopeUsage[]> =>
    readUsage(store, accountScopes, accountId, limits);

  /** Steps 2 and 3, under the failure budget. */
  const authenticate = (facts: RequestFacts, compiled: CompiledPolicy): Promise<AuthContext> =>
    new Promise((resolve, reject) => {
      const requestSpan = traceSteps ? facts.tollgateSpan : undefined;
      authFailures.queueAttempt(
        facts,
        requestSpan === undefined
          ? () => compiled.resolve(facts)
          : () =>
              traceStep(
                requestSpan,
                'tollgate.key_lookup',
                () => compiled.resolve(facts),
                describeLookup,
              ),
        (error, auth) => {
          if (auth === undefined) reject(error instanceof Error ? error : new Error(String(error)));
          else resolve(auth);
        },
      );
    });

  /** Step 4; a whitelist in shadow mode adds a finding instead of refusing. */
  const authorise = (
    facts: RequestFacts,
    compiled: CompiledPolicy,
    auth: AuthContext,
    findings: ShadowFinding[],
  ): void => {
    if (
      compiled.whitelist &&
      WHITELISTED_CREDENTIALS.has(auth.credential) &&
      auth.ipWhitelist !== undefined &&
      !auth.ipWhitelist.allows(facts.clientIp)
    ) {
      const refusal = new IpNotWhitelistedError();
      if (shadowWhitelists.has(auth.accountId)) {
        findings.push({ rule: 'ip_whitelist', error: refusal });
      } else {
        authFailures.record(facts, refusal);
        throw refusal;
      }
    }
    if (compiled.routeWhitelist !== undefined && !compiled.routeWhitelist.allows(facts.clientIp)) {
      // The route's own list is the operator's rule, not an account's: never in shadow mode.
      const refusal = new IpNotWhitelistedError();
      authFailures.record(facts, refusal);
      throw refusal;
    }
    if (
      compiled.minimumRank !== undefined &&
      compiled.role !== undefined &&
      roleRank(auth.role) < compiled.minimumRank
    ) {
      throw new InsufficientRoleError(compiled.role);
    }
    if (
      compiled.permission !== undefined &&
      auth.permissions !== undefined &&
      auth.credential !== 'publishable' &&
      !auth.permissions.has(compiled.permission)
    ) {
      throw new InsufficientPermissionError(compiled.permission);
    }
  };

  const decideNow = async (
    facts: RequestFacts,
    compiled: CompiledPolicy,
    headers: HeaderPair[],
  ): Promise<Decision> => {
    let auth: AuthContext | undefined;
    const findings: ShadowFinding[] = [];
    try {
      // Step 1: a credential in the query string is refused (and reported when it is a known key).
      refuseCredentialsInQuery(facts, keyStore, onSecurityEvent);
      auth = await authenticate(facts, compiled);
      authorise(facts, compiled, auth, findings);
      // Step 5: every limit the request meets, all or nothing, in one store call. Shadow scopes
      // are counted as if enforced, so the counts are right the day they are; nothing is sent.
      const uses = auth.credential === 'publishable' ? compiled.publishableLimits : compiled.limits;
      const admitted = auth;
      // Traced step by step, the store call runs in a span of its own; otherwise nothing is made.
      const stepSpan = traceSteps ? facts.tollgateSpan : undefined;
      const refusal =
        stepSpan === undefined
          ? await admitAll(store, uses, admitted, facts.clientIp, headers, findings)
          : await traceAdmission(stepSpan, uses, rateLimitState(), () =>
              admitAll(store, uses, admitted, facts.clientIp, headers, findings),
            );
      if (refusal !== undefined) throw refusal;
    } catch (error) {
      if (!isRefusal(error)) throw error;
      return { allowed: false, error, auth, headers };
    }
    // Step 7: only an admitted request claims a key (or is answered from one).
    // Without a key the step is decided at once: no promise, no turn of the microtask queue.
    const checked =
      compiled.idempotency === undefined || idempotency === undefined
        ? undefined
        : idempotency.check(facts, compiled.id, compiled.idempotency, auth);
    const step = checked instanceof Promise ? await checked : checked;
    if (step === undefined) {
      return findings.length === 0
        ? { allowed: true, auth, headers }
        : { allowed: true, auth, headers, shadow: findings };
    }
    if (step.kind === 'refused') return { allowed: false, error: step.error, auth, headers };
    return findings.length === 0
      ? { allowed: true, auth, headers, idempotency: step }
      : { allowed: true, auth, headers, shadow: findings, idempotency: step };
  };

  const decide = async (facts: RequestFacts, compiled: CompiledPolicy): Promise<Decision> => {
    const decision = await decideNow(facts, compiled, []);
    if (facts.tollgateSpan !== undefined) recordDecision(facts.tollgateSpan, compiled.id, decision);
    onDecision?.({ policy: compiled.id, facts, decision });
    return decision;
  };

  const queryRefusal = (facts: RequestFacts): TollgateError | undefined => {
    try {
      refuseCredentialsInQuery(facts, keyStore, onSecurityEvent);
    } catch (error) {
      if (isRefusal(error)) return error;
      throw error;
    }
    return undefined;
  };

  /** Step 1, and the spent budget of step 2: the refusals due before a body is read. */
  const earlyRefusal = (facts: RequestFacts): TollgateError | undefined =>
    queryRefusal(facts) ?? authFailures.refusalFor(facts);

  const refuseEarly = (facts: RequestFacts, compiled: CompiledPolicy): Decision | undefined => {
    const error = earlyRefusal(facts);
    if (error === undefined) return undefined;
    const decision: Decision = { allowed: false, error, auth: undefined, headers: [] };
    if (facts.tollgateSpan !== undefined) recordDecision(facts.tollgateSpan, compiled.id, decision);
    onDecision?.({ policy: compiled.id, facts, decision });
    return decision;
  };

  return {
    policy,
    decide,
    refuseEarly,
    queryRefusal,
    rateLimitState,
    idempotencyState: () => idempotency?.state(),
    usage,
    // The failure budget counts in `store` too.
    close: () => {
      store.shutdown();
      host?.close();
    },
    authFailures,
  };
}

/**
 * Where idempotency records live: Redis when given; else the process's main thread when the gate
 * is one of several threads; else this thread's memory.
 */
function idempotencyStore(
  options: IdempotencyOptions,
  redis: LimiterRedis | undefined,
  prefix: string,
  host: HostClient | undefined,
): IdempotencyStore {
  if (redis !== undefined) return new RedisIdempotencyStore({ redis, prefix });
  if (host !== undefined) {
    return new HostIdempotencyStore({
      host,
      name: `${prefix}idempotency`,
      maxRecords: options.maxRecords,
    });
  }
  return new MemoryIdempotencyStore({ maxRecords: options.maxRecords });
}

/** The key lookup's span: who the credential is, never the credential. */
function describeLookup(span: Span, auth: AuthContext): void {
  span.setAttribute('tollgate.credential', auth.credential);
  span.setAttribute('tollgate.account.id', auth.accountId);
  span.setAttribute('tollgate.key.id', auth.keyId);
}

/**
 * The admission's span: the scopes the request counts against, where they are counted (`shared`
 * in Redis, `memory`, or `degraded`), and the scope that refused it. The store call runs in the
 * span's context, so an instrumentation of the Redis client nests its command under it.
 */
async function traceAdmission(
  requestSpan: RequestSpan,
  uses: readonly LimitUse[],
  state: RateLimitState,
  admit: () => Promise<RateLimitedError | undefined>,
): Promise<RateLimitedError | undefined> {
  const span = startChildSpan(requestSpan, 'tollgate.admission');
  if (span === undefined) return admit();
  if (span.isRecording()) {
    span.setAttribute(
      'tollgate.limit.scopes',
      uses.map((use) => use.scope.name),
    );
    span.setAttribute('tollgate.rate_limits', state);
  }
  try {
    const refusal = await contexts.with(trace.setSpan(requestSpan.context, span), admit);
    if (refusal !== undefined) {
      span.setAttribute('tollgate.error.code', refusal.code);
      if (refusal.scope !== undefined) span.setAttribute('tollgate.limit.scope', refusal.scope);
    }
    return refusal;
  } catch (error) {
    recordFailure(span, error);
    throw error;
  } finally {
    span.end();
  }
}

/**
 * An account's limits apply to the gate's per-account scopes only: a key store that accepts
 * overrides of a scope the gate does not count per account would have them silently unused, so
 * such a store is refused at creation. A store that does not say (`limitScopes` absent) is taken
 * as it is: an override of a scope the gate does not declare is never read, and one of a per-IP
 * scope would set that IP counter's limit by the account of the request (documented: check them).
 */
function assertLimitScopes(keyStore: KeyStore, scopes: Scopes): void {
  const declared = keyStore.limitScopes;
  if (declared === undefined) return;
  for (const [name, per] of Object.entries(declared)) {
    if (per !== 'account') continue;
    const scope = Object.hasOwn(scopes, name) ? scopes[name] : undefined;
    if (scope === undefined || (scope.per ?? 'account') !== 'account') {
      throw new ConfigurationError(
        `tollgate: keyStore limitScopes: ${JSON.stringify(name)} ${scope === undefined ? 'is not a declared scope' : 'is counted per ip here'}; the store must accept overrides of the gate's per-account scopes only`,
      );
    }
  }
}

/**
 * A store that checks keys' permissions against its own names (`permissionNames`) must know every
 * name the gate declares: otherwise no key of it could hold that permission, and the routes that
 * require it would refuse every restricted key. A store that does not say is taken as it is.
 */
function assertPermissionNames(keyStore: KeyStore, names: readonly string[]): void {
  const known = keyStore.permissionNames;
  if (known === undefined) return;
  const missing = names.filter((name) => !known.includes(name));
  if (missing.length > 0) {
    throw new ConfigurationError(
      `tollgate: keyStore permissions: the store does not know ${missing.map((name) => JSON.stringify(name)).join(', ')}; give it the same permissions option as tollgate()`,
    );
  }
}

/** A refusal (4xx) answered to the client, as opposed to a fault. */
function isRefusal(error: unknown): error is TollgateError {
  return error instanceof TollgateError && error.status < 500;
}
