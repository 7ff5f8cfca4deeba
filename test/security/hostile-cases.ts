import { createHmac, randomUUID } from 'node:crypto';
import { ERROR_CODES, type ErrorCode } from '../../lib/errors';
import type { RecordedRequest } from '../helpers/upstream';
import { allSecrets, type Fixtures, TOKEN_SECRET } from '../helpers/fixtures';
import {
  type SendOptions,
  type SendResult,
  startTestGateway,
  type TestGateway,
  type TestGatewayOptions,
} from '../helpers/gateway';
import { findLeaks } from '../helpers/logs';
import { type RawRequestParts, type RawResponse, rawRequest, sendRaw } from './raw-http';

/**
 * The hostile-request table runner. Each case is a row: a name, the request, the exact status and
 * error `code` expected, and whether the upstream is reached. Every row also checks what must hold
 * for any input: the gateway still answers `/healthz`, the upstream never sees a credential, and no
 * response or log line written during the case holds a secret, an `api_secret`, a token, a stack
 * trace, whitelist contents or a library's own message.
 */

export type TestKey = Fixtures['keys'][keyof Fixtures['keys']];

/** A request sent with node:http (`SendOptions`) or as raw bytes on a socket. */
export type CaseRequest = SendOptions | { raw: RawRequestParts; from?: string };

export interface CaseResult {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly text: string;
  readonly body: Record<string, unknown> | undefined;
}

export interface CaseContext {
  readonly gateway: TestGateway;
  readonly keys: Fixtures['keys'];
  /** A token minted by the gateway's own token service for `key` (an admin key by default). */
  token(key?: TestKey): string;
  /** HS256-signs `payload` (with the gateway's secret unless `secret` is given): claims it never mints. */
  sign(payload: object | string, options?: SignOptions): string;
  /** Claims the gateway would mint for `key` now, to alter one at a time. */
  claims(key?: TestKey): Record<string, unknown>;
  /** Marks text as secret for this case's leak checks (forged tokens, custom secrets). */
  secret(value: string): string;
}

export interface SignOptions {
  secret?: string;
  /** JOSE header; `alg` defaults to HS256 and decides the HMAC (`none`: empty signature). */
  header?: Record<string, unknown>;
}

export interface HostileCase {
  readonly name: string;
  readonly request: (ctx: CaseContext) => CaseRequest | Promise<CaseRequest>;
  /** Exact status; `0` when the server closes the connection without an answer. */
  readonly status: number;
  /**
   * The error body's `code`; `null` when no error body is expected (a success, a `HEAD`, or an
   * answer Node's HTTP parser writes before the gateway sees the request).
   */
  readonly code: ErrorCode | null;
  /** Whether the request reaches the upstream. */
  readonly upstream: boolean;
  /** The exact error message, where it is fixed (`Invalid API key`, …). */
  readonly message?: string;
  /** A 429's `scope`: the limit that refused. */
  readonly scope?: string;
  /** Requests sent first (their outcome is not asserted), e.g. to use up a limit. */
  readonly prepare?: (ctx: CaseContext) => Promise<void>;
  /** Further assertions on the answer. */
  readonly then?: (result: CaseResult, ctx: CaseContext) => void | Promise<void>;
  /** The answer legitimately holds a token (a successful token exchange). */
  readonly answerHoldsToken?: boolean;
}

/** Substrings of library messages that must never reach a client or a log line. */
const LIBRARY_MESSAGES: readonly RegExp[] = [
  /jwt (malformed|expired|not active|signature|must be|audience|issuer|id invalid|subject)/i,
  /invalid (signature|algorithm)/,
  /Unexpected (token|end of JSON|non-whitespace)/,
  /at position \d+/,
  /request entity too large/i,
  /Failed to decode param/,
  /\b(TypeError|SyntaxError|RangeError|ReferenceError|URIError|JsonWebTokenError|TokenExpiredError|NotBeforeError)\b/,
  /Cannot read propert/,
  /\bE(CONNREFUSED|CONNRESET|PIPE)\b/,
  /ipaddr:/,
  /secretOrPublicKey|secretOrPrivateKey/,
  /\bnode_modules\b/,
];

