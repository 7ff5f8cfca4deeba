import {
  checkOptions,
  isFunction,
  LIMITER_REDIS,
  objectWith,
  type OptionChecks,
  required,
  wholeNumber,
} from '../options';
import {
  type CompactKey,
  compactKey,
  CompactMemoryStore,
  type CounterReading,
} from './compact-memory-store';
import { ADMIT_SCRIPT, DECREMENT_SCRIPT, READ_SCRIPT } from './admission-scripts';
import { type RedisCommandFn, type RedisReply, redisCommandFn, scriptSha1 } from './redis-commands';
import type { RedisHealth } from './redis-health';
import { type LocalWindows, RollingWindows } from './rolling-windows';
import type { SharedCounters } from './shared-counters';
import { type LimiterRedis, MAX_WINDOW_MS, MIN_WINDOW_MS } from './window';

/**
 * All-or-nothing admission over several counters, each a rolling or a fixed window of its own
 * length (see `admission-scripts.ts`): a request is admitted only if every enforced counter it
 * meets has room, and then counts once in each; a refused request counts nowhere, so every
 * counter holds exactly the requests it admitted. The exception is an event that has already
 * happened (`countWhenFull`, a failed credential comparison), which Redis records in its rolling
 * counter whether or not it had room.
 *
 * - In Redis: one script call (`EVALSHA`, `EVAL` once after `NOSCRIPT`) per request, through the
 *   limiter's `CommandBatch`, so the commands of one event-loop turn still leave in one socket
 *   write under one deadline. The script reads every counter, then increments all of them or
 *   none. The keys of one call must share a Cluster hash slot: the caller tags them
 *   (`account:{id}`).
 * - In memory (no Redis, or Redis unusable): the same check in one synchronous step over each
 *   scope's local windows (`RollingWindows` or `CompactMemoryStore`); while Redis is unusable
 *   the local count is multiplied by `expectedInstances`, so N gateways admit about one limit
 *   between them. With `sharedCounters`, those windows are in memory every worker thread of the
 *   process shares, and the step runs under its lock, so the workers count as one instance.
 * - Keys seen full (count at their limit) are remembered with that count until they next have
 *   room (their oldest admission leaves a rolling window; a fixed window ends), and refused
 *   without asking Redis while the limit asked for is not above the count: the limit is the
 *   request's own (per-account overrides), never one fixed per scope.
 *
 * Every counter of the kit decides here: the core's scopes (the publishable cap and per-IP scopes
 * among them), the failed-authentication budget and, through `TollgateStore`, every
 * express-rate-limit limiter, `createRateLimiter()`'s included. So there is one fallback while
 * Redis is away, one instance multiplier and one health signal. An increment-then-check store
 * (rate-limit-redis) counts refused requests too and takes one script call per scope, so it can
 * neither keep a refusal from spending the other limits nor check several limits in one round trip.
 */

/** The IPv4 prefix of a scope that names none. */
const DEFAULT_IPV4_KEY_PREFIX = 'ip:';

/** A key seen full: a count it holds at least until `until`, and when it next has room. */
interface Full {
  readonly count: number;
  /**
   * Until when it is refused from memory: its reset counted from when the deciding call was sent
   * (surely full until then), or for a failure budget from when the answer came (never earlier
   * than the real reset).
   */
  readonly until: number;
  /** Its reset as read on the answer, never earlier than the real one: what a refusal reports. */
  readonly resetAt: number;
}

/** How one scope counts. */
export interface CountersOptions {
  /** Keys that are this prefix and an IPv4 address are kept as numbers. Defaults to `ip:`. */
  readonly ipv4KeyPrefix?: string | undefined;
  /** Defaults to the store's window. */
  readonly windowMs?: number | undefined;
  /** A rolling window (exact over any span) rather than a fixed one. Defaults to `false`. */
  readonly rolling?: boolean | undefined;
}

/** One scope's counters in this process: the local counts, and the keys seen full. */
export class LocalCounters {
  readonly memory: LocalWindows;
  /** Put before each key in Redis: `tollgate:rl:payments:`, then `rolling:` for a rolling scope. */
  readonly prefix: string;
  /** The script's flags besides `e`: `r` for a rolling window. */
  readonly flags: string;
  readonly windowArg: string;
  private readonly full = new Map<CompactKey, Full>();
  private readonly ipv4KeyPrefix: string;

