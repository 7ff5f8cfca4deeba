import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { createAdminApp } from '../../gateway/admin';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { sha256 } from '../../lib/keys/key-store';
import { withLastCharacterChanged } from '../helpers/fixtures';
import { askAs, type ClientRequest } from '../helpers/forward-auth';
import { bearer, type SendResult, startTestGateway, type TestGateway } from '../helpers/gateway';
import { captureLogs } from '../helpers/logs';
import {
  answerFaults,
  declaredStatuses,
  expectDescribed,
  type ReceivedAnswer,
  responseFaults,
} from '../helpers/openapi-answer';
import { freePort, uniquePrefix } from '../helpers/redis';
import { sleep } from '../helpers/routes';
import { REFUSING_UPSTREAM_URL } from '../helpers/upstream';

/**
 * Every answer the description promises, provoked for real over HTTP and held to the description
 * (test/helpers/openapi-answer.ts): the forward-auth door asked with every method Envoy may
 * forward, each refusal the door declares, the admin listener's 405 and malformed ids, and
 * `/readyz` ready and not. An answer whose status were not declared fails here twice: the
 * gateway's own answer checks turn it into a 500, and the check of this file names it.
 */

const CLIENT = '198.51.100.7';
const PAYOUTS = '/api/v1/payouts/';
/** Every method an OpenAPI path item can describe, each described for the ext-authz door. */
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE'] as const;
const EXT_AUTHZ = '/authz/ext-authz/{original_path}';

/** The path each proxy asks, and the method it asks with (Envoy: the original one). */
const DOOR: Readonly<Record<'traefik' | 'nginx' | 'envoy', string>> = {
  traefik: '/authz/forward-auth',
  nginx: '/authz/auth-request',
  envoy: '/authz/ext-authz',
};

interface Asked {
  readonly method: string;
  readonly path: string;
  readonly answer: SendResult;
}

async function ask(
  proxy: keyof typeof DOOR,
  gateway: TestGateway,
  client: Partial<ClientRequest> & { target: string },
  from?: string,
): Promise<Asked> {
  const original = { method: 'GET', clientIp: CLIENT, ...client };
  const answer = await askAs(proxy, gateway, original, from);
  return proxy === 'envoy'
    ? { method: original.method, path: `${DOOR.envoy}${original.target}`, answer }
    : { method: 'GET', path: DOOR[proxy], answer };
}

/** The refusal's real status: nginx's dialect names it in `X-Tollgate-Status` when it is not 401. */
function realStatus(answer: SendResult): number {
  const named = answer.headers['x-tollgate-status'];
  return typeof named === 'string' ? Number(named) : answer.status;
}

async function waitUntil(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!condition() && Date.now() < deadline) await sleep(20);
  expect(condition()).toBe(true);
}