/** What a case must never show besides the fixtures' secrets and issued tokens. */
function protectedText(fixtures: Fixtures): string[] {
  const whitelists = fixtures.document.accounts.flatMap((account) =>
    'ipWhitelist' in account
      ? (account.ipWhitelist ?? []).filter((entry) => entry.includes('/'))
      : [],
  );
  return [...allSecrets(fixtures), TOKEN_SECRET, ...whitelists];
}

export function libraryMessagesIn(text: string): string[] {
  return LIBRARY_MESSAGES.filter((pattern) => pattern.test(text)).map(String);
}

/**
 * Defines one `describe` block with a gateway (shared by the rows, or one per row with
 * `freshGateway`) and one test per row.
 */
export function describeHostileCases(
  title: string,
  cases: readonly HostileCase[],
  options: TestGatewayOptions & { freshGateway?: boolean } = {},
): void {
  const { freshGateway = false, ...gatewayOptions } = options;
  describe(title, () => {
    let shared: TestGateway | undefined;
    beforeAll(async () => {
      if (!freshGateway) shared = await startTestGateway(gatewayOptions);
    });
    afterAll(async () => {
      await shared?.close();
    });

    it.each(cases.map((row) => [row.name, row] as const))('%s', async (_name, row) => {
      const gateway = shared ?? (await startTestGateway(gatewayOptions));
      try {
        await runCase(gateway, row);
      } finally {
        if (shared === undefined) await gateway.close();
      }
    });
  });
}

export async function runCase(gateway: TestGateway, row: HostileCase): Promise<void> {
  const extraSecrets: string[] = [];
  const ctx = caseContext(gateway, extraSecrets);
  if (row.prepare !== undefined) await row.prepare(ctx);
  const firstLogLine = gateway.logs.lines.length;
  const firstUpstream = gateway.upstream.requests.length;

  const request = await row.request(ctx);
  const result = await send(gateway, request);

  expect({ status: result.status, code: errorCode(result) }).toEqual({
    status: row.status,
    code: row.code,
  });
  if (row.code !== null) expectRefusalBody(result, row);
  const reached = gateway.upstream.requests.slice(firstUpstream);
  expect(reached.length).toBe(row.upstream ? 1 : 0);
  for (const forwarded of reached) expectNoCredentialForwarded(forwarded, gateway);

  const health = await gateway.send({ path: '/healthz' });
  expect(health.status).toBe(200);

  const secrets = [...protectedText(gateway.fixtures), ...extraSecrets];
  const answer = `${JSON.stringify(result.headers)}\n${result.text}`;
  const answerLeaks = findLeaks(answer, secrets).filter(
    (leak) => !(row.answerHoldsToken === true && leak === 'a JWT'),
  );
  expect(answerLeaks).toEqual([]);
  expect(libraryMessagesIn(answer)).toEqual([]);
  const logs = gateway.logs.lines.slice(firstLogLine).join('\n');
  expect(findLeaks(logs, secrets)).toEqual([]);
  expect(libraryMessagesIn(logs)).toEqual([]);

  await row.then?.(result, ctx);
}

async function send(gateway: TestGateway, request: CaseRequest): Promise<CaseResult> {
  if (!('raw' in request)) return gateway.send(request) satisfies Promise<SendResult>;
  const response: RawResponse = await sendRaw({
    port: gateway.port,
    bytes: rawRequest(request.raw),
    ...(request.from === undefined ? {} : { from: request.from }),
  });
  return response;
}

function errorCode(result: CaseResult): string | null {
  const code = result.body?.code;
  return typeof code === 'string' ? code : null;
}

function expectRefusalBody(result: CaseResult, row: HostileCase): void {
  expect(String(result.headers['content-type'])).toMatch(/^application\/json/);
  expect(result.body).toEqual({
    status: row.status,
    code: row.code,
    message: row.message ?? (expect.any(String) as unknown),
    request_id: expect.any(String) as unknown,
    // A 429 names the limit that refused.
    ...(row.status === 429 ? { scope: row.scope ?? (expect.any(String) as unknown) } : {}),
  });
  expect(ERROR_CODES).toContain(row.code);
  expect(result.headers['x-request-id']).toBe(result.body?.request_id);
}