  constructor(
    prefix: string,
    readonly windowMs: number,
    readonly rolling: boolean,
    private readonly maxFullKeys: number,
    private readonly now: () => number,
    ipv4KeyPrefix = DEFAULT_IPV4_KEY_PREFIX,
    shared?: SharedCounters,
  ) {
    this.prefix = rolling ? `${prefix}rolling:` : prefix;
    this.flags = rolling ? 'r' : '';
    this.windowArg = String(windowMs);
    this.ipv4KeyPrefix = ipv4KeyPrefix;
    if (shared !== undefined) {
      this.memory = shared.windows({ prefix: this.prefix, windowMs, rolling }, now);
    } else if (rolling) {
      this.memory = new RollingWindows({ windowMs, now });
    } else {
      const memory = new CompactMemoryStore({ now, ipv4KeyPrefix });
      memory.init({ windowMs });
      this.memory = memory;
    }
  }

  /** When `key` is known to have no room under `limit`: the time it next has room. */
  fullUntil(key: string, limit: number): number | undefined {
    const compact = compactKey(key, this.ipv4KeyPrefix);
    const seen = this.full.get(compact);
    if (seen === undefined) return undefined;
    if (seen.until <= this.now()) {
      this.full.delete(compact);
      return undefined;
    }
    return seen.count >= limit ? seen.resetAt : undefined;
  }

  /**
   * Remembers `key` as full until `until`, reporting `resetAt`; when the map is full the oldest
   * entry goes (about expiry order).
   */
  markFull(key: string, count: number, resetAt: number, until = resetAt): void {
    const compact = compactKey(key, this.ipv4KeyPrefix);
    this.full.delete(compact);
    if (this.full.size >= this.maxFullKeys) {
      const oldest = this.full.keys().next();
      if (oldest.done !== true) this.full.delete(oldest.value);
    }
    this.full.set(compact, { count, until, resetAt });
  }

  /** Forgets that `key` was seen full: its count went down. */
  forget(key: string): void {
    this.full.delete(compactKey(key, this.ipv4KeyPrefix));
  }

  shutdown(): void {
    this.memory.shutdown();
    this.full.clear();
  }
}

/** One counter a request meets, with the limit that applies to this request. */
export interface CounterRequest {
  readonly counter: LocalCounters;
  /** The counted key, without the scope's prefix: `account:{acct_1}`, `ip:203.0.113.7`. */
  readonly key: string;
  readonly limit: number;
  /** `false` for a scope in shadow mode: counted, but its refusal refuses nothing. */
  readonly enforced: boolean;
  /**
   * The request is something that already happened (a credential compared and found wrong), not
   * one asking to go ahead: a rolling counter in Redis records it even when it has no room, in
   * place of its oldest admission, and it is always sent to Redis, never refused from memory. A
   * failure that was compared counts against the window whatever the count was, so an instance
   * that compared one blind (before it knew the budget spent) cannot compare another in the same
   * window for that key. A key Redis answers full for it is refused from memory until the reset
   * counted from the answer, never before the real one.
   */
  readonly countWhenFull?: boolean | undefined;
}

export interface AdmissionOutcome {
  /** The index of the enforced request that refused, or -1 when the request is admitted. */
  readonly refusedAt: number;
  /** Redis's clock (ms) when the script decided with a rolling window; else `undefined`. */
  readonly decidedAt?: number | undefined;
  /**
   * Per request, its hits and reset. Hits: the count with this request, counted or not (above
   * the limit: it had no room), or the count as it was when another counter refused. When refused
   * from memory (a key known full), only the refusing entry is read: the others hold zeros.
   */
  readonly readings: readonly CounterReading[];
}

export interface AdmissionStoreOptions {
  /** The window of the counters that do not set their own. */
  readonly windowMs: number;
  readonly redis?: LimiterRedis | undefined;
  /** Gateway instances expected to share the limits, used while Redis is unusable. Defaults to 1. */
  readonly expectedInstances?: number | undefined;
  /** Keys remembered as full per scope, at most. Defaults to 100 000. */
  readonly maxFullKeys?: number | undefined;
  readonly now?: (() => number) | undefined;
  /**
   * Keeps the in-memory counts in memory shared with the other worker threads of the process,
   * each admission decided under its lock. Redis, when usable, is asked as without it.
   * `shutdown()` leaves the shared counts to the others.
   */
  readonly sharedCounters?: SharedCounters | undefined;
}