describe('the forward-auth door answers as the API description says', () => {
  let gateway: TestGateway;
  /** A gateway whose payments limit is one request a minute. */
  let limited: TestGateway;
  /** A gateway whose Redis cannot be used: requests with an Idempotency-Key are refused 503. */
  let degraded: TestGateway;
  let brokenRedis: LimiterRedisConnection;

  beforeAll(async () => {
    brokenRedis = createLimiterRedis({ url: `redis://127.0.0.1:${await freePort()}` });
    [gateway, limited, degraded] = await Promise.all([
      startTestGateway({ trustProxy: ['127.0.0.1'] }),
      startTestGateway({ trustProxy: ['127.0.0.1'], limits: { payments: 1 } }),
      startTestGateway({
        trustProxy: ['127.0.0.1'],
        redis: brokenRedis,
        redisPrefix: uniquePrefix('openapi'),
      }),
    ]);
    await waitUntil(() => brokenRedis.health.state === 'degraded');
  });
  afterAll(async () => {
    await Promise.all([gateway.close(), limited.close(), degraded.close()]);
    await brokenRedis.close();
  });
  afterEach(() => {
    expect(gateway.upstream.requests).toEqual([]);
  });

  describe.each(METHODS)('ext-authz asked with %s', (method) => {
    const target = method === 'GET' || method === 'HEAD' ? '/api/v1/wallets/' : PAYOUTS;

    it('answers every request as the operation of its method describes', async () => {
      const key = gateway.fixtures.keys.admin;
      const answers = [
        // A route that takes the method (GET, HEAD, POST), or the one it takes named in Allow.
        await ask('envoy', gateway, { method, target, headers: bearer(key.secretKey) }),
        // No credential.
        await ask('envoy', gateway, { method, target }),
        // No such route.
        await ask('envoy', gateway, {
          method,
          target: '/api/v1/nowhere/',
          headers: bearer(key.secretKey),
        }),
      ];
      const statuses = answers.map(({ answer }) => answer.status);
      // The route table answers HEAD as GET, as Express does.
      const takes = method === 'GET' || method === 'HEAD' || method === 'POST';
      expect(statuses).toEqual([takes ? 200 : 405, takes ? 401 : 405, 404]);
      for (const asked of answers) expectDescribed(asked.method, asked.path, asked.answer);
      if (takes) {
        expect(answers[0]?.answer.headers['x-envoy-auth-headers-to-remove']).toBeDefined();
      } else {
        expect(answers[0]?.answer.headers.allow).toBe('POST');
      }
    });
  });

  it('is described for every method, each with the same answers', () => {
    const statuses = declaredStatuses('GET', EXT_AUTHZ);
    for (const method of METHODS) expect(declaredStatuses(method, EXT_AUTHZ)).toEqual(statuses);
  });

  /** One way to provoke a refusal of the door, the status it is due, and the gateway asked. */
  interface Provocation {
    readonly name: string;
    readonly status: number;
    readonly run: (proxy: keyof typeof DOOR) => Promise<Asked>;
  }

  const provocations: readonly Provocation[] = [
    {
      name: 'an allowed request',
      status: 200,
      run: (proxy) =>
        ask(proxy, gateway, {
          target: '/api/v1/wallets/',
          headers: bearer(gateway.fixtures.keys.admin.secretKey),
        }),
    },
    {
      name: 'the token exchange, which reads its body',
      status: 400,
      run: (proxy) =>
        ask(proxy, gateway, {
          method: 'POST',
          target: '/api/v1/auth/generate-token/',
          headers: bearer(gateway.fixtures.keys.admin.secretKey),
        }),
    },
    {
      name: 'a target holding a fragment, refused before the door',
      status: 400,
      run: async (proxy) => {
        const path = `${DOOR[proxy]}${proxy === 'envoy' ? '/api/v1/wallets/' : ''}#part`;
        const answer = await gateway.send({ path, headers: { 'x-forwarded-for': CLIENT } });
        return { method: 'GET', path, answer };
      },
    },
    {
      name: 'no credential',
      status: 401,
      run: (proxy) => ask(proxy, gateway, { target: '/api/v1/wallets/' }),
    },
    {
      name: 'a role too low',
      status: 403,
      run: (proxy) =>
        ask(proxy, gateway, {
          method: 'POST',
          target: '/api/v1/payouts/id_1/approve/',
          headers: bearer(gateway.fixtures.keys.level2.secretKey),
        }),
    },
    {
      name: 'a client address outside the whitelist',
      status: 403,
      run: (proxy) =>
        ask(proxy, gateway, {
          target: '/api/v1/wallets/',
          headers: bearer(gateway.fixtures.keys.walled.secretKey),
          clientIp: '127.0.11.9',
        }),
    },
    {
      name: 'no such route',
      status: 404,
      run: (proxy) =>
        ask(proxy, gateway, {
          target: '/api/v1/nowhere/',
          headers: bearer(gateway.fixtures.keys.admin.secretKey),
        }),
    },
    {
      name: 'a peer that is not a trusted proxy',
      status: 404,
      run: (proxy) =>
        ask(
          proxy,
          gateway,
          { target: '/api/v1/wallets/', headers: bearer(gateway.fixtures.keys.admin.secretKey) },
          '127.0.0.3',
        ),
    },
    {
      name: 'a method the route does not take',
      status: 405,
      run: (proxy) =>
        ask(proxy, gateway, {
          method: 'DELETE',
          target: '/api/v1/wallets/',
          headers: bearer(gateway.fixtures.keys.admin.secretKey),
        }),
    },
    {
      name: 'an Idempotency-Key allowed already',
      status: 409,
      run: async (proxy) => {
        const headers = {
          ...bearer(gateway.fixtures.keys.level2.secretKey),
          'idempotency-key': randomUUID(),
        };
        const first = await ask(proxy, gateway, { method: 'POST', target: PAYOUTS, headers });
        expect(first.answer.status).toBe(200);
        return ask(proxy, gateway, { method: 'POST', target: PAYOUTS, headers });
      },
    },
    {
      name: 'an Idempotency-Key first used with another path',
      status: 422,
      run: async (proxy) => {
        const headers = {
          ...bearer(gateway.fixtures.keys.level3.secretKey),
          'idempotency-key': randomUUID(),
        };
        const first = await ask(proxy, gateway, { method: 'POST', target: PAYOUTS, headers });
        expect(first.answer.status).toBe(200);
        return ask(proxy, gateway, { method: 'POST', target: '/api/v1/chargebacks/', headers });
      },
    },
    {
      name: 'a spent limit',
      status: 429,
      run: async (proxy) => {
        const client = {
          target: '/api/v1/wallets/',
          headers: bearer(limited.fixtures.keys.level1.secretKey),
          clientIp: CLIENT,
        };
        // The limit is the account's: the first ask of the first proxy spends it.
        await ask(proxy, limited, client);
        return ask(proxy, limited, client);
      },
    },
    {
      name: "a spent budget of failed authentications (the client address's)",
      status: 429,
      run: async (proxy) => {
        const clientIp = `198.51.100.${String(Object.keys(DOOR).indexOf(proxy) + 20)}`;
        const key = gateway.fixtures.keys.admin;
        for (let attempt = 0; attempt < 20; attempt++) {
          const wrong = await ask(proxy, gateway, {
            target: '/api/v1/wallets/',
            headers: bearer(withLastCharacterChanged(key.secretKey)),
            clientIp,
          });
          expect(wrong.answer.status).toBe(401);
          expectDescribed(wrong.method, wrong.path, wrong.answer);
        }
        return ask(proxy, gateway, {
          target: '/api/v1/wallets/',
          headers: bearer(key.secretKey),
          clientIp,
        });
      },
    },
    {
      name: 'more header lines than Node keeps',
      status: 431,
      run: async (proxy) => {
        const path = `${DOOR[proxy]}${proxy === 'envoy' ? '/api/v1/wallets/' : ''}`;
        const headers: Record<string, string> = {};
        for (let line = 0; line < 1001; line++) headers[`x-filler-${String(line)}`] = 'x';
        const answer = await gateway.send({ path, headers });
        return { method: 'GET', path, answer };
      },
    },
    {
      name: 'an Idempotency-Key while its store cannot be used',
      status: 503,
      run: (proxy) =>
        ask(proxy, degraded, {
          method: 'POST',
          target: PAYOUTS,
          headers: {
            ...bearer(degraded.fixtures.keys.level2.secretKey),
            'idempotency-key': randomUUID(),
          },
        }),
    },
  ];

  describe.each(['traefik', 'nginx', 'envoy'] as const)('asked as %s does', (proxy) => {
    const statusesSeen = new Set<number>();

    it.each(provocations.map((provocation) => [provocation.name, provocation] as const))(
      '%s: the answer is as described',
      async (_name, provocation) => {
        const { method, path, answer } = await provocation.run(proxy);
        expect(realStatus(answer)).toBe(provocation.status);
        expectDescribed(method, path, answer);
        statusesSeen.add(answer.status);
      },
    );

    it('provokes every status the operation declares, but an unexpected failure (500)', () => {
      const method = 'GET';
      const declared = declaredStatuses(method, proxy === 'envoy' ? EXT_AUTHZ : DOOR[proxy]);
      expect([...statusesSeen].sort((a, b) => a - b)).toEqual(
        declared.filter((status) => status !== 500),
      );
    });
  });

  it('holds an answer whose status is not declared to be wrong', () => {
    const answer: ReceivedAnswer = {
      status: 402,
      headers: { 'content-type': 'application/json' },
      text: JSON.stringify({
        status: 402,
        code: 'invalid_request',
        message: 'x',
        request_id: null,
      }),
    };
    expect(answerFaults('POST', '/authz/ext-authz/api/v1/payouts/', answer)).toEqual([
      `status 402 is not declared for POST ${EXT_AUTHZ}`,
    ]);
  });
});

