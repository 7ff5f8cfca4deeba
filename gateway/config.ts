import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { ConfigurationError } from '../lib';
import { DEFAULT_PUBLIC_KEY_HEADER } from '../lib/entry/core';
import { parseCidrEntry } from '../lib/internal';
import {
  DEFAULT_TOKEN_TTL_SECONDS,
  editDistance,
  HEADER_NAME_PATTERN,
  MIN_TOKEN_SECRET_BYTES,
  parseHostPort,
} from '../lib/internal';
import { GATEWAY_SCOPE_NAMES, type GatewayScope } from './keys-cli/limit-scopes';
import { IDEMPOTENT_PATHS } from './routes';
import {
  autoWorkers,
  currentPlatform,
  MAX_WORKERS,
  portSharing,
  type WorkerPlatform,
} from './workers/plan';

/**
 * The sample gateway's configuration, read from the environment once at start. Every invalid value
 * is a `ConfigurationError` naming the variable; nothing invalid is replaced by a default.
 */

export type TrustProxy = false | number | readonly string[];

export type RedisTarget =
  | { kind: 'url'; url: string }
  | { kind: 'cluster'; nodes: readonly string[]; password?: string }
  | { kind: 'sentinel'; sentinels: readonly string[]; name: string; password?: string };

export interface LimitsConfig {
  /** Per account per window: wallets, payments, payouts. */
  readonly payments: number;
  /** Per account per window: the other authenticated routes. */
  readonly authenticated: number;
  /** Per client IP per window: `POST /checkout/`. */
  readonly checkoutCreate: number;
  /** Per client IP per window: `GET /checkout/:id/`. */
  readonly checkoutRead: number;
  /** Per client IP per window: `payments` requests made with a publishable key. */
  readonly publishablePayments: number;
  /** Failed authentications per client IP per window. */
  readonly authFailures: number;
  readonly windowMs: number;
}

export interface GatewayConfig {
  readonly port: number;
  readonly host: string;
  readonly redis: RedisTarget | undefined;
  readonly redisPrefix: string;
  readonly keysFile: string | undefined;
  /** `TOLLGATE_DATABASE_URL`: keys in PostgreSQL instead of a keys file. */
  readonly databaseUrl: string | undefined;
  /** `undefined`: generate a random one (refused when `production`). */
  readonly tokenSecret: string | undefined;
  readonly tokenTtlSeconds: number;
  readonly trustProxy: TrustProxy;
  /** `undefined`: start the bundled stub upstream in-process. */
  readonly upstreamUrl: string | undefined;
  readonly upstreamTimeoutMs: number;
  readonly publicKeyHeader: string;
  readonly logLevel: string;
  readonly production: boolean;
  readonly expectedInstances: number;
  /** `TOLLGATE_WORKERS`, resolved: the threads serving the public listener on one port. */
  readonly workers: number;
  readonly limits: LimitsConfig;
  /** The admin listener (`TOLLGATE_ADMIN_PORT`); `undefined`: none. */
  readonly admin: AdminConfig | undefined;
  /** Rules tried in shadow mode: decided, logged and counted, never enforced. */
  readonly shadow: ShadowConfig;
  /** The secret-scanning endpoint (`TOLLGATE_SECRET_SCANNING_PATH`); `undefined`: none. */
  readonly secretScanning: SecretScanningConfig | undefined;
  /** OpenTelemetry tracing, from the standard `OTEL_*` variables; `undefined`: off. */
  readonly tracing: TracingConfig | undefined;
  /** Idempotency keys on the routes that move money. */
  readonly idempotency: IdempotencyConfig;
}

export interface IdempotencyConfig {
  /** `TOLLGATE_IDEMPOTENCY_REQUIRED`: the route paths (as `routes.ts` writes them) that require a key. */
  readonly required: readonly string[];
  /** `TOLLGATE_IDEMPOTENCY_TTL_SECONDS`: how long a stored answer is replayed. */
  readonly ttlSeconds: number;
  /** `TOLLGATE_IDEMPOTENCY_MAX_ANSWER_BYTES`: the largest answer body kept for replays. */
  readonly maxAnswerBytes: number;
}

/** The samplers of `OTEL_TRACES_SAMPLER` the gateway knows. */
export const TRACE_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type TraceSamplerName = (typeof TRACE_SAMPLERS)[number];

