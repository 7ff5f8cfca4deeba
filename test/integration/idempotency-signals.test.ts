import { randomBytes } from 'node:crypto';
import { SpanKind } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace';
import { IDEMPOTENT_PATHS } from '../../gateway/routes';
import { IDEMPOTENCY_OUTCOMES } from '../../lib/internal';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { allSecrets, type TestKey } from '../helpers/fixtures';
import { bearer, type SendResult, startTestGateway, type TestGateway } from '../helpers/gateway';
import { findLeaks } from '../helpers/logs';
import {
  acquireTestRedis,
  describeWithRedis,
  freePort,
  type TestRedis,
  uniquePrefix,
} from '../helpers/redis';
import { installTestTracing, type TestTracing, traceparent } from '../helpers/tracing';
import type { RecordedRequest } from '../helpers/upstream';

/**
 * What operators see of idempotency keys (contract, section 17): `tollgate_idempotency_total`
 * served at 0 for every idempotent route and outcome, then counting each outcome once; an audit
 * line per replay and per refusal naming the account, the key id, the request and the route, never
 * a body or a secret; the outcome on the request's span; and `/readyz` saying where keys are kept
 * (`memory`, `shared`, or `degraded` with a warning while Redis cannot be used).
 */

const PAYOUTS = '/api/v1/payouts/';
const WALLETS = '/api/v1/wallets/';
/** Markers of the request body and of the upstream's answer: never in a log line. */
const REQUEST_MARK = 'request-body-marker-7c1f0e';
const ANSWER_MARK = 'answer-body-marker-94b2d3';
const DEGRADED_WARNING =
  'idempotency keys: Redis unusable; requests carrying an Idempotency-Key are refused 503, requests without one are served';

type Counts = Map<string, number>;