describe('the admin listener answers its refusals as the API description says', () => {
  const ADMIN_TOKEN = 'openapi-answers-admin-token-0123456789';
  const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway();
  });
  afterAll(async () => {
    await gateway.close();
  });

  const adminApp = () =>
    createAdminApp({
      directory: gateway.fixtures.ring,
      tokenSha256: sha256(ADMIN_TOKEN).toString('hex'),
      logger: captureLogs().logger,
      readOnlyReason: 'Keys come from a keys file',
      readiness: gateway.app.readiness,
      usage: (accountId, limits) => gateway.app.usage(accountId, limits),
      decisions: (accountId) => gateway.app.decisions(accountId),
    });

  const received = (answer: request.Response): ReceivedAnswer => ({
    status: answer.status,
    headers: answer.headers,
    text: answer.text,
  });

  it.each([
    ['GET', '/admin/v1/keys/key_l1/roll'],
    ['DELETE', '/admin/v1/accounts'],
    ['POST', '/admin/v1/openapi.json'],
    ['PUT', '/readyz'],
  ])('%s %s: 405 with Allow, the MethodNotAllowed answer', async (method, path) => {
    const agent = request(adminApp());
    const answer = await (
      method === 'GET'
        ? agent.get(path)
        : method === 'DELETE'
          ? agent.delete(path)
          : method === 'POST'
            ? agent.post(path)
            : agent.put(path)
    ).set(auth);
    expect(answer.status).toBe(405);
    expect(responseFaults('#/components/responses/MethodNotAllowed', received(answer))).toEqual([]);
  });

  it.each([
    ['GET', '/admin/v1/accounts/%zz/usage'],
    ['GET', '/admin/v1/accounts/%zz/decisions'],
    ['PUT', '/admin/v1/accounts/%E0%A4%A/limits'],
    ['PATCH', '/admin/v1/keys/%zz'],
    ['POST', '/admin/v1/keys/%zz/roll'],
    ['POST', '/admin/v1/keys/%zz/revoke'],
    ['POST', '/admin/v1/accounts/%zz/keys'],
  ])('%s %s (a malformed id): 400, declared by the operation', async (method, path) => {
    const agent = request(adminApp());
    const sent =
      method === 'GET'
        ? agent.get(path)
        : method === 'PUT'
          ? agent.put(path)
          : method === 'PATCH'
            ? agent.patch(path)
            : agent.post(path);
    const answer = await sent.set(auth);
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ code: 'invalid_request' });
    expectDescribed(method, path, received(answer));
  });

  it('GET /readyz on the admin listener: 200 ready, as described', async () => {
    await gateway.app.upstreamChecked;
    const answer = await request(adminApp()).get('/readyz');
    expect(answer.status).toBe(200);
    expectDescribed('GET', '/readyz', received(answer));
  });
});