export interface TracingConfig {
  /** `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL`; `http/protobuf` by default. */
  readonly protocol: 'http/protobuf' | 'http/json';
  /** `OTEL_TRACES_SAMPLER`; `parentbased_always_on` by default. */
  readonly sampler: TraceSamplerName;
  /** `OTEL_TRACES_SAMPLER_ARG`, the ratio of the `traceidratio` samplers; 1 by default. */
  readonly ratio: number;
  /**
   * `TOLLGATE_TRACE_TRUST_REMOTE_SAMPLING`: whether a caller's sampled flag decides for the
   * `parentbased_*` samplers. `false` by default: the caller's trace is joined, the local sampler
   * decides.
   */
  readonly trustRemoteSampling: boolean;
  /**
   * `TOLLGATE_TRACE_PROBES`: whether operators' probes (`/healthz`, `/readyz`, `/metrics`) are
   * traced. `false` by default: a scrape every few seconds would be a root trace each.
   */
  readonly probes: boolean;
  /**
   * `TOLLGATE_TRACE_STEPS`: whether the key lookup and the admission of the limits get child spans
   * of their own. `false` by default: their findings are on the request's span.
   */
  readonly steps: boolean;
}

export interface SecretScanningConfig {
  /** Where the main listener takes reports (`POST`). */
  readonly path: string;
  /** The programme's public-keys document; `undefined` when only a file is read. */
  readonly keysUrl: string | undefined;
  /** A local copy of the public-keys document; `undefined`: none. */
  readonly keysFile: string | undefined;
  /** What happens to a secret key in force that is reported. */
  readonly action: 'revoke' | 'roll';
  /** With `roll`: how long the reported key keeps working. */
  readonly graceSeconds: number;
  /** Reports per client address and minute. */
  readonly limit: number;
}

/** GitHub's public-keys document for secret scanning. */
export const GITHUB_SECRET_SCANNING_KEYS_URL =
  'https://api.github.com/meta/public_keys/secret_scanning';

export interface ShadowConfig {
  /** `TOLLGATE_SHADOW_SCOPES`: limit scopes counted but not enforced. */
  readonly scopes: readonly GatewayScope[];
  /** `TOLLGATE_SHADOW_IP_WHITELISTS`: accounts whose IP whitelist is checked but not enforced. */
  readonly ipWhitelistAccounts: readonly string[];
}

export interface AdminConfig {
  readonly port: number;
  readonly host: string;
  /** SHA-256 (64 lowercase hex) of the admin token; `undefined`: key-management routes 404. */
  readonly tokenSha256: string | undefined;
}

export const DEFAULT_LIMITS: LimitsConfig = {
  payments: 1500,
  authenticated: 100,
  checkoutCreate: 30,
  checkoutRead: 45,
  publishablePayments: 45,
  authFailures: 20,
  windowMs: 60_000,
};

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const TRUST_KEYWORDS = new Set(['loopback', 'linklocal', 'uniquelocal']);
/** Trusted proxy ranges wider than these would trust addresses anyone on the internet can hold. */
const MIN_TRUSTED_PREFIX = { ipv4: 8, ipv6: 7 } as const;

type Env = Readonly<Record<string, string | undefined>>;

/**
 * Every `TOLLGATE_*` variable the gateway reads. Any other is refused at start: a misspelt name
 * (`TOLLGATE_KEY_FILE`) would otherwise leave its setting at the default without a word.
 */