const DEFAULT_MAX_FULL_KEYS = 100_000;

interface Shared {
  readonly send: RedisCommandFn;
  readonly health: RedisHealth;
  readonly admitSha: string;
  readonly readSha: string;
  readonly decrementSha: string;
}

const ADMISSION_STORE_OPTION_CHECKS: OptionChecks<AdmissionStoreOptions> = {
  windowMs: required(wholeNumber(MIN_WINDOW_MS, MAX_WINDOW_MS)),
  redis: LIMITER_REDIS,
  expectedInstances: wholeNumber(1),
  maxFullKeys: wholeNumber(1),
  now: isFunction,
  sharedCounters: objectWith('a SharedCounters', ['enter', 'leave', 'windows']),
};

export class AdmissionStore {
  private readonly windowMs: number;
  private readonly expectedInstances: number;
  private readonly maxFullKeys: number;
  private readonly now: () => number;
  private readonly shared: Shared | undefined;
  private readonly counters: LocalCounters[] = [];
  private readonly sharedCounters: SharedCounters | undefined;

  constructor(options: AdmissionStoreOptions) {
    checkOptions('AdmissionStore', options, ADMISSION_STORE_OPTION_CHECKS);
    this.windowMs = options.windowMs;
    this.expectedInstances = options.expectedInstances ?? 1;
    this.maxFullKeys = options.maxFullKeys ?? DEFAULT_MAX_FULL_KEYS;
    this.now = options.now ?? Date.now;
    this.sharedCounters = options.sharedCounters;
    const { redis } = options;
    if (redis !== undefined) {
      const send = redisCommandFn(redis.client);
      this.shared = {
        send,
        health: redis.health,
        admitSha: loadScript(send, ADMIT_SCRIPT),
        readSha: loadScript(send, READ_SCRIPT),
        decrementSha: loadScript(send, DECREMENT_SCRIPT),
      };
    }
  }

  /**
   * The counters of one scope, whose Redis keys start with `prefix`: a fixed window of the
   * store's length unless `options` say otherwise.
   */
  countersFor(prefix: string, options: CountersOptions = {}): LocalCounters {
    const windowMs = options.windowMs ?? this.windowMs;
    const rolling = options.rolling ?? false;
    const counters = new LocalCounters(
      prefix,
      windowMs,
      rolling,
      this.maxFullKeys,
      this.now,
      options.ipv4KeyPrefix,
      this.sharedCounters,
    );
    this.counters.push(counters);
    return counters;
  }

  /** Admits one request against every counter it meets, or refuses it spending none of them. */
  async admit(requests: readonly CounterRequest[]): Promise<AdmissionOutcome> {
    const readings = requests.map(emptyReading);
    const shared = this.shared;
    if (shared === undefined) return { refusedAt: this.admitHere(requests, readings, 1), readings };
    const known = this.knownFull(requests, readings);
    if (known >= 0) return { refusedAt: known, readings };
    const sentAt = this.now();
    const reply = await this.call(shared, shared.admitSha, requests, true);
    let refusedAt: number;
    let decidedAt: number | undefined;
    // Redis decided between the call and its answer: a reset read on the answer may be this much
    // late, so a key is refused from memory only until its reset counted from the call.
    let late = 0;
    if (reply === undefined) {
      refusedAt = this.admitHere(requests, readings, this.expectedInstances);
    } else {
      refusedAt = Number(reply[0]) - 1;
      const clock = Number(reply[1]);
      if (clock > 0) decidedAt = clock;
      const answeredAt = this.now();
      late = Math.max(0, answeredAt - sentAt);
      this.readReply(reply, 2, requests, readings, answeredAt);
    }
    this.rememberFull(requests, readings, late);
    return { refusedAt, readings, decidedAt };
  }