/** `tollgate_idempotency_total` by `route outcome`. */
async function idempotencyCounts(gateway: TestGateway): Promise<Counts> {
  const counts: Counts = new Map();
  for (const line of (await gateway.app.metrics.text()).split('\n')) {
    const match = /^tollgate_idempotency_total\{([^}]*)\} (\S+)$/.exec(line);
    if (match === null) continue;
    const labels = new Map(
      [...(match[1] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((pair) => [pair[1], pair[2]]),
    );
    expect([...labels.keys()].sort()).toEqual(['outcome', 'route']);
    counts.set(`${labels.get('route')} ${labels.get('outcome')}`, Number(match[2]));
  }
  return counts;
}

/** The counts that changed between `before` and `after`, by `route outcome`. */
function changes(before: Counts, after: Counts): Record<string, number> {
  const changed: Record<string, number> = {};
  for (const [series, value] of after) {
    const delta = value - (before.get(series) ?? 0);
    if (delta !== 0) changed[series] = delta;
  }
  return changed;
}

async function waitUntil(ready: () => boolean | Promise<boolean>, timeoutMs = 3000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await ready())) {
    if (Date.now() > deadline) throw new Error(`not ready within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function randomTraceId(): string {
  return randomBytes(16).toString('hex');
}

/** The server span of the trace `traceId`, once it has ended. */
async function serverSpanOf(tracing: TestTracing, traceId: string): Promise<ReadableSpan> {
  const find = (spans: readonly ReadableSpan[]) =>
    spans.find((span) => span.kind === SpanKind.SERVER && span.spanContext().traceId === traceId);
  const span = find(await tracing.waitFor((spans) => find(spans) !== undefined));
  if (span === undefined) throw new Error(`no server span in trace ${traceId}`);
  return span;
}

/** The `idempotency.*` audit lines, in order. */
function auditLines(gateway: TestGateway): Record<string, unknown>[] {
  return gateway.logs
    .entries()
    .filter((entry) => typeof entry.event === 'string' && entry.event.startsWith('idempotency.'));
}

let tracing: TestTracing;

beforeAll(() => {
  tracing = installTestTracing();
});

afterAll(async () => {
  await tracing.uninstall();
});

describe('idempotency signals, keys kept in memory', () => {
  let gateway: TestGateway;
  let before: Counts;
  let key: TestKey;
  /** Each answer of the scripted sequence, with the trace it was sent in. */
  const answers: Record<string, { result: SendResult; traceId: string }> = {};

  const payout = async (
    idempotencyKey: string | string[],
    body: unknown,
  ): Promise<{ result: SendResult; traceId: string }> => {
    const traceId = randomTraceId();
    const result = await gateway.send({
      method: 'POST',
      path: PAYOUTS,
      headers: {
        ...bearer(key.secretKey),
        'idempotency-key': idempotencyKey,
        traceparent: traceparent(traceId, '00f067aa0ba902b7', true),
      },
      body,
    });
    return { result, traceId };
  };

  beforeAll(async () => {
    gateway = await startTestGateway();
    key = gateway.fixtures.keys.level2;
    await gateway.app.upstreamChecked;
    before = await idempotencyCounts(gateway);

    // The scripted sequence: a first use held by the upstream while the same key arrives again
    // (409) and with another body (422); once answered, a retry (replayed); then a malformed key.
    const idempotencyKey = `payout-${randomBytes(8).toString('hex')}`;
    const body = { amount: 1250, currency: 'EUR', note: REQUEST_MARK };
    const held: (() => void)[] = [];
    gateway.upstream.respond = (_request: RecordedRequest, res) => {
      held.push(() => {
        const text = JSON.stringify({ id: 'po_1', status: 'pending', note: ANSWER_MARK });
        res.writeHead(201, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(text),
        });
        res.end(text);
      });
    };
    const first = payout(idempotencyKey, body);
    await waitUntil(() => held.length === 1);
    answers.in_use = await payout(idempotencyKey, body);
    answers.reused = await payout(idempotencyKey, { ...body, amount: 9999 });
    held[0]?.();
    answers.stored = await first;
    answers.replayed = await payout(idempotencyKey, body);
    answers.invalid = await payout('', body);
  });

  afterAll(async () => {
    await gateway.close();
  });

  it('serves tollgate_idempotency_total at 0 for every idempotent route and outcome before any request', () => {
    const expected = IDEMPOTENT_PATHS.flatMap((route) =>
      IDEMPOTENCY_OUTCOMES.map((outcome) => `${route} ${outcome}`),
    );
    expect([...before.keys()].sort()).toEqual([...expected].sort());
    expect([...before.values()].every((value) => value === 0)).toBe(true);
    expect(IDEMPOTENT_PATHS).toContain(PAYOUTS);
  });

  it('answers the scripted sequence as the contract says', () => {
    expect(answers.stored?.result.status).toBe(201);
    expect(answers.in_use?.result.status).toBe(409);
    expect(answers.in_use?.result.body?.code).toBe('idempotency_key_in_use');
    expect(answers.reused?.result.status).toBe(422);
    expect(answers.reused?.result.body?.code).toBe('idempotency_key_reused');
    expect(answers.replayed?.result.status).toBe(201);
    expect(answers.replayed?.result.headers['idempotent-replayed']).toBe('true');
    expect(answers.replayed?.result.text).toBe(answers.stored?.result.text);
    expect(answers.invalid?.result.status).toBe(400);
    expect(answers.invalid?.result.body?.code).toBe('idempotency_key_invalid');
    // Forwarded once.
    expect(gateway.upstream.requests).toHaveLength(1);
  });

  it('counts claimed, stored, replayed, in_use, reused and invalid once each, nothing else', async () => {
    expect(changes(before, await idempotencyCounts(gateway))).toEqual({
      [`${PAYOUTS} claimed`]: 1,
      [`${PAYOUTS} stored`]: 1,
      [`${PAYOUTS} replayed`]: 1,
      [`${PAYOUTS} in_use`]: 1,
      [`${PAYOUTS} reused`]: 1,
      [`${PAYOUTS} invalid`]: 1,
    });
  });

  it('writes an audit line per replay and per refusal, naming the account, key id, request and route', () => {
    const lines = auditLines(gateway);
    expect(lines.map((line) => line.event)).toEqual([
      'idempotency.in_use',
      'idempotency.reused',
      'idempotency.replayed',
      'idempotency.invalid',
    ]);
    for (const line of lines) {
      const outcome = String(line.event).slice('idempotency.'.length);
      expect(line).toMatchObject({
        level: 'info',
        route: PAYOUTS,
        account_id: key.accountId,
        key_id: key.id,
        request_id: answers[outcome]?.result.headers['x-request-id'],
      });
      expect(typeof line.request_id).toBe('string');
    }
  });

  it('never logs the request body, the answer body or a secret', () => {
    const text = gateway.logs.lines.join('\n');
    expect(text).toContain('idempotency.replayed');
    expect(findLeaks(text, [...allSecrets(gateway.fixtures), REQUEST_MARK, ANSWER_MARK])).toEqual(
      [],
    );
  });

  it('puts the outcome on the request span as tollgate.idempotency', async () => {
    for (const outcome of ['stored', 'in_use', 'reused', 'replayed', 'invalid']) {
      const span = await serverSpanOf(tracing, answers[outcome]?.traceId ?? '');
      expect([outcome, span.attributes['tollgate.idempotency']]).toEqual([outcome, outcome]);
    }
  });

  it('reports checks.idempotency.status "memory" on /readyz, with no warning', async () => {
    const ready = await gateway.send({ path: '/readyz' });
    expect(ready.status).toBe(200);
    expect(ready.body?.checks).toMatchObject({ idempotency: { status: 'memory' } });
    expect(ready.body?.warnings).toEqual([]);
  });
});

describe('idempotency signals while Redis cannot be used', () => {
  let connection: LimiterRedisConnection;
  let gateway: TestGateway;

  beforeAll(async () => {
    // Nothing listens on this port: the client is degraded after its first connection attempt.
    connection = createLimiterRedis({ url: `redis://127.0.0.1:${await freePort()}` });
    gateway = await startTestGateway({ redis: connection, redisPrefix: uniquePrefix('idem') });
    await gateway.app.upstreamChecked;
    await waitUntil(() => connection.health.state === 'degraded');
  });

  afterAll(async () => {
    await gateway.close();
    await connection.close();
  });

  it('reports checks.idempotency.status "degraded" on /readyz with a warning, and stays ready', async () => {
    const ready = await gateway.send({ path: '/readyz' });
    expect(ready.status).toBe(200);
    expect(ready.body?.checks).toMatchObject({
      idempotency: { status: 'degraded' },
      rate_limits: { status: 'degraded' },
    });
    expect(ready.body?.warnings).toContain(DEGRADED_WARNING);
  });

  it('refuses a keyed request 503, counts it unavailable, logs it as a warning and marks its span', async () => {
    const key = gateway.fixtures.keys.level2;
    const before = await idempotencyCounts(gateway);
    const traceId = randomTraceId();
    const refused = await gateway.send({
      method: 'POST',
      path: PAYOUTS,
      headers: {
        ...bearer(key.secretKey),
        'idempotency-key': 'payout-during-outage',
        traceparent: traceparent(traceId, '00f067aa0ba902b7', true),
      },
      body: { amount: 10, note: REQUEST_MARK },
    });
    expect(refused.status).toBe(503);
    expect(refused.body?.code).toBe('idempotency_unavailable');
    expect(refused.headers['retry-after']).toBeDefined();
    // Without a key the same route is served.
    const unkeyed = await gateway.send({
      method: 'POST',
      path: PAYOUTS,
      headers: bearer(key.secretKey),
      body: { amount: 10 },
    });
    expect(unkeyed.status).toBe(200);
    expect(gateway.upstream.requests).toHaveLength(1);

    expect(changes(before, await idempotencyCounts(gateway))).toEqual({
      [`${PAYOUTS} unavailable`]: 1,
    });
    expect(auditLines(gateway)).toEqual([
      expect.objectContaining({
        event: 'idempotency.unavailable',
        level: 'warn',
        route: PAYOUTS,
        account_id: key.accountId,
        key_id: key.id,
        request_id: refused.headers['x-request-id'],
      }),
    ]);
    const span = await serverSpanOf(tracing, traceId);
    expect(span.attributes['tollgate.idempotency']).toBe('unavailable');
    expect(
      findLeaks(gateway.logs.lines.join('\n'), [...allSecrets(gateway.fixtures), REQUEST_MARK]),
    ).toEqual([]);
  });
});

