import net from 'node:net';
import { Redis } from 'ioredis';
import { DEFAULT_LIMITS } from '../../gateway/config';
import { generateKey } from '../../lib/model/key-format';
import type { LimiterRedis } from '../../lib/rate-limit/window';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { createFixtures, type Fixtures } from '../helpers/fixtures';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
} from '../helpers/redis';

/**
 * The failed-authentication budget (20 failures per minute per client IP), against guesses that
 * arrive together: bodies held back on many connections until every head is in, requests pipelined
 * in one write, many concurrent connections, and two instances sharing Redis. In every shape the
 * right credential comes after the budget is spent, and must get the same 429 `rate_limited` as a
 * wrong one (never reaching the upstream) while one instance compares at most 20 wrong credentials
 * (401). Each shape runs on a gateway counting in memory and on one sharing a real Redis (its own
 * key prefix; the shared Redis is never flushed). The limits are the defaults.
 */

const BUDGET = DEFAULT_LIMITS.authFailures;
const WINDOW_SECONDS = DEFAULT_LIMITS.windowMs / 1000;
const STATUS = '/api/v1/payment/status/';
const WALLETS = '/api/v1/wallets/';
const EXCHANGE = '/api/v1/auth/generate-token/';
/** How long held-back bodies wait after every head is written. */
const HOLD_MS = 150;
/** Longest wait for one connection's answers. */
const ANSWER_TIMEOUT_MS = 8000;
const TEST_TIMEOUT_MS = 20_000;

// ---------------------------------------------------------------------------------------------
// Raw HTTP: many connections, held-back bodies, pipelining, and a parser for what comes back.

interface Answer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Record<string, unknown> | undefined;
}

interface Connection {
  /** Resolves once the bytes are handed to the kernel (or the socket failed). */
  write(bytes: Buffer): Promise<void>;
  /** Everything received, once the server closes the connection (or the wait times out). */
  readonly received: Promise<Buffer>;
}

function connect(port: number, from: string): Promise<Connection> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress: from });
    const chunks: Buffer[] = [];
    const received = new Promise<Buffer>((done) => {
      const timer = setTimeout(() => socket.destroy(), ANSWER_TIMEOUT_MS);
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('close', () => {
        clearTimeout(timer);
        done(Buffer.concat(chunks));
      });
    });
    // A reset after (or instead of) an answer is only the end of the connection.
    socket.on('error', () => undefined);
    socket.once('connect', () => {
      resolve({
        write: (bytes) =>
          new Promise((written) => {
            socket.write(bytes, () => {
              written();
            });
          }),
        received,
      });
    });
    socket.once('error', reject);
  });
}

function requestHead(
  method: string,
  target: string,
  headers: Record<string, string>,
  keepAlive = false,
): string {
  const lines = Object.entries({
    Host: '127.0.0.1',
    ...headers,
    Connection: keepAlive ? 'keep-alive' : 'close',
  }).map(([name, value]) => `${name}: ${value}\r\n`);
  return `${method} ${target} HTTP/1.1\r\n${lines.join('')}\r\n`;
}

/** A JSON POST split in two: the head (with the body's Content-Length) and the body. */
function jsonPost(
  target: string,
  headers: Record<string, string>,
  body: object,
): { head: Buffer; body: Buffer } {
  const payload = Buffer.from(JSON.stringify(body));
  const head = requestHead('POST', target, {
    ...headers,
    'Content-Type': 'application/json',
    'Content-Length': String(payload.length),
  });
  return { head: Buffer.from(head, 'latin1'), body: payload };
}