export const SETTINGS: readonly string[] = [
  'TOLLGATE_ADMIN_HOST',
  'TOLLGATE_ADMIN_PORT',
  'TOLLGATE_ADMIN_TOKEN_SHA256',
  'TOLLGATE_AUTH_FAILURE_LIMIT',
  'TOLLGATE_CHECK_ANSWERS',
  'TOLLGATE_DATABASE_URL',
  'TOLLGATE_DATABASE_URL_FILE',
  'TOLLGATE_EXPECTED_INSTANCES',
  'TOLLGATE_IDEMPOTENCY_MAX_ANSWER_BYTES',
  'TOLLGATE_IDEMPOTENCY_REQUIRED',
  'TOLLGATE_IDEMPOTENCY_TTL_SECONDS',
  'TOLLGATE_KEYS_FILE',
  'TOLLGATE_PUBLIC_KEY_HEADER',
  'TOLLGATE_REDIS_PREFIX',
  'TOLLGATE_SECRET_SCANNING_ACTION',
  'TOLLGATE_SECRET_SCANNING_GRACE_SECONDS',
  'TOLLGATE_SECRET_SCANNING_KEYS_FILE',
  'TOLLGATE_SECRET_SCANNING_KEYS_URL',
  'TOLLGATE_SECRET_SCANNING_LIMIT',
  'TOLLGATE_SECRET_SCANNING_PATH',
  'TOLLGATE_SHADOW_IP_WHITELISTS',
  'TOLLGATE_SHADOW_SCOPES',
  'TOLLGATE_TOKEN_SECRET',
  'TOLLGATE_TOKEN_SECRET_FILE',
  'TOLLGATE_TOKEN_TTL_SECONDS',
  'TOLLGATE_TRACE_PROBES',
  'TOLLGATE_TRACE_STEPS',
  'TOLLGATE_TRACE_TRUST_REMOTE_SAMPLING',
  'TOLLGATE_TRUST_PROXY',
  'TOLLGATE_UPSTREAM_TIMEOUT_MS',
  'TOLLGATE_UPSTREAM_URL',
  'TOLLGATE_WORKERS',
];

/**
 * `TOLLGATE_*` variables that the compose file and the Caddy snippet read beside the gateway (its
 * published ports, the gateway's address): often exported in the same shell, so not refused.
 */
export const NEIGHBOUR_SETTINGS: readonly string[] = [
  'TOLLGATE_ADDRESS',
  'TOLLGATE_NGINX_PORT',
  'TOLLGATE_PORT',
  'TOLLGATE_POSTGRES_PORT',
];

export function loadConfig(env: Env, platform: WorkerPlatform = currentPlatform()): GatewayConfig {
  refuseUnknownSettings(env);
  const production = env.NODE_ENV === 'production';
  const tokenSecret = secret(env, 'TOLLGATE_TOKEN_SECRET');
  if (
    tokenSecret !== undefined &&
    Buffer.byteLength(tokenSecret, 'utf8') < MIN_TOKEN_SECRET_BYTES
  ) {
    fail('TOLLGATE_TOKEN_SECRET', `must be at least ${MIN_TOKEN_SECRET_BYTES} bytes`);
  }
  if (tokenSecret === undefined && production) {
    fail(
      'TOLLGATE_TOKEN_SECRET',
      'is required when NODE_ENV=production (tokens must survive restarts and be shared by instances)',
    );
  }
  const databaseUrl = databaseUrlOf(env);
  if (databaseUrl !== undefined && optional(env, 'TOLLGATE_KEYS_FILE') !== undefined) {
    fail(
      'TOLLGATE_DATABASE_URL',
      'and TOLLGATE_KEYS_FILE are both set: keep the one keys come from',
    );
  }
  if (
    optional(env, 'TOLLGATE_KEYS_FILE') === undefined &&
    databaseUrl === undefined &&
    production
  ) {
    fail(
      'TOLLGATE_KEYS_FILE',
      'or TOLLGATE_DATABASE_URL is required when NODE_ENV=production (demo keys are printed to stdout, where logs collect them)',
    );
  }
  const limits = {
    ...DEFAULT_LIMITS,
    authFailures: integer(
      env,
      'TOLLGATE_AUTH_FAILURE_LIMIT',
      DEFAULT_LIMITS.authFailures,
      1,
      100_000,
    ),
  };
  return {
    port: integer(env, 'PORT', 8080, 0, 65535),
    host: host(env),
    redis: redisTarget(env),
    redisPrefix: redisPrefix(env),
    keysFile: optional(env, 'TOLLGATE_KEYS_FILE'),
    databaseUrl,
    tokenSecret,
    tokenTtlSeconds: integer(
      env,
      'TOLLGATE_TOKEN_TTL_SECONDS',
      DEFAULT_TOKEN_TTL_SECONDS,
      1,
      86_400,
    ),
    trustProxy: trustProxy(env),
    upstreamUrl: upstreamUrl(env),
    upstreamTimeoutMs: integer(env, 'TOLLGATE_UPSTREAM_TIMEOUT_MS', 10_000, 100, 300_000),
    publicKeyHeader: publicKeyHeader(env),
    logLevel: logLevel(env),
    production,
    expectedInstances: integer(env, 'TOLLGATE_EXPECTED_INSTANCES', 1, 1, 1000),
    workers: workers(env, platform),
    limits,
    admin: admin(env),
    shadow: shadow(env),
    secretScanning: secretScanning(env, databaseUrl),
    tracing: tracing(env),
    idempotency: idempotency(env),
  };
}