  /** Reads every counter without counting (Redis when usable, else the local counts). */
  async read(requests: readonly CounterRequest[]): Promise<CounterReading[]> {
    const readings = requests.map(emptyReading);
    const shared = this.shared;
    const reply =
      shared === undefined ? undefined : await this.call(shared, shared.readSha, requests, false);
    if (reply !== undefined) {
      this.readReply(reply, 0, requests, readings);
      return readings;
    }
    const scale = shared === undefined ? 1 : this.expectedInstances;
    this.sharedCounters?.enter();
    try {
      peekLocal(requests, readings, scale);
    } finally {
      this.sharedCounters?.leave();
    }
    return readings;
  }

  /** `admitLocal()` in one step: under the shared counters' lock when they are shared. */
  private admitHere(
    requests: readonly CounterRequest[],
    readings: CounterReading[],
    scale: number,
  ): number {
    const shared = this.sharedCounters;
    if (shared === undefined) return admitLocal(requests, readings, scale);
    shared.enter();
    try {
      return admitLocal(requests, readings, scale);
    } finally {
      shared.leave();
    }
  }

  /**
   * Takes back one admission of `key` (express-rate-limit's `decrement`, for a request it skips
   * after the fact), where counts are kept now: Redis when usable, else memory. Never below zero.
   */
  async decrement(counter: LocalCounters, key: string): Promise<void> {
    counter.forget(key);
    const shared = this.shared;
    const sent =
      shared !== undefined &&
      (await this.send(
        shared,
        'EVALSHA',
        shared.decrementSha,
        '1',
        counter.prefix + key,
        counter.flags,
      ));
    if (!sent) counter.memory.decrement(key);
  }

  /** Forgets every count of `key`: in memory, and in Redis when usable. */
  async reset(counter: LocalCounters, key: string): Promise<void> {
    counter.forget(key);
    counter.memory.resetKey(key);
    const shared = this.shared;
    if (shared !== undefined) await this.send(shared, 'DEL', counter.prefix + key);
  }

  /** One command whose reply is not needed: whether Redis ran it. A failure degrades the health. */
  private async send(shared: Shared, ...command: [string, ...string[]]): Promise<boolean> {
    if (!shared.health.usable) return false;
    try {
      await shared.send(...command);
      shared.health.succeeded();
      return true;
    } catch (error) {
      shared.health.failed(error);
      return false;
    }
  }

  shutdown(): void {
    for (const counters of this.counters) counters.shutdown();
  }

  /** The first enforced request whose key is known full under its limit, with its reading. */
  private knownFull(requests: readonly CounterRequest[], readings: CounterReading[]): number {
    for (let i = 0; i < requests.length; i++) {
      const request = requests[i];
      const reading = readings[i];
      if (request === undefined || reading === undefined || !request.enforced) continue;
      if (request.countWhenFull === true) continue;
      const until = request.counter.fullUntil(request.key, request.limit);
      if (until === undefined) continue;
      reading.count = request.limit + 1;
      reading.resetAt = until;
      return i;
    }
    return -1;
  }

  private rememberFull(
    requests: readonly CounterRequest[],
    readings: CounterReading[],
    late: number,
  ): void {
    for (let i = 0; i < requests.length; i++) {
      const request = requests[i];
      const reading = readings[i];
      if (request === undefined || reading === undefined) continue;
      if (reading.count < request.limit) continue;
      // A reading above its limit counted the refused request too: the key holds one fewer, so a
      // request whose own limit is one higher has room. A rolling window's reset is when its count
      // drops below this request's limit: until then it is full only for limits up to this one.
      const held = reading.count > request.limit ? reading.count - 1 : reading.count;
      const full = request.counter.rolling ? request.limit : held;
      // A failure budget bounds what was compared in every span of one window, so an instance
      // must never decide from memory that the budget has room while the failure that spent it
      // is still in the window. Redis decided somewhere between the call and its answer: the
      // reset counted from the call may come before the real one, by up to the round trip, and
      // this instance would compare one more in that gap than the fleet's bound allows. So a
      // budget seen spent is held until its reset counted from the answer, never earlier. A
      // request asking to go ahead is refused from memory only until its reset counted from the
      // call: never longer than Redis would refuse it.
      const until = request.countWhenFull === true ? reading.resetAt : reading.resetAt - late;
      request.counter.markFull(request.key, full, reading.resetAt, until);
    }
  }