/** Reads every HTTP/1.1 response in `data`, in order (Content-Length or chunked bodies). */
function parseAnswers(data: Buffer): Answer[] {
  const answers: Answer[] = [];
  let offset = 0;
  while (offset < data.length) {
    const headEnd = data.indexOf('\r\n\r\n', offset, 'latin1');
    if (headEnd === -1) throw new Error(`incomplete response head at byte ${offset}`);
    const [statusLine = '', ...lines] = data.toString('latin1', offset, headEnd).split('\r\n');
    const status = /^HTTP\/1\.1 (\d{3}) /.exec(statusLine)?.[1];
    if (status === undefined) throw new Error(`not a status line: ${JSON.stringify(statusLine)}`);
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    let body: Buffer;
    let next = headEnd + 4;
    if (headers['transfer-encoding']?.toLowerCase() === 'chunked') {
      const parts: Buffer[] = [];
      for (;;) {
        const lineEnd = data.indexOf('\r\n', next, 'latin1');
        const size = parseInt(data.toString('latin1', next, lineEnd), 16);
        next = lineEnd + 2;
        if (size === 0) {
          next += 2;
          break;
        }
        parts.push(data.subarray(next, next + size));
        next += size + 2;
      }
      body = Buffer.concat(parts);
    } else {
      const length = Number(headers['content-length'] ?? 0);
      body = data.subarray(next, next + length);
      next += length;
    }
    answers.push({ status: Number(status), headers, body: parseJson(body) });
    offset = next;
  }
  return answers;
}