/**
 * `TOLLGATE_WORKERS`: a count, or `auto` for the cores the process may use (its CPU affinity and
 * its container's CPU quota). Where threads cannot share a port, `auto` is one thread and a count
 * above one is refused, saying why.
 */
function workers(env: Env, platform: WorkerPlatform): number {
  const name = 'TOLLGATE_WORKERS';
  const value = optional(env, name);
  if (value === undefined) return 1;
  const sharing = portSharing(platform);
  if (value.trim() === 'auto') return sharing.ok ? autoWorkers(platform) : 1;
  const count = Number(value);
  if (!/^\d{1,3}$/.test(value) || count < 1 || count > MAX_WORKERS) {
    fail(
      name,
      `must be auto or a whole number from 1 to ${MAX_WORKERS}, got ${JSON.stringify(value)}`,
    );
  }
  if (count > 1 && !sharing.ok) {
    fail(name, `is ${count}, but ${sharing.why}: leave it unset, or run one gateway per core`);
  }
  return count;
}

function idempotency(env: Env): IdempotencyConfig {
  return {
    required: idempotencyRequired(env),
    ttlSeconds: integer(env, 'TOLLGATE_IDEMPOTENCY_TTL_SECONDS', 86_400, 60, 604_800),
    maxAnswerBytes: integer(
      env,
      'TOLLGATE_IDEMPOTENCY_MAX_ANSWER_BYTES',
      65_536,
      1024,
      16 * 1024 * 1024,
    ),
  };
}

/** `all`, or route paths of the routes that take a key, with or without the trailing slash. */
function idempotencyRequired(env: Env): readonly string[] {
  const value = optional(env, 'TOLLGATE_IDEMPOTENCY_REQUIRED');
  if (value === undefined) return [];
  if (value.trim() === 'all') return IDEMPOTENT_PATHS;
  const required: string[] = [];
  for (const entry of value.split(',')) {
    const path = entry.trim();
    const route = IDEMPOTENT_PATHS.find(
      (candidate) => candidate === path || candidate === `${path}/`,
    );
    if (route === undefined) {
      fail(
        'TOLLGATE_IDEMPOTENCY_REQUIRED',
        `${JSON.stringify(path)} is not a route that takes an Idempotency-Key; expected "all" or some of ${IDEMPOTENT_PATHS.join(', ')}`,
      );
    }
    if (!required.includes(route)) required.push(route);
  }
  return required;
}

/** Paths the gateway already serves, which the endpoint may not take. */
const SERVED_PATHS = ['/api', '/authz', '/healthz', '/readyz'];

/**
 * Off unless `TOLLGATE_SECRET_SCANNING_PATH` is set. It needs the database key store: a revocation
 * must reach every instance and survive restarts, which a keys file the gateway only reads cannot
 * promise (docs/secret-scanning.md).
 */