function expectNoCredentialForwarded(forwarded: RecordedRequest, gateway: TestGateway): void {
  expect(forwarded.headers.authorization).toBeUndefined();
  expect(forwarded.headers['x-service-public-api-key']).toBeUndefined();
  expect(findLeaks(forwarded.url, protectedText(gateway.fixtures))).toEqual([]);
}

function caseContext(gateway: TestGateway, extraSecrets: string[]): CaseContext {
  const keys = gateway.fixtures.keys;
  const secret = (value: string): string => {
    extraSecrets.push(value);
    return value;
  };
  const claims = (key: TestKey = keys.admin): Record<string, unknown> => {
    const iat = Math.floor(Date.now() / 1000);
    return {
      sub: key.id,
      acct: key.accountId,
      role: key.role,
      jti: randomUUID(),
      iat,
      exp: iat + gateway.tokens.ttlSeconds,
      iss: 'tollgate',
    };
  };
  return {
    gateway,
    keys,
    token: (key = keys.admin) =>
      secret(gateway.tokens.issue({ id: key.id, accountId: key.accountId, role: key.role }).token),
    sign: (payload, options = {}) =>
      secret(signJwt(payload, options.secret ?? TOKEN_SECRET, options.header ?? {})),
    claims,
    secret,
  };
}

const HMAC: Record<string, string> = { HS256: 'sha256', HS384: 'sha384', HS512: 'sha512' };

/** A JWT built by hand, so any header, payload or algorithm can be forged (jsonwebtoken refuses some). */
export function signJwt(
  payload: object | string,
  secret: string,
  header: Record<string, unknown> = {},
): string {
  const fullHeader = { alg: 'HS256', typ: 'JWT', ...header };
  const alg = typeof fullHeader.alg === 'string' ? fullHeader.alg : '';
  const encode = (value: object | string): string =>
    Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
  const input = `${encode(fullHeader)}.${encode(payload)}`;
  const hash = HMAC[alg];
  const signature =
    hash === undefined ? '' : createHmac(hash, secret).update(input).digest('base64url');
  return `${input}.${signature}`;
}

export function bearer(value: string): Record<string, string> {
  return { authorization: `Bearer ${value}` };
}

/**
 * The decisions logged for one request id: its access line (`http.request`) when the gate decided
 * (it then carries `outcome`).
 */
export function auditEvents(gateway: TestGateway, requestId: string): Record<string, unknown>[] {
  return gateway.logs
    .entries()
    .filter(
      (entry) =>
        entry.event === 'http.request' && entry.request_id === requestId && 'outcome' in entry,
    );
}

/** Security events (`security.*`) logged for one request id. */
export function securityEvents(gateway: TestGateway, requestId: string): Record<string, unknown>[] {
  return gateway.logs
    .entries()
    .filter(
      (entry) =>
        typeof entry.event === 'string' &&
        entry.event.startsWith('security.') &&
        entry.request_id === requestId,
    );
}

/** A gateway that lets every failure through: the families other than `limits` send many. */
export const UNTHROTTLED = { limits: { authFailures: 100_000 } } as const;

/**
 * What the answer to any input must satisfy (property tests): never a 5xx; an error carries the
 * JSON error body with a known code; nothing protected and no library message is shown.
 */
export function expectSafeAnswer(
  result: CaseResult,
  fixtures: Fixtures,
  extraSecrets: readonly string[] = [],
): void {
  expect(result.status).toBeGreaterThan(0);
  expect(result.status).toBeLessThan(500);
  if (result.status >= 400 && result.body !== undefined) {
    expect(ERROR_CODES).toContain(result.body.code);
    expect(result.body.status).toBe(result.status);
  }
  const answer = `${JSON.stringify(result.headers)}\n${result.text}`;
  expect(findLeaks(answer, [...protectedText(fixtures), ...extraSecrets])).toEqual([]);
  expect(libraryMessagesIn(answer)).toEqual([]);
}

/** The same for every log line written since `firstLine`. */
export function expectSafeLogs(
  gateway: TestGateway,
  firstLine: number,
  extraSecrets: readonly string[] = [],
): void {
  const logs = gateway.logs.lines.slice(firstLine).join('\n');
  expect(findLeaks(logs, [...protectedText(gateway.fixtures), ...extraSecrets])).toEqual([]);
  expect(libraryMessagesIn(logs)).toEqual([]);
}