describeWithRedis('idempotency signals with keys kept in Redis', () => {
  let redis: TestRedis;
  let connection: LimiterRedisConnection;
  let gateway: TestGateway;

  beforeAll(async () => {
    const acquired = await acquireTestRedis();
    if (acquired === undefined) throw new Error('describeWithRedis ran without a Redis');
    redis = acquired;
    connection = createLimiterRedis({ url: redis.url });
    await waitUntil(() => connection.health.state === 'shared', 5000);
    gateway = await startTestGateway({ redis: connection, redisPrefix: uniquePrefix('idem') });
    await gateway.app.upstreamChecked;
  });

  afterAll(async () => {
    await gateway.close();
    await connection.close();
    await redis.close();
  });

  it('reports checks.idempotency.status "shared" on /readyz, with no warning', async () => {
    const ready = await gateway.send({ path: '/readyz' });
    expect(ready.status).toBe(200);
    expect(ready.body?.checks).toMatchObject({ idempotency: { status: 'shared' } });
    expect(ready.body?.warnings).toEqual([]);
  });

  it('counts a first use and its replay through Redis, and audits the replay', async () => {
    const key = gateway.fixtures.keys.level2;
    const before = await idempotencyCounts(gateway);
    const idempotencyKey = `payout-${randomBytes(8).toString('hex')}`;
    const send = () =>
      gateway.send({
        method: 'POST',
        path: PAYOUTS,
        headers: { ...bearer(key.secretKey), 'idempotency-key': idempotencyKey },
        body: { amount: 75, note: REQUEST_MARK },
      });
    const first = await send();
    const retry = await send();
    expect(first.status).toBe(200);
    expect(retry.status).toBe(200);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(gateway.upstream.requests).toHaveLength(1);
    expect(changes(before, await idempotencyCounts(gateway))).toEqual({
      [`${PAYOUTS} claimed`]: 1,
      [`${PAYOUTS} stored`]: 1,
      [`${PAYOUTS} replayed`]: 1,
    });
    expect(auditLines(gateway)).toEqual([
      expect.objectContaining({
        event: 'idempotency.replayed',
        account_id: key.accountId,
        key_id: key.id,
        request_id: retry.headers['x-request-id'],
        route: PAYOUTS,
      }),
    ]);
    // An unkeyed request is not counted.
    const unkeyed = await gateway.send({ path: WALLETS, headers: bearer(key.secretKey) });
    expect(unkeyed.status).toBe(200);
    expect(changes(before, await idempotencyCounts(gateway))).toEqual({
      [`${PAYOUTS} claimed`]: 1,
      [`${PAYOUTS} stored`]: 1,
      [`${PAYOUTS} replayed`]: 1,
    });
  });
});