function secretScanning(
  env: Env,
  databaseUrl: string | undefined,
): SecretScanningConfig | undefined {
  const path = optional(env, 'TOLLGATE_SECRET_SCANNING_PATH');
  if (path === undefined) {
    for (const name of [
      'TOLLGATE_SECRET_SCANNING_KEYS_URL',
      'TOLLGATE_SECRET_SCANNING_KEYS_FILE',
      'TOLLGATE_SECRET_SCANNING_ACTION',
      'TOLLGATE_SECRET_SCANNING_GRACE_SECONDS',
      'TOLLGATE_SECRET_SCANNING_LIMIT',
    ]) {
      if (optional(env, name) !== undefined)
        fail(name, 'is set without TOLLGATE_SECRET_SCANNING_PATH');
    }
    return undefined;
  }
  if (!/^(\/[A-Za-z0-9._~-]+)+$/.test(path) || path.length > 128) {
    fail(
      'TOLLGATE_SECRET_SCANNING_PATH',
      'must be a path such as /leaks/github (letters, digits, . _ ~ -)',
    );
  }
  if (SERVED_PATHS.some((served) => path === served || path.startsWith(`${served}/`))) {
    fail('TOLLGATE_SECRET_SCANNING_PATH', `is a path the gateway already serves: ${path}`);
  }
  if (databaseUrl === undefined) {
    fail(
      'TOLLGATE_SECRET_SCANNING_PATH',
      'needs TOLLGATE_DATABASE_URL: a reported key must be revoked on every instance and stay revoked after a restart, and the gateway never writes a keys file',
    );
  }
  const keysFile = optional(env, 'TOLLGATE_SECRET_SCANNING_KEYS_FILE');
  const keysUrl =
    keysUrlOf(env) ?? (keysFile === undefined ? GITHUB_SECRET_SCANNING_KEYS_URL : undefined);
  const action = optional(env, 'TOLLGATE_SECRET_SCANNING_ACTION') ?? 'revoke';
  if (action !== 'revoke' && action !== 'roll') {
    fail('TOLLGATE_SECRET_SCANNING_ACTION', 'must be revoke or roll');
  }
  if (
    action === 'revoke' &&
    optional(env, 'TOLLGATE_SECRET_SCANNING_GRACE_SECONDS') !== undefined
  ) {
    fail(
      'TOLLGATE_SECRET_SCANNING_GRACE_SECONDS',
      'is only read with TOLLGATE_SECRET_SCANNING_ACTION=roll',
    );
  }
  return {
    path,
    keysUrl,
    keysFile,
    action,
    graceSeconds: integer(env, 'TOLLGATE_SECRET_SCANNING_GRACE_SECONDS', 300, 0, 3600),
    limit: integer(env, 'TOLLGATE_SECRET_SCANNING_LIMIT', 120, 1, 100_000),
  };
}

/** An https:// URL, or http:// on a loopback address (a local copy served for tests). */
function keysUrlOf(env: Env): string | undefined {
  const name = 'TOLLGATE_SECRET_SCANNING_KEYS_URL';
  const value = optional(env, name);
  if (value === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return fail(name, 'is not a URL');
  }
  const loopback = ['127.0.0.1', '[::1]', 'localhost'].includes(url.hostname);
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) {
    fail(name, 'must be https:// (http:// only on a loopback address)');
  }
  return url.toString();
}

/**
 * Tracing is on when an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), unless `OTEL_SDK_DISABLED=true` or
 * `OTEL_TRACES_EXPORTER=none`. The exporter reads the endpoints, headers and timeouts itself; the
 * values the gateway acts on are checked here, so a typo stops the start instead of silently
 * exporting nothing or everything.
 */
function tracing(env: Env): TracingConfig | undefined {
  const trustRemoteSampling = booleanSetting(env, 'TOLLGATE_TRACE_TRUST_REMOTE_SAMPLING', false);
  const probes = booleanSetting(env, 'TOLLGATE_TRACE_PROBES', false);
  const steps = booleanSetting(env, 'TOLLGATE_TRACE_STEPS', false);
  const disabled = booleanSetting(env, 'OTEL_SDK_DISABLED', false);
  const exporter = optional(env, 'OTEL_TRACES_EXPORTER') ?? 'otlp';
  if (exporter !== 'otlp' && exporter !== 'none') {
    fail('OTEL_TRACES_EXPORTER', `must be otlp or none, got ${JSON.stringify(exporter)}`);
  }
  const endpoints = ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_EXPORTER_OTLP_ENDPOINT'];
  for (const name of endpoints) {
    const value = optional(env, name);
    if (value !== undefined && !/^https?:\/\/[^\s]+$/.test(value)) {
      fail(name, 'must be an http:// or https:// URL');
    }
  }
  const protocolName = optional(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL')
    ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
    : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const protocol = optional(env, protocolName) ?? 'http/protobuf';
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    fail(
      protocolName,
      `must be http/protobuf or http/json (the gateway exports over HTTP), got ${JSON.stringify(protocol)}`,
    );
  }
  const sampler = optional(env, 'OTEL_TRACES_SAMPLER') ?? 'parentbased_always_on';
  if (!(TRACE_SAMPLERS as readonly string[]).includes(sampler)) {
    fail(
      'OTEL_TRACES_SAMPLER',
      `must be one of ${TRACE_SAMPLERS.join(', ')}, got ${JSON.stringify(sampler)}`,
    );
  }
  const ratioText = optional(env, 'OTEL_TRACES_SAMPLER_ARG');
  let ratio = 1;
  if (ratioText !== undefined && sampler.endsWith('traceidratio')) {
    ratio = Number(ratioText);
    if (!/^\d*\.?\d+$/.test(ratioText) || ratio > 1) {
      fail(
        'OTEL_TRACES_SAMPLER_ARG',
        `must be a ratio from 0 to 1, got ${JSON.stringify(ratioText)}`,
      );
    }
  }
  if (
    disabled ||
    exporter === 'none' ||
    endpoints.every((name) => optional(env, name) === undefined)
  ) {
    return undefined;
  }
  return {
    protocol,
    sampler: sampler as TraceSamplerName,
    ratio,
    trustRemoteSampling,
    probes,
    steps,
  };
}