function parseJson(body: Buffer): Record<string, unknown> | undefined {
  try {
    return JSON.parse(body.toString('utf8')) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** The one answer a `Connection: close` connection got; status 0 when it got none. */
function onlyAnswer(data: Buffer): Answer {
  const answers = parseAnswers(data);
  return answers.length === 1
    ? answers[0]!
    : { status: 0, headers: {}, body: { answers: answers.length } };
}

/**
 * One connection per request: every head is written, then (once all are in) every body. The
 * gateway reads every body, and compares every credential, at about the same moment.
 */
async function withHeldBackBodies(
  port: number,
  from: string,
  requests: readonly { head: Buffer; body: Buffer }[],
): Promise<Answer[]> {
  const connections = await Promise.all(requests.map(() => connect(port, from)));
  await Promise.all(connections.map((connection, i) => connection.write(requests[i]!.head)));
  await sleep(HOLD_MS);
  await Promise.all(connections.map((connection, i) => connection.write(requests[i]!.body)));
  return Promise.all(connections.map(async ({ received }) => onlyAnswer(await received)));
}

/** All requests in one write on one connection; the answers come back in order. */
async function pipelined(port: number, from: string, heads: readonly string[]): Promise<Answer[]> {
  const connection = await connect(port, from);
  await connection.write(Buffer.from(heads.join(''), 'latin1'));
  return parseAnswers(await connection.received);
}

/** One connection per request: all connected first, then every request written at once. */
async function concurrently(
  port: number,
  from: string,
  heads: readonly string[],
): Promise<Answer[]> {
  const connections = await Promise.all(heads.map(() => connect(port, from)));
  await Promise.all(
    connections.map((connection, i) => connection.write(Buffer.from(heads[i]!, 'latin1'))),
  );
  return Promise.all(connections.map(async ({ received }) => onlyAnswer(await received)));
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// ---------------------------------------------------------------------------------------------
// Guesses and what the answers must show.

/** `count` credentials, all wrong but plausible (valid checksum, unknown), `right` at `rightAt`. */
function guesses(count: number, rightAt: number, right: string): string[] {
  return Array.from({ length: count }, (_, i) =>
    i === rightAt - 1 ? right : generateKey('secret', 'test'),
  );
}

function tally(answers: readonly Answer[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const { status } of answers) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

/** The 429 `rate_limited`: JSON body, integer Retry-After within the window. */
function expectRateLimited(answer: Answer | undefined): void {
  expect(answer?.status).toBe(429);
  expect(answer?.body).toEqual({
    status: 429,
    code: 'rate_limited',
    message: 'Too many requests',
    request_id: expect.any(String) as unknown,
    scope: 'auth-failures',
  });
  const retryAfter = answer?.headers['retry-after'] ?? '';
  expect(retryAfter).toMatch(/^\d+$/);
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
  expect(Number(retryAfter)).toBeLessThanOrEqual(WINDOW_SECONDS);
}

/**
 * One instance, every guess answered: the right one (1-based `rightAt`) refused with 429, exactly
 * the budget's worth of wrong ones compared (401 with `wrongCode`), every other one refused (429).
 */
function expectBudgetHeld(
  answers: readonly Answer[],
  total: number,
  rightAt: number,
  wrongCode: string,
): void {
  expect(answers).toHaveLength(total);
  // Both at once, so that a failure shows what the right key got and how many were compared.
  expect({ rightKey: answers[rightAt - 1]?.status, statuses: tally(answers) }).toEqual({
    rightKey: 429,
    statuses: { 401: BUDGET, 429: total - BUDGET },
  });
  expectRateLimited(answers[rightAt - 1]);
  for (const answer of answers) {
    if (answer.status === 401) expect(answer.body?.code).toBe(wrongCode);
    else expect(answer.body?.code).toBe('rate_limited');
  }
}

/** The upstream saw nothing: no wrong guess got through, and the right key was refused. */
function expectUpstreamUntouched(gateway: TestGateway): void {
  expect(gateway.upstream.requests.map(({ headers }) => headers['x-gateway-key-id'])).toEqual([]);
}

// ---------------------------------------------------------------------------------------------
// The gateways: in memory, or sharing the test Redis under a fresh prefix.

interface Mode {
  readonly label: string;
  readonly describe: jest.Describe;
  /** Third octet of the client addresses, so that no two suites share an address. */
  readonly subnet: number;
  readonly shared: boolean;
}

const MODES: readonly Mode[] = [
  { label: 'counting in memory', describe, subnet: 141, shared: false },
  { label: 'sharing Redis', describe: describeWithRedis, subnet: 142, shared: true },
];

/** Wraps a Redis connection to record every command the gateway sends through it. */
function recording(connection: LimiterRedis): { redis: LimiterRedis; commands: string[][] } {
  const commands: string[][] = [];
  const client = connection.client;
  return {
    commands,
    redis: {
      health: connection.health,
      client: {
        get status() {
          return client.status;
        },
        call: (command: string, ...args: string[]) => {
          commands.push([command, ...args]);
          return client.call(command, ...args);
        },
      },
    },
  };
}

async function waitUntil(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    if (Date.now() > deadline) return false;
    await sleep(20);
  }
}

for (const mode of MODES) {
  mode.describe(`the failed-authentication budget, ${mode.label}`, () => {
    let testRedis: TestRedis | undefined;
    let connection: LimiterRedisConnection | undefined;
    let admin: Redis | undefined;
    const gateways: TestGateway[] = [];

    const from = (host: number): string => `127.0.${mode.subnet}.${host}`;

    const start = async (
      options: { fixtures?: Fixtures; redisPrefix?: string; redis?: LimiterRedis } = {},
    ): Promise<TestGateway> => {
      const gateway = await startTestGateway({
        ...(options.fixtures === undefined ? {} : { fixtures: options.fixtures }),
        ...(connection === undefined
          ? {}
          : {
              redis: options.redis ?? connection,
              redisPrefix: options.redisPrefix ?? uniquePrefix('auth-budget'),
            }),
      });
      gateways.push(gateway);
      return gateway;
    };

    /** With Redis, the gateway must really have counted there, not in degraded memory. */
    const expectCountedWhereExpected = (gateway: TestGateway): void => {
      expect(gateway.app.rateLimitState()).toBe(mode.shared ? 'shared' : 'memory');
    };

    beforeAll(async () => {
      if (!mode.shared) return;
      testRedis = await acquireTestRedis();
      if (testRedis === undefined) throw new Error('describeWithRedis ran without a Redis');
      connection = createLimiterRedis({ url: testRedis.url });
      admin = new Redis(testRedis.url);
      const live = connection;
      if (!(await waitUntil(() => live.health.state === 'shared', 5000))) {
        throw new Error(`the limiter's Redis connection stayed ${live.health.state}`);
      }
    });

    afterEach(async () => {
      await Promise.all(gateways.splice(0).map((gateway) => gateway.close()));
    });

    afterAll(async () => {
      admin?.disconnect();
      await connection?.close();
      await testRedis?.close();
    });

    it(
      'refuses with 429 the right secret key held back with 59 wrong ones (Bearer, 51st of 60), after comparing 20',
      async () => {
        const gateway = await start();
        const right = gateway.fixtures.keys.admin.secretKey;
        const requests = guesses(60, 51, right).map((secret) =>
          jsonPost(STATUS, bearer(secret), { invoice_id: 'inv_1' }),
        );

        const answers = await withHeldBackBodies(gateway.port, from(1), requests);

        expectBudgetHeld(answers, 60, 51, 'invalid_api_key');
        expectUpstreamUntouched(gateway);
        expectCountedWhereExpected(gateway);
      },
      TEST_TIMEOUT_MS,
    );

    it(
      'refuses with 429 and no token the right key pair held back with 59 wrong secrets (51st of 60), after comparing 20',
      async () => {
        const gateway = await start();
        const { publishableKey, secretKey } = gateway.fixtures.keys.admin;
        const requests = guesses(60, 51, secretKey).map((secret) =>
          jsonPost(EXCHANGE, {}, { api_key: publishableKey, api_secret: secret }),
        );

        const answers = await withHeldBackBodies(gateway.port, from(2), requests);

        expectBudgetHeld(answers, 60, 51, 'invalid_credentials');
        expect(answers.filter(({ body }) => body?.token !== undefined)).toEqual([]);
        expectCountedWhereExpected(gateway);
      },
      TEST_TIMEOUT_MS,
    );

    it.each([
      { total: 60, rightAt: 51, host: 3 },
      { total: 150, rightAt: 121, host: 4 },
    ])(
      'refuses with 429 the right secret key pipelined in one write with wrong ones ($rightAt of $total), after comparing 20',
      async ({ total, rightAt, host }) => {
        const gateway = await start();
        const right = gateway.fixtures.keys.admin.secretKey;
        const heads = guesses(total, rightAt, right).map((secret, i) =>
          requestHead('GET', WALLETS, bearer(secret), i < total - 1),
        );

        const answers = await pipelined(gateway.port, from(host), heads);

        expectBudgetHeld(answers, total, rightAt, 'invalid_api_key');
        expectUpstreamUntouched(gateway);
        expectCountedWhereExpected(gateway);
      },
      TEST_TIMEOUT_MS,
    );

    it(
      'refuses with 429 the right secret key among 150 concurrent connections of one guess each (121st), after comparing 20',
      async () => {
        const gateway = await start();
        const right = gateway.fixtures.keys.admin.secretKey;
        const heads = guesses(150, 121, right).map((secret) =>
          requestHead('GET', WALLETS, bearer(secret)),
        );

        const answers = await concurrently(gateway.port, from(5), heads);

        expectBudgetHeld(answers, 150, 121, 'invalid_api_key');
        expectUpstreamUntouched(gateway);
        expectCountedWhereExpected(gateway);
      },
      TEST_TIMEOUT_MS,
    );

    if (!mode.shared) return;

    /** The largest failure count Redis holds for `ip` under `prefix` (0 when none yet). */
    const failuresInRedis = async (prefix: string, ip: string): Promise<number> => {
      if (admin === undefined) throw new Error('no Redis');
      const keys = await admin.keys(`${prefix}*${ip}`);
      const values = keys.length === 0 ? [] : await admin.mget(...keys);
      return Math.max(0, ...values.map((value) => Number(value ?? 0)));
    };

    it(
      'lets a second instance sharing Redis compare at most one more wrong key from an IP whose budget the first spent, then refuses the right key with 429',
      async () => {
        const fixtures = createFixtures();
        const redisPrefix = uniquePrefix('auth-budget-fleet');
        const first = await start({ fixtures, redisPrefix });
        const second = await start({ fixtures, redisPrefix });
        const ip = from(6);
        const guess = (gateway: TestGateway, secret = generateKey('secret', 'test')) =>
          gateway.send({ path: WALLETS, headers: bearer(secret), from: ip });

        const onFirst: number[] = [];
        for (let i = 0; i <= BUDGET; i++) onFirst.push((await guess(first)).status);
        expect(onFirst).toEqual([...Array<number>(BUDGET).fill(401), 429]);
        // Redis is told after the comparison: give it a moment to hold the first's failures.
        await waitUntil(async () => (await failuresInRedis(redisPrefix, ip)) >= BUDGET, 2000);

        const onSecond: number[] = [];
        for (let i = 0; i < 5; i++) onSecond.push((await guess(second)).status);
        const right = await guess(second, fixtures.keys.admin.secretKey);

        expect(onSecond.filter((status) => status === 401).length).toBeLessThanOrEqual(1);
        expect(onSecond.slice(1)).toEqual([429, 429, 429, 429]);
        expectRateLimited({
          status: right.status,
          headers: right.headers as Record<string, string>,
          body: right.body,
        });
        expectUpstreamUntouched(first);
        expectUpstreamUntouched(second);
        expectCountedWhereExpected(first);
        expectCountedWhereExpected(second);
      },
      TEST_TIMEOUT_MS,
    );

    it(
      'keeps two instances within the budget plus one when the second gets 60 guesses pipelined before Redis answers (right key 51st)',
      async () => {
        const fixtures = createFixtures();
        const redisPrefix = uniquePrefix('auth-budget-fleet-pipelined');
        const first = await start({ fixtures, redisPrefix });
        const second = await start({ fixtures, redisPrefix });
        const ip = from(8);
        const spentOnFirst = BUDGET / 2;
        for (let i = 0; i < spentOnFirst; i++) {
          const wrong = await first.send({
            path: WALLETS,
            headers: bearer(generateKey('secret', 'test')),
            from: ip,
          });
          expect(wrong.status).toBe(401);
        }
        await waitUntil(async () => (await failuresInRedis(redisPrefix, ip)) >= spentOnFirst, 2000);

        const right = fixtures.keys.admin.secretKey;
        const heads = guesses(60, 51, right).map((secret, i) =>
          requestHead('GET', WALLETS, bearer(secret), i < 59),
        );
        const answers = await pipelined(second.port, ip, heads);

        // Both instances together compare at most the budget and one more: N instances sharing
        // Redis may compare N - 1 guesses beyond it, since each counts in its own memory first.
        const compared = answers.filter(({ status }) => status === 401).length;
        expect({ rightKey: answers[50]?.status, compared }).toEqual({
          rightKey: 429,
          compared: expect.any(Number) as unknown,
        });
        expect(spentOnFirst + compared).toBeLessThanOrEqual(BUDGET + 1);
        expect(spentOnFirst + compared).toBeGreaterThanOrEqual(BUDGET);
        expectRateLimited(answers[50]);
        expectUpstreamUntouched(first);
        expectUpstreamUntouched(second);
        expectCountedWhereExpected(second);
      },
      TEST_TIMEOUT_MS,
    );

    it(
      'sends Redis nothing but the scope limit for a right key, even after some failures',
      async () => {
        if (connection === undefined) throw new Error('no Redis');
        const redisPrefix = uniquePrefix('auth-budget-success');
        const recorder = recording(connection);
        const gateway = await start({ redisPrefix, redis: recorder.redis });
        const ip = from(7);
        for (let i = 0; i < 3; i++) {
          const wrong = await gateway.send({
            path: WALLETS,
            headers: bearer(generateKey('secret', 'test')),
            from: ip,
          });
          expect(wrong.status).toBe(401);
        }
        await waitUntil(async () => (await failuresInRedis(redisPrefix, ip)) >= 3, 2000);
        await sleep(50);
        recorder.commands.length = 0;

        const right = await gateway.send({
          path: WALLETS,
          headers: bearer(gateway.fixtures.keys.admin.secretKey),
          from: ip,
        });
        await sleep(50);

        expect(right.status).toBe(200);
        const keysTouched = recorder.commands.flatMap((command) =>
          command.filter((arg) => arg.startsWith(redisPrefix)),
        );
        expect(keysTouched.length).toBeGreaterThanOrEqual(1);
        expect(keysTouched.filter((key) => !key.startsWith(`${redisPrefix}payments:`))).toEqual([]);
        expectCountedWhereExpected(gateway);
      },
      TEST_TIMEOUT_MS,
    );
  });
}