describe('/readyz answers as the API description says', () => {
  it('200 when ready and 503 not_ready when the upstream does not answer, on both listeners', async () => {
    const ready = await startTestGateway();
    const down = await startTestGateway({ upstreamUrl: REFUSING_UPSTREAM_URL });
    try {
      await Promise.all([ready.app.upstreamChecked, down.app.upstreamChecked]);
      const answers: [TestGateway, number][] = [
        [ready, 200],
        [down, 503],
      ];
      for (const [gateway, status] of answers) {
        const main = await gateway.send({ path: '/readyz' });
        expect(main.status).toBe(status);
        expectDescribed('GET', '/readyz', main);
        const admin = await request(
          createAdminApp({
            directory: gateway.fixtures.ring,
            tokenSha256: undefined,
            logger: captureLogs().logger,
            readOnlyReason: 'Keys come from a keys file',
            readiness: gateway.app.readiness,
          }),
        ).get('/readyz');
        expect(admin.status).toBe(status);
        expectDescribed('GET', '/readyz', {
          status: admin.status,
          headers: admin.headers,
          text: admin.text,
        });
      }
      const notReady = await down.send({ path: '/readyz' });
      expect(notReady.body).toMatchObject({
        code: 'not_ready',
        checks: { upstream: { status: 'down' } },
      });
    } finally {
      await Promise.all([ready.close(), down.close()]);
    }
  });
});