/** `true` or `false`, nothing else. */
function booleanSetting(env: Env, name: string, fallback: boolean): boolean {
  const value = optional(env, name);
  if (value === undefined) return fallback;
  if (value !== 'true' && value !== 'false') {
    fail(name, `must be true or false, got ${JSON.stringify(value)}`);
  }
  return value === 'true';
}

const ACCOUNT_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;

/** Comma-separated lists; duplicates and unknown names are errors, never ignored. */
function shadow(env: Env): ShadowConfig {
  const list = (name: string): string[] => {
    const value = optional(env, name);
    if (value === undefined) return [];
    const entries = value.split(',').map((entry) => entry.trim());
    const seen = new Set<string>();
    for (const entry of entries) {
      if (seen.has(entry)) fail(name, `names ${JSON.stringify(entry)} twice`);
      seen.add(entry);
    }
    return entries;
  };
  const scopes = list('TOLLGATE_SHADOW_SCOPES');
  for (const scope of scopes) {
    if (!(GATEWAY_SCOPE_NAMES as readonly string[]).includes(scope)) {
      fail(
        'TOLLGATE_SHADOW_SCOPES',
        `entry ${JSON.stringify(scope)} is not a limit scope; one of ${GATEWAY_SCOPE_NAMES.join(', ')} (credentials, roles and the failed-authentication limit are always enforced)`,
      );
    }
  }
  const accounts = list('TOLLGATE_SHADOW_IP_WHITELISTS');
  for (const account of accounts) {
    if (!ACCOUNT_ID_PATTERN.test(account)) {
      fail(
        'TOLLGATE_SHADOW_IP_WHITELISTS',
        `entry ${JSON.stringify(account)} is not an account id`,
      );
    }
  }
  return { scopes: scopes as GatewayScope[], ipWhitelistAccounts: accounts };
}

/** Stops at the first `TOLLGATE_*` variable that is not a setting, naming the nearest one. */
function refuseUnknownSettings(env: Env): void {
  const known = new Set([...SETTINGS, ...NEIGHBOUR_SETTINGS]);
  const unknown = Object.keys(env)
    .filter((name) => name.startsWith('TOLLGATE_') && !known.has(name))
    .sort();
  const first = unknown[0];
  if (first === undefined) return;
  fail(first, `is not a Tollgate setting (did you mean ${nearestName(first, SETTINGS)}?)`);
}

/**
 * The name of `names` that `name` most likely meant: one it cuts short, else the one with the
 * fewest single-character edits (letter case aside), the longer shared beginning breaking ties.
 */
function nearestName(name: string, names: readonly string[]): string {
  const upper = name.toUpperCase();
  const extended = names.filter((candidate) => candidate.startsWith(upper));
  const scored = (extended.length > 0 ? extended : names).map((candidate) => ({
    candidate,
    distance: editDistance(upper, candidate),
    shared: sharedStart(upper, candidate),
  }));
  scored.sort((a, b) => a.distance - b.distance || b.shared - a.shared);
  return scored[0]?.candidate ?? '';
}

function sharedStart(a: string, b: string): number {
  let length = 0;
  while (length < a.length && a[length] === b[length]) length++;
  return length;
}

function fail(variable: string, problem: string): never {
  throw new ConfigurationError(`${variable} ${problem}`);
}

/**
 * A secret from `NAME`, or from the file named by `NAME_FILE` (Docker and Kubernetes secrets), with
 * one trailing newline removed. Both set is an error; so is a file that cannot be read or is empty.
 * Nothing of the file's content is ever put in a message.
 */
