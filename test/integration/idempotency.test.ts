import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { expectErrorBody, withoutRequestId } from '../helpers/error-body';
import { createFixtures, type Fixtures } from '../helpers/fixtures';
import {
  bearer,
  type SendResult,
  startTestGateway,
  type TestGateway,
  type TestGatewayOptions,
} from '../helpers/gateway';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
} from '../helpers/redis';
import {
  defaultResponder,
  type RecordedRequest,
  type RecordingUpstream,
  REFUSING_UPSTREAM_URL,
  startRecordingUpstream,
} from '../helpers/upstream';
import { rawRequest, sendRaw } from '../security/raw-http';
import { startOwnedRedis, stopAll, waitUntil } from '../multiprocess/harness';

/**
 * Idempotency keys (contract, section 17) over real sockets: the sample gateway in front of a real
 * upstream on loopback that counts what it receives, with keys kept in memory on one instance and
 * in a real Redis shared by two instances.
 */

const SECRET = 'idempotency-test-secret-0123456789-abcdefghij';
const PAYOUTS = '/api/v1/payouts/';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A payout's body; `amount` makes it another request. */
function payout(amount = 1250): Record<string, unknown> {
  return { amount, currency: 'EUR', destination: 'acct_dest_1' };
}

/** What the upstream answers a payout: a fresh id each time, so a second forward shows. */
function payoutAnswer(request: RecordedRequest, res: http.ServerResponse): void {
  const body = JSON.stringify({
    id: `po_${randomUUID()}`,
    received:
      request.body.length === 0 ? null : (JSON.parse(request.body.toString('utf8')) as unknown),
  });
  res.writeHead(201, {
    'content-type': 'application/vnd.payments+json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

function keyed(gateway: TestGateway, key: string, secret = gateway.fixtures.keys.level2.secretKey) {
  return { ...bearer(secret), 'idempotency-key': key };
}

function postPayout(
  gateway: TestGateway,
  key: string | undefined,
  body: unknown = payout(),
  secretKey = gateway.fixtures.keys.level2.secretKey,
  from?: string,
): Promise<SendResult> {
  return gateway.send({
    method: 'POST',
    path: PAYOUTS,
    headers: key === undefined ? bearer(secretKey) : keyed(gateway, key, secretKey),
    body,
    ...(from === undefined ? {} : { from }),
  });
}

/** The requests the upstream received carrying `key` in its Idempotency-Key header. */
function forwardedWith(upstream: RecordingUpstream, key: string): RecordedRequest[] {
  return upstream.requests.filter((request) => request.headers['idempotency-key'] === key);
}

function expectReplayOf(retry: SendResult, first: SendResult): void {
  expect(retry.status).toBe(first.status);
  expect(retry.headers['content-type']).toBe(first.headers['content-type']);
  expect(retry.text).toBe(first.text);
  expect(retry.headers['idempotent-replayed']).toBe('true');
  expect(retry.headers['x-request-id']).toMatch(UUID);
  expect(retry.headers['x-request-id']).not.toBe(first.headers['x-request-id']);
}

/**
 * Sends 20 identical keyed payouts at once, spread over `gateways`, while the upstream holds its
 * answer until the other 19 are answered; returns the answers, the first's, and how many requests
 * the upstream had received when it let go.
 */
async function twentyAtOnce(
  gateways: readonly TestGateway[],
  upstream: RecordingUpstream,
  key: string,
): Promise<{ answers: SendResult[]; receivedWhenReleased: number; releasedByTimer: boolean }> {
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  // A safety net, so a broken gateway fails the assertions instead of timing out the test.
  let releasedByTimer = false;
  const timer = setTimeout(() => {
    releasedByTimer = true;
    release();
  }, 8000);
  let receivedWhenReleased = -1;
  upstream.respond = (request, res) => {
    void held.then(() => {
      payoutAnswer(request, res);
    });
  };
  let answered = 0;
  const answers = await Promise.all(
    Array.from({ length: 20 }, (_unused, index) => {
      const gateway = gateways[index % gateways.length]!;
      return postPayout(gateway, key).then((answer) => {
        answered += 1;
        if (answered === 19) {
          receivedWhenReleased = upstream.requests.length;
          release();
        }
        return answer;
      });
    }),
  );
  clearTimeout(timer);
  return { answers, receivedWhenReleased, releasedByTimer };
}

/** The concurrency case, then its retries, on `gateways` (one, or two sharing Redis). */
async function expectOnceUnderConcurrency(
  gateways: readonly TestGateway[],
  upstream: RecordingUpstream,
): Promise<void> {
  const key = `conc-${randomUUID()}`;
  const { answers, receivedWhenReleased, releasedByTimer } = await twentyAtOnce(
    gateways,
    upstream,
    key,
  );
  expect(releasedByTimer).toBe(false);
  expect(receivedWhenReleased).toBe(1);
  expect(upstream.requests).toHaveLength(1);
  expect(forwardedWith(upstream, key)).toHaveLength(1);

  const first = answers.filter((answer) => answer.status === 201);
  const refused = answers.filter((answer) => answer.status !== 201);
  expect(first).toHaveLength(1);
  expect(refused).toHaveLength(19);
  for (const answer of refused) {
    expectErrorBody(answer, { status: 409, code: 'idempotency_key_in_use' });
    expect(answer.headers['retry-after']).toBe('1');
    expect(answer.headers['idempotent-replayed']).toBeUndefined();
  }
  const original = first[0]!;
  expect(original.headers['idempotent-replayed']).toBeUndefined();
  expect(original.headers['content-type']).toBe('application/vnd.payments+json; charset=utf-8');
  expect(JSON.parse(original.text)).toMatchObject({ received: payout() });

  // Every retry, on every instance: the first answer byte for byte, nothing forwarded.
  upstream.respond = payoutAnswer;
  const retries: SendResult[] = [];
  for (let n = 0; n < 4; n++) {
    retries.push(await postPayout(gateways[n % gateways.length]!, key));
  }
  for (const retry of retries) expectReplayOf(retry, original);
  const ids = new Set(retries.map((retry) => retry.headers['x-request-id']));
  expect(ids.size).toBe(retries.length);
  expect(upstream.requests).toHaveLength(1);

  // The same key with another body: refused, nothing forwarded.
  const reused = await postPayout(gateways[gateways.length - 1]!, key, payout(1));
  expectErrorBody(reused, { status: 422, code: 'idempotency_key_reused' });
  expect(upstream.requests).toHaveLength(1);
}

describe('idempotency keys in memory, one instance', () => {
  let upstream: RecordingUpstream;
  let gateway: TestGateway;

  beforeAll(async () => {
    upstream = await startRecordingUpstream();
    gateway = await startTestGateway({
      upstreamUrl: upstream.url,
      idempotency: { secret: SECRET },
    });
  });
  afterEach(() => {
    upstream.reset();
  });
  afterAll(async () => {
    await gateway.close();
    await upstream.close();
  });

  it('forwards 20 identical concurrent requests once, refuses 19 with 409 and replays the answer to retries', async () => {
    await expectOnceUnderConcurrency([gateway], upstream);
  });

  it('keeps the answer of a client that left while the upstream was answering: its retry is replayed', async () => {
    const key = `gone-${randomUUID()}`;
    let answer!: () => void;
    const reached = new Promise<void>((resolve) => {
      upstream.respond = (request, res) => {
        answer = () => {
          payoutAnswer(request, res);
        };
        resolve();
      };
    });
    // The client gives up (its own timeout) while the upstream still holds the payout.
    const body = JSON.stringify(payout());
    const client = http.request({
      host: '127.0.0.1',
      port: gateway.port,
      method: 'POST',
      path: PAYOUTS,
      headers: {
        ...keyed(gateway, key),
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      },
    });
    client.on('error', () => undefined);
    client.end(body);
    await reached;
    client.destroy();
    await new Promise((resolve) => setTimeout(resolve, 100));
    answer();
    upstream.respond = payoutAnswer;
    // Its retry gets what the upstream answered, which nobody had read: the payout made once.
    let retry = await postPayout(gateway, key);
    for (let tries = 0; retry.status === 409 && tries < 50; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      retry = await postPayout(gateway, key);
    }
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(JSON.parse(retry.text)).toMatchObject({ received: payout() });
    expect(forwardedWith(upstream, key)).toHaveLength(1);
  });

  it("forwards another account's request with the same key and body", async () => {
    upstream.respond = payoutAnswer;
    const key = `shared-${randomUUID()}`;
    const mine = await postPayout(gateway, key);
    expect(mine.status).toBe(201);
    // acct_walled's key, from the address its whitelist allows.
    const theirs = await postPayout(
      gateway,
      key,
      payout(),
      gateway.fixtures.keys.walled.secretKey,
      '127.0.0.2',
    );
    expect(theirs.status).toBe(201);
    expect(theirs.headers['idempotent-replayed']).toBeUndefined();
    expect(theirs.text).not.toBe(mine.text);
    expect(forwardedWith(upstream, key)).toHaveLength(2);
  });

  it('passes the header on as the client sent it, the quoted form naming the same key as the bare one', async () => {
    upstream.respond = payoutAnswer;
    const bare = `q${randomUUID()}`;
    const quoted = `"${bare}"`;
    const first = await postPayout(gateway, quoted);
    expect(first.status).toBe(201);
    expect(upstream.requests).toHaveLength(1);
    expect(upstream.requests[0]?.headers['idempotency-key']).toBe(quoted);
    // The bare form is the same key: replayed, not forwarded.
    const retry = await postPayout(gateway, bare);
    expectReplayOf(retry, first);
    expect(upstream.requests).toHaveLength(1);
  });

  it('stores any status the upstream answers, and replays it', async () => {
    const body = JSON.stringify({ error: 'insufficient_funds' });
    upstream.respond = (_request, res) => {
      res.writeHead(402, {
        'content-type': 'application/problem+json',
        'content-length': body.length,
      });
      res.end(body);
    };
    const key = `declined-${randomUUID()}`;
    const first = await postPayout(gateway, key);
    expect(first.status).toBe(402);
    expect(first.text).toBe(body);
    const retry = await postPayout(gateway, key);
    expectReplayOf(retry, first);
    expect(upstream.requests).toHaveLength(1);
  });

  it.each([
    ['256 characters', 'k'.repeat(256)],
    ['a space', 'two words'],
    ['a quote inside quotes', '"a"b"'],
    ['a bare key ending with a quote', 'abc"'],
  ])(
    'refuses a key of %s with 400 idempotency_key_invalid, forwarding nothing',
    async (_what, key) => {
      const answer = await postPayout(gateway, key);
      expectErrorBody(answer, { status: 400, code: 'idempotency_key_invalid' });
      expect(upstream.requests).toHaveLength(0);
    },
  );

  it('takes a key of exactly 255 characters', async () => {
    upstream.respond = payoutAnswer;
    const key = `${randomUUID()}${'k'.repeat(255 - 36)}`;
    expect(key).toHaveLength(255);
    expect((await postPayout(gateway, key)).status).toBe(201);
    expect(forwardedWith(upstream, key)).toHaveLength(1);
  });

  it('refuses the header sent twice with 400 idempotency_key_invalid', async () => {
    const answer = await gateway.send({
      method: 'POST',
      path: PAYOUTS,
      headers: {
        ...bearer(gateway.fixtures.keys.level2.secretKey),
        'idempotency-key': [`a-${randomUUID()}`, `b-${randomUUID()}`],
      },
      body: payout(),
    });
    expectErrorBody(answer, { status: 400, code: 'idempotency_key_invalid' });
    expect(upstream.requests).toHaveLength(0);
  });

  it.each([
    ['empty', Buffer.from('', 'latin1')],
    ['with a non-ASCII character', Buffer.from('caf\u00e9-key', 'latin1')],
    ['with a non-ASCII character in UTF-8', Buffer.from('caf\u00e9-key', 'utf8')],
  ])('refuses a key %s, sent raw, with 400 idempotency_key_invalid', async (_what, value) => {
    const body = JSON.stringify(payout());
    const head = rawRequest({
      method: 'POST',
      target: PAYOUTS,
      headers: [
        ['Authorization', `Bearer ${gateway.fixtures.keys.level2.secretKey}`],
        ['Content-Type', 'application/json'],
        ['Idempotency-Key', '\u0000'],
      ],
      body,
    });
    // The header's value, as bytes: put in place of the placeholder.
    const at = head.indexOf(Buffer.from('Idempotency-Key: \u0000', 'latin1'));
    expect(at).toBeGreaterThan(0);
    const start = at + 'Idempotency-Key: '.length;
    const bytes = Buffer.concat([head.subarray(0, start), value, head.subarray(start + 1)]);
    const answer = await sendRaw({ port: gateway.port, bytes });
    expectErrorBody(answer, { status: 400, code: 'idempotency_key_invalid' });
    expect(upstream.requests).toHaveLength(0);
  });

  it('claims nothing for a request the role refuses: the same key is forwarded for a level-2 key', async () => {
    upstream.respond = payoutAnswer;
    const key = `role-${randomUUID()}`;
    const refused = await postPayout(
      gateway,
      key,
      payout(),
      gateway.fixtures.keys.level1.secretKey,
    );
    expectErrorBody(refused, { status: 403, code: 'insufficient_role' });
    expect(upstream.requests).toHaveLength(0);
    const admitted = await postPayout(gateway, key);
    expect(admitted.status).toBe(201);
    expect(admitted.headers['idempotent-replayed']).toBeUndefined();
    expect(forwardedWith(upstream, key)).toHaveLength(1);
  });

  it('ignores and passes on a key on a route that does not take one', async () => {
    const key = `read-${randomUUID()}`;
    const path = '/api/v1/wallets/';
    const headers = keyed(gateway, key, gateway.fixtures.keys.admin.secretKey);
    const first = await gateway.send({ path, headers });
    const second = await gateway.send({ path, headers });
    for (const answer of [first, second]) {
      expect(answer.status).toBe(200);
      expect(answer.headers['idempotent-replayed']).toBeUndefined();
    }
    expect(forwardedWith(upstream, key)).toHaveLength(2);
    // Even a key that would be invalid on a payout is passed on untouched.
    const odd = 'not a valid key';
    expect(
      (await gateway.send({ path, headers: { ...headers, 'idempotency-key': odd } })).status,
    ).toBe(200);
    expect(forwardedWith(upstream, odd)).toHaveLength(1);
  });

  it('forwards keyless payouts each time when no route requires a key', async () => {
    upstream.respond = payoutAnswer;
    expect((await postPayout(gateway, undefined)).status).toBe(201);
    expect((await postPayout(gateway, undefined)).status).toBe(201);
    expect(upstream.requests).toHaveLength(2);
  });
});

describe('idempotency keys in memory, with options', () => {
  const started: TestGateway[] = [];
  const upstreams: RecordingUpstream[] = [];

  async function gatewayWith(
    options: TestGatewayOptions,
  ): Promise<{ gateway: TestGateway; upstream: RecordingUpstream }> {
    const upstream = await startRecordingUpstream();
    upstreams.push(upstream);
    const gateway = await startTestGateway({ upstreamUrl: upstream.url, ...options });
    started.push(gateway);
    return { gateway, upstream };
  }

  afterAll(async () => {
    for (const gateway of started) await gateway.close();
    for (const upstream of upstreams) await upstream.close();
  });

  it('refuses a payout without a key with 400 idempotency_key_required where the route requires one', async () => {
    const { gateway, upstream } = await gatewayWith({
      idempotency: { secret: SECRET, required: [PAYOUTS] },
    });
    upstream.respond = payoutAnswer;
    const answer = await postPayout(gateway, undefined);
    expectErrorBody(answer, { status: 400, code: 'idempotency_key_required' });
    expect(upstream.requests).toHaveLength(0);
    expect((await postPayout(gateway, `req-${randomUUID()}`)).status).toBe(201);
    // Another route that takes a key, not named: optional there.
    const chargeback = await gateway.send({
      method: 'POST',
      path: '/api/v1/chargebacks/',
      headers: bearer(gateway.fixtures.keys.level2.secretKey),
      body: { payment: 'pay_1' },
    });
    expect(chargeback.status).toBe(201);
    expect(upstream.requests).toHaveLength(2);
  });

  it('answers an upstream timeout 504 and replays that 504 with the retry own request id, forwarding once', async () => {
    const { gateway, upstream } = await gatewayWith({
      idempotency: { secret: SECRET },
      upstreamTimeoutMs: 300,
    });
    upstream.respond = () => undefined; // never answers
    const key = `timeout-${randomUUID()}`;
    const first = await postPayout(gateway, key);
    const firstBody = expectErrorBody(first, { status: 504, code: 'upstream_timeout' });
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    const retry = await postPayout(gateway, key);
    const retryBody = expectErrorBody(retry, { status: 504, code: 'upstream_timeout' });
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retryBody.request_id).not.toBe(firstBody.request_id);
    expect(withoutRequestId(retry)).toEqual(withoutRequestId(first));
    expect(upstream.requests).toHaveLength(1);
  });

  it('keeps no answer larger than maxAnswerBytes: its retry is refused 409 naming the status, never forwarded', async () => {
    const { gateway, upstream } = await gatewayWith({
      idempotency: { secret: SECRET, maxAnswerBytes: 1024 },
    });
    const big = JSON.stringify({ id: 'po_big', filler: 'x'.repeat(2048) });
    upstream.respond = (_request, res) => {
      res.writeHead(202, { 'content-type': 'application/json', 'content-length': big.length });
      res.end(big);
    };
    const key = `large-${randomUUID()}`;
    const first = await postPayout(gateway, key);
    expect(first.status).toBe(202);
    expect(first.text).toBe(big);
    const retry = await postPayout(gateway, key);
    expectErrorBody(retry, {
      status: 409,
      code: 'idempotency_key_in_use',
      message: /status 202/,
    });
    expect(retry.headers['retry-after']).toBeUndefined();
    expect(upstream.requests).toHaveLength(1);
    // An answer within the bound is kept as before.
    const small = JSON.stringify({ id: 'po_small' });
    upstream.respond = (_request, res) => {
      res.writeHead(201, { 'content-type': 'application/json', 'content-length': small.length });
      res.end(small);
    };
    const other = `small-${randomUUID()}`;
    const kept = await postPayout(gateway, other);
    expectReplayOf(await postPayout(gateway, other), kept);
    expect(upstream.requests).toHaveLength(2);
  });
});

describeWithRedis('idempotency keys in Redis shared by two instances', () => {
  let redis: TestRedis;
  let connections: LimiterRedisConnection[] = [];
  let upstream: RecordingUpstream;
  let fixtures: Fixtures;
  const started: TestGateway[] = [];
  let first: TestGateway;
  let second: TestGateway;
  const prefix = uniquePrefix('idem');

  async function instance(options: Partial<TestGatewayOptions> = {}): Promise<TestGateway> {
    const connection = createLimiterRedis({ url: redis.url });
    connections.push(connection);
    await waitUntil(() => connection.health.state === 'shared', 5000);
    const gateway = await startTestGateway({
      fixtures,
      redis: connection,
      redisPrefix: prefix,
      expectedInstances: 2,
      upstreamUrl: upstream.url,
      idempotency: { secret: SECRET },
      ...options,
    });
    started.push(gateway);
    return gateway;
  }

  beforeAll(async () => {
    const acquired = await acquireTestRedis();
    if (acquired === undefined) throw new Error('describeWithRedis ran without a Redis');
    redis = acquired;
    upstream = await startRecordingUpstream();
    fixtures = createFixtures();
    first = await instance();
    second = await instance();
  });
  afterEach(() => {
    upstream.reset();
  });
  afterAll(async () => {
    for (const gateway of started) await gateway.close();
    for (const connection of connections) await connection.close();
    connections = [];
    await upstream.close();
    await redis.close();
  });

  it('forwards 20 identical concurrent requests split over both instances once, and replays on both', async () => {
    expect(first.app.readiness.report().checks.idempotency.status).toBe('shared');
    await expectOnceUnderConcurrency([first, second], upstream);
  });

  it("forwards another account's request with the same key through the other instance", async () => {
    upstream.respond = payoutAnswer;
    const key = `acct-${randomUUID()}`;
    expect((await postPayout(first, key)).status).toBe(201);
    const theirs = await postPayout(
      second,
      key,
      payout(),
      fixtures.keys.walled.secretKey,
      '127.0.0.2',
    );
    expect(theirs.status).toBe(201);
    expect(theirs.headers['idempotent-replayed']).toBeUndefined();
    expect(forwardedWith(upstream, key)).toHaveLength(2);
  });

  it('releases the claim when no connection to the upstream could be made: the retry is forwarded', async () => {
    const closed = await instance({ upstreamUrl: REFUSING_UPSTREAM_URL });
    upstream.respond = payoutAnswer;
    const key = `refused-${randomUUID()}`;
    const failed = await postPayout(closed, key);
    expectErrorBody(failed, { status: 502, code: 'upstream_unavailable' });
    expect(upstream.requests).toHaveLength(0);
    const retry = await postPayout(second, key);
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBeUndefined();
    expect(forwardedWith(upstream, key)).toHaveLength(1);
    // And its answer is kept from then on, on every instance.
    expectReplayOf(await postPayout(first, key), retry);
    expect(upstream.requests).toHaveLength(1);
  });

  it('never replays nor forwards again through an instance sealing under another secret: 409', async () => {
    upstream.respond = payoutAnswer;
    const key = `secret-${randomUUID()}`;
    const answered = await postPayout(first, key);
    expect(answered.status).toBe(201);
    const other = await instance({
      idempotency: { secret: 'another-secret-for-idempotency-0123456789-xyz' },
    });
    const retry = await postPayout(other, key);
    expectErrorBody(retry, { status: 409, code: 'idempotency_key_in_use' });
    expect(retry.headers['idempotent-replayed']).toBeUndefined();
    expect(upstream.requests).toHaveLength(1);
  });
});

describeWithRedis('idempotency keys while Redis is down', () => {
  let connection: LimiterRedisConnection | undefined;
  let gateway: TestGateway | undefined;

  afterAll(async () => {
    await gateway?.close();
    await connection?.close();
    await stopAll();
  });

  it('refuses requests with a key 503 idempotency_unavailable with Retry-After, and serves those without', async () => {
    const server = await startOwnedRedis();
    connection = createLimiterRedis({ url: server.url });
    await waitUntil(() => connection?.health.state === 'shared', 5000);
    gateway = await startTestGateway({
      redis: connection,
      redisPrefix: uniquePrefix('idem-down'),
      idempotency: { secret: SECRET },
    });
    const { upstream } = gateway;
    upstream.respond = payoutAnswer;
    const live = gateway;
    expect((await postPayout(live, `up-${randomUUID()}`)).status).toBe(201);
    expect(upstream.requests).toHaveLength(1);

    await server.stop();
    const key = `down-${randomUUID()}`;
    const refused = await postPayout(live, key);
    expectErrorBody(refused, { status: 503, code: 'idempotency_unavailable' });
    expect(refused.headers['retry-after']).toMatch(/^\d+$/);
    expect(forwardedWith(upstream, key)).toHaveLength(0);
    // Another refusal once the outage is known, too.
    expectErrorBody(await postPayout(live, key), { status: 503, code: 'idempotency_unavailable' });
    expect(live.app.readiness.report().checks.idempotency.status).toBe('degraded');

    const keyless = await postPayout(live, undefined);
    expect(keyless.status).toBe(201);
    upstream.respond = defaultResponder;
    const read = await live.send({
      path: '/api/v1/wallets/',
      headers: bearer(live.fixtures.keys.admin.secretKey),
    });
    expect(read.status).toBe(200);
    expect(upstream.requests).toHaveLength(3);
  });
});