  /** One script call; `undefined` when Redis is unusable or the call failed (never replayed). */
  private async call(
    shared: Shared,
    sha: string,
    requests: readonly CounterRequest[],
    withLimits: boolean,
  ): Promise<RedisReply[] | undefined> {
    if (!shared.health.usable) return undefined;
    const args: string[] = [sha, String(requests.length)];
    for (const request of requests) args.push(request.counter.prefix + request.key);
    for (const request of requests) {
      const { counter } = request;
      if (withLimits) {
        const always = request.countWhenFull === true && counter.rolling ? 'a' : '';
        args.push(
          String(request.limit),
          counter.windowArg,
          `${request.enforced ? 'e' : ''}${counter.flags}${always}`,
        );
      } else {
        args.push(counter.windowArg, counter.flags);
      }
    }
    try {
      const reply = await shared.send('EVALSHA', ...args);
      if (!Array.isArray(reply)) throw new TypeError('the limit script gave no list');
      shared.health.succeeded();
      return reply;
    } catch (error) {
      shared.health.failed(error);
      return undefined;
    }
  }

  /** `count, ttl` pairs from `from` into `readings`; a counter without a window resets in one. */
  private readReply(
    reply: readonly RedisReply[],
    from: number,
    requests: readonly CounterRequest[],
    readings: CounterReading[],
    now = this.now(),
  ): void {
    readings.forEach((reading, index) => {
      const ttl = Number(reply[from + 2 * index + 1]);
      const windowMs = requests[index]?.counter.windowMs ?? this.windowMs;
      reading.count = Number(reply[from + 2 * index]);
      reading.resetAt = now + (ttl >= 0 ? ttl : windowMs);
    });
  }
}

/** What the local check reads of one counter a request meets: its windows, key and limit. */
export interface LocalCounterRequest {
  readonly counter: { readonly memory: LocalWindows };
  readonly key: string;
  readonly limit: number;
  readonly enforced: boolean;
}

/**
 * Reads the local counts into `readings`, each scaled by `scale`, counting nothing.
 */
export function peekLocal(
  requests: readonly LocalCounterRequest[],
  readings: CounterReading[],
  scale: number,
): void {
  for (let i = 0; i < requests.length; i++) {
    const request = requests[i];
    const reading = readings[i];
    if (request === undefined || reading === undefined) continue;
    request.counter.memory.peek(request.key, reading);
    reading.count *= scale;
  }
}

/**
 * The local check in one synchronous step, each count scaled by `scale`: the index of the first
 * enforced counter without room, or -1 after counting in every counter that has room. Nothing
 * else runs between its reads and its counts, so it is exact for every caller of the windows'
 * thread, and for every thread when shared windows are read under their lock.
 */
export function admitLocal(
  requests: readonly LocalCounterRequest[],
  readings: CounterReading[],
  scale: number,
): number {
  peekLocal(requests, readings, scale);
  let refusedAt = -1;
  for (let i = 0; i < requests.length; i++) {
    const request = requests[i];
    const reading = readings[i];
    if (request === undefined || reading === undefined) continue;
    if (reading.count + scale > request.limit) {
      reading.count += scale;
      // Room again once the local count is at most what the scaled limit leaves.
      const keep = Math.floor(request.limit / scale) - 1;
      reading.resetAt = request.counter.memory.freeAt(request.key, keep);
      if (refusedAt < 0 && request.enforced) refusedAt = i;
    }
  }
  if (refusedAt >= 0) return refusedAt;
  for (let i = 0; i < requests.length; i++) {
    const request = requests[i];
    const reading = readings[i];
    if (request === undefined || reading === undefined) continue;
    if (reading.count > request.limit) continue;
    request.counter.memory.hit(request.key, reading, Math.ceil(request.limit / scale));
    reading.count *= scale;
  }
  return -1;
}

function emptyReading(): CounterReading {
  return { count: 0, resetAt: 0 };
}

/**
 * `SCRIPT LOAD`, answered locally by `redisCommandFn` (it keeps the text for `NOSCRIPT`): Redis
 * learns the script from the first `EVAL` after a `NOSCRIPT`, once per server.
 */
function loadScript(send: RedisCommandFn, script: string): string {
  void send('SCRIPT', 'LOAD', script);
  return scriptSha1(script);
}