/**
 * `TOLLGATE_DATABASE_URL`, or the content of the file `TOLLGATE_DATABASE_URL_FILE` names (a
 * secret, so the password stays out of the environment): a `postgres://` or `postgresql://` URL.
 */
export function databaseUrlOf(env: Env): string | undefined {
  const value = secret(env, 'TOLLGATE_DATABASE_URL');
  if (value === undefined) return undefined;
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:')) {
    fail('TOLLGATE_DATABASE_URL', 'must be a postgres:// or postgresql:// URL');
  }
  return value;
}

function secret(env: Env, name: string): string | undefined {
  const value = optional(env, name);
  const file = optional(env, `${name}_FILE`);
  if (file === undefined) return value;
  if (value !== undefined) fail(name, `and ${name}_FILE are both set: set one of them`);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    return fail(
      `${name}_FILE`,
      `names a file that cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'}): ${file}`,
    );
  }
  const content = text.replace(/\r?\n$/, '');
  if (content === '') fail(`${name}_FILE`, `names an empty file: ${file}`);
  return content;
}

/** Unset and empty are the same: not configured. */
function optional(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === '' ? undefined : value;
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const value = optional(env, name);
  if (value === undefined) return fallback;
  if (!/^\d{1,9}$/.test(value) || Number(value) < min || Number(value) > max) {
    fail(name, `must be a whole number from ${min} to ${max}, got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

function host(env: Env, name = 'HOST'): string {
  const value = optional(env, name) ?? '127.0.0.1';
  if (isIP(value) === 0 && !/^[A-Za-z0-9.-]{1,253}$/.test(value))
    fail(name, `is not an address: ${JSON.stringify(value)}`);
  return value;
}

function admin(env: Env): AdminConfig | undefined {
  const tokenSha256 = optional(env, 'TOLLGATE_ADMIN_TOKEN_SHA256');
  if (tokenSha256 !== undefined && !/^[0-9a-f]{64}$/.test(tokenSha256)) {
    fail(
      'TOLLGATE_ADMIN_TOKEN_SHA256',
      'must be 64 lowercase hex digits (the SHA-256 of the admin token)',
    );
  }
  if (optional(env, 'TOLLGATE_ADMIN_PORT') === undefined) {
    if (tokenSha256 !== undefined || optional(env, 'TOLLGATE_ADMIN_HOST') !== undefined) {
      fail(
        'TOLLGATE_ADMIN_PORT',
        'is required with TOLLGATE_ADMIN_HOST or TOLLGATE_ADMIN_TOKEN_SHA256',
      );
    }
    return undefined;
  }
  const port = integer(env, 'TOLLGATE_ADMIN_PORT', 0, 0, 65535);
  if (port !== 0 && port === integer(env, 'PORT', 8080, 0, 65535)) {
    fail(
      'TOLLGATE_ADMIN_PORT',
      'must differ from PORT: API clients never reach the admin listener',
    );
  }
  return { port, host: host(env, 'TOLLGATE_ADMIN_HOST'), tokenSha256 };
}

function trustProxy(env: Env): TrustProxy {
  const value = optional(env, 'TOLLGATE_TRUST_PROXY');
  if (value === undefined) return false;
  if (/^(true|false|yes|no|on|off)$/i.test(value)) {
    fail(
      'TOLLGATE_TRUST_PROXY',
      'must be a hop count or a list of addresses; "true" would trust addresses the client writes',
    );
  }
  if (/^\d+$/.test(value)) {
    const hops = Number(value);
    if (hops < 1 || hops > 10) fail('TOLLGATE_TRUST_PROXY', 'hop count must be from 1 to 10');
    return hops;
  }
  const entries = value.split(',').map((entry) => entry.trim());
  for (const entry of entries) {
    if (TRUST_KEYWORDS.has(entry)) continue;
    // Read strictly, as whitelist entries are: `::ffff:0:0/96` is every IPv4 address, i.e. `true`.
    const range = parseCidrEntry(entry);
    const tooWide =
      'error' in range
        ? range.error.includes('(/0)')
        : range.prefixLength < MIN_TRUSTED_PREFIX[range.kind];
    if (tooWide) {
      fail(
        'TOLLGATE_TRUST_PROXY',
        `entry ${JSON.stringify(entry)} is wider than /${MIN_TRUSTED_PREFIX.ipv4} (IPv4) or /${MIN_TRUSTED_PREFIX.ipv6} (IPv6) and would trust addresses clients hold; name your proxies`,
      );
    }
    if ('error' in range) {
      fail(
        'TOLLGATE_TRUST_PROXY',
        `entry ${JSON.stringify(entry)} is not an address, a CIDR range, loopback, linklocal or uniquelocal: it ${range.error}`,
      );
    }
  }
  return entries;
}

function upstreamUrl(env: Env): string | undefined {
  const value = optional(env, 'TOLLGATE_UPSTREAM_URL');
  if (value === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return fail('TOLLGATE_UPSTREAM_URL', 'is not a URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    fail('TOLLGATE_UPSTREAM_URL', 'must be http:// or https://');
  if (url.search !== '' || url.hash !== '' || url.username !== '' || url.password !== '') {
    fail('TOLLGATE_UPSTREAM_URL', 'must have no query, fragment or credentials');
  }
  return url.toString().replace(/\/$/, '');
}

function publicKeyHeader(env: Env): string {
  const value = optional(env, 'TOLLGATE_PUBLIC_KEY_HEADER') ?? DEFAULT_PUBLIC_KEY_HEADER;
  if (!HEADER_NAME_PATTERN.test(value) || value.length > 64)
    fail('TOLLGATE_PUBLIC_KEY_HEADER', 'is not a valid header name');
  const reserved = [
    'authorization',
    'host',
    'content-type',
    'content-length',
    'cookie',
    'x-request-id',
    // Hop-by-hop, forwarding and browser headers: another meaning, set by proxies or browsers.
    'connection',
    'transfer-encoding',
    'te',
    'upgrade',
    'proxy-authorization',
    'forwarded',
    'x-real-ip',
    'origin',
  ];
  const lower = value.toLowerCase();
  if (
    reserved.includes(lower) ||
    ['x-gateway-', 'x-forwarded-', 'sec-'].some((prefix) => lower.startsWith(prefix))
  ) {
    fail('TOLLGATE_PUBLIC_KEY_HEADER', `cannot be ${value}`);
  }
  return value;
}

function logLevel(env: Env): string {
  const value = optional(env, 'LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.includes(value)) fail('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}`);
  return value;
}

function redisPrefix(env: Env): string {
  const value = optional(env, 'TOLLGATE_REDIS_PREFIX') ?? 'tollgate:rl:';
  if (!/^[A-Za-z0-9:_.{}-]{1,64}$/.test(value))
    fail('TOLLGATE_REDIS_PREFIX', 'must be 1 to 64 of letters, digits and : _ . - { }');
  return value;
}

function redisTarget(env: Env): RedisTarget | undefined {
  const url = optional(env, 'REDIS_URL');
  const cluster = optional(env, 'REDIS_CLUSTER_NODES');
  const sentinels = optional(env, 'REDIS_SENTINELS');
  const password = secret(env, 'REDIS_PASSWORD');
  const set = [url, cluster, sentinels].filter((value) => value !== undefined).length;
  if (set > 1) {
    throw new ConfigurationError(
      'REDIS_URL, REDIS_CLUSTER_NODES and REDIS_SENTINELS are exclusive: set one of them',
    );
  }
  if (url !== undefined) {
    if (!/^rediss?:\/\/[^\s]+$/.test(url)) fail('REDIS_URL', 'must look like redis://host:6379');
    try {
      new URL(url);
    } catch {
      fail('REDIS_URL', 'is not a URL');
    }
    return { kind: 'url', url };
  }
  const list = (name: string, value: string): string[] => {
    const nodes = value.split(',').map((node) => node.trim());
    for (const node of nodes) parseHostPort(node, name);
    return nodes;
  };
  const withPassword = password === undefined ? {} : { password };
  if (cluster !== undefined)
    return { kind: 'cluster', nodes: list('REDIS_CLUSTER_NODES', cluster), ...withPassword };
  if (sentinels !== undefined) {
    const name = optional(env, 'REDIS_SENTINEL_NAME');
    if (name === undefined) fail('REDIS_SENTINEL_NAME', 'is required with REDIS_SENTINELS');
    return {
      kind: 'sentinel',
      sentinels: list('REDIS_SENTINELS', sentinels),
      name: name,
      ...withPassword,
    };
  }
  return undefined;
}
