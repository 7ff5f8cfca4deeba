import type http from 'node:http';
import express from 'express';
import request from 'supertest';
import { generateKey, KeyRing, sha256, type Tollgate, tollgate } from '../../lib';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/entry/redis';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
  untilShared,
} from '../helpers/redis';

/**
 * A per-account scope's window rolls, over HTTP through `protect()`, in memory and in Redis shared
 * by two instances: half the limit admitted at t0 and half at t0 + W/2 fill it; at t0 + 3W/4 a
 * request is refused until the first half leaves, at t0 + W; just after t0 + W exactly that first
 * half has room again, and the request after it is refused until the second half starts to leave.
 * A fixed window would admit the whole limit again after t0 + W, and a refusal that counted would
 * leave less than the first half: either fails here.
 *
 * Expected seconds are derived from the times measured around each request, as a range that
 * scheduling delays widen but never move: an admission is stamped after the request leaves and
 * before its answer comes back (Redis's clock and this process's are the same machine's).
 */

const LIMIT = 6;
const HALF = LIMIT / 2;
/** At t0 + 3W/4 the first half leaves in W/4 = 1.5 s: `Retry-After: 2`, half a second from 1 or 3. */
const WINDOW_MS = 6000;
/** How long after the first half leaves the window its room is asked for: past it despite timer delays. */
const AFTER_LEAVING_MS = 200;
const SCOPE = 'orders';

const secretKey = generateKey('secret', 'test');
const keyStore = KeyRing.fromDocument(
  {
    accounts: [
      {
        id: 'acct_rolling',
        keys: [
          {
            id: 'key_rolling',
            publishableKey: generateKey('publishable', 'test'),
            secretKeySha256: sha256(secretKey).toString('hex'),
            role: 'level-2',
          },
        ],
      },
    ],
  },
  'rolling window keys',
);

/** One request and what its answer says about the scope, with the local times around it. */
interface Exchange {
  readonly status: number;
  readonly code: unknown;
  /** `RateLimit`'s `r` and `t`. */
  readonly remaining: number;
  readonly resetSeconds: number;
  readonly retryAfter: number | undefined;
  readonly sentAt: number;
  readonly receivedAt: number;
}

/** A running instance: the app mounted as a user mounts it, listening on loopback. */
interface Instance {
  readonly server: http.Server;
  readonly gate: Tollgate;
}

async function startInstance(
  redis?: LimiterRedisConnection,
  redisPrefix?: string,
): Promise<Instance> {
  const gate = tollgate({
    keyStore,
    scopes: { [SCOPE]: { limit: LIMIT, window: WINDOW_MS } },
    ...(redis === undefined ? {} : { redis, redisPrefix }),
  });
  const app = express();
  app.set('trust proxy', false);
  app.use(gate.context());
  app.get('/orders', gate.protect({ accept: ['secret'], limit: SCOPE }), (req, res) => {
    res.json({ account: req.auth?.accountId });
  });
  app.use(gate.errorHandler());
  const server = app.listen(0, '127.0.0.1');
  await new Promise<void>((resolve) => {
    server.once('listening', resolve);
  });
  return { server, gate };
}

async function stopInstance({ server, gate }: Instance): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => {
    server.close(() => {
      resolve();
    });
  });
  gate.close();
}

/** The scope's `RateLimit` entry: `"orders"; r=5; t=6`. */
function rateLimitOf(response: request.Response): { remaining: number; resetSeconds: number } {
  const header = (response.headers as Record<string, string | undefined>).ratelimit ?? '';
  const match = new RegExp(`"${SCOPE}"; r=(\\d+); t=(\\d+)`).exec(header);
  if (match === null) throw new Error(`no RateLimit entry for ${SCOPE}: ${JSON.stringify(header)}`);
  return { remaining: Number(match[1]), resetSeconds: Number(match[2]) };
}

async function exchange(server: http.Server): Promise<Exchange> {
  const sentAt = Date.now();
  const response = await request(server).get('/orders').set('Authorization', `Bearer ${secretKey}`);
  const receivedAt = Date.now();
  const retryAfter = response.get('Retry-After');
  return {
    status: response.status,
    code: (response.body as { code?: unknown }).code,
    ...rateLimitOf(response),
    retryAfter: retryAfter === undefined ? undefined : Number(retryAfter),
    sentAt,
    receivedAt,
  };
}

/** The instance that takes the `index`th request of a scenario. */
type Router = (index: number) => http.Server;

/** Sends requests one after another, counting them across a scenario. */
class Sender {
  private sent = 0;
  constructor(private readonly route: Router) {}

  async batch(count: number): Promise<Exchange[]> {
    const answers: Exchange[] = [];
    for (let i = 0; i < count; i++) answers.push(await exchange(this.route(this.sent++)));
    return answers;
  }
}

async function sleepUntil(time: number): Promise<void> {
  const wait = time - Date.now();
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
}

/**
 * The whole seconds a header may say, rounded up, until an admission stamped between
 * `stampedFrom` and `stampedBy` leaves the window, asked by `request`: the range the stamp and
 * the moment of the decision (between sending and receiving) allow.
 */
function secondsUntilLeaving(
  stampedFrom: number,
  stampedBy: number,
  answer: Exchange,
): { least: number; most: number } {
  return {
    least: Math.ceil((stampedFrom + WINDOW_MS - answer.receivedAt) / 1000),
    most: Math.ceil((stampedBy + WINDOW_MS - answer.sentAt) / 1000),
  };
}

function expectWithin(value: number | undefined, range: { least: number; most: number }): void {
  expect(value).toBeGreaterThanOrEqual(range.least);
  expect(value).toBeLessThanOrEqual(range.most);
}

/** Admitted, with `remaining` left, the oldest admission inside stamped in [from, by]. */
function expectAdmitted(answer: Exchange, remaining: number, from: number, by: number): void {
  expect(answer).toMatchObject({ status: 200, remaining, retryAfter: undefined });
  expectWithin(answer.resetSeconds, secondsUntilLeaving(from, by, answer));
}

/**
 * Refused until the oldest admission inside, stamped in [from, by], leaves: `Retry-After` is
 * those seconds rounded up, and `RateLimit` says nothing remains for as long.
 */
function expectRefused(answer: Exchange, from: number, by: number): void {
  expect(answer).toMatchObject({ status: 429, code: 'rate_limited', remaining: 0 });
  expectWithin(answer.retryAfter, secondsUntilLeaving(from, by, answer));
  expect(answer.retryAfter).toBeGreaterThanOrEqual(1);
  expect(answer.resetSeconds).toBe(answer.retryAfter);
}

/** The edge of the window, with each request sent to `route(index)`. */
async function rollingScenario(route: Router): Promise<void> {
  const send = new Sender(route);

  const t0 = Date.now();
  const first = await send.batch(HALF);
  // The first admission, the oldest until t0 + W, is stamped between t0 and its answer's arrival;
  // the whole first half is stamped by the last one's arrival, which a loaded machine may delay.
  const firstStampedBy = first[0]?.receivedAt ?? t0;
  const firstHalfStampedBy = first[HALF - 1]?.receivedAt ?? t0;
  first.forEach((answer, i) => {
    expectAdmitted(answer, LIMIT - (i + 1), t0, firstStampedBy);
  });

  await sleepUntil(t0 + WINDOW_MS / 2);
  const second = await send.batch(HALF);
  second.forEach((answer, i) => {
    expectAdmitted(answer, LIMIT - HALF - (i + 1), t0, firstStampedBy);
  });
  const secondStampedFrom = second[0]?.sentAt ?? t0;
  const secondStampedBy = second[0]?.receivedAt ?? t0;

  // Full: refused until the first admission leaves at t0 + W, whichever instance is asked.
  await sleepUntil(t0 + (3 * WINDOW_MS) / 4);
  for (const answer of await send.batch(2)) expectRefused(answer, t0, firstStampedBy);

  // The whole first half has left and the second is still inside: exactly the first half has room
  // (a fixed window would admit the whole limit; counted refusals would leave less), and the
  // next request waits for the second half's oldest.
  await sleepUntil(firstHalfStampedBy + WINDOW_MS + AFTER_LEAVING_MS);
  const third = await send.batch(HALF);
  third.forEach((answer, i) => {
    expectAdmitted(answer, LIMIT - HALF - (i + 1), secondStampedFrom, secondStampedBy);
  });
  for (const answer of await send.batch(2)) {
    expectRefused(answer, secondStampedFrom, secondStampedBy);
  }
}

/** Starts a scenario now; its failure is reported by the test that awaits it, never unhandled. */
function started(run: Promise<void>): Promise<void> {
  run.catch(() => undefined);
  return run;
}

describe('a rolling window at its edge, over HTTP', () => {
  // The two scenarios wait through the same window side by side: the memory one starts here, the
  // Redis one as soon as its instances are up.
  let memory: Instance;
  let memoryRun: Promise<void>;

  beforeAll(async () => {
    memory = await startInstance();
    memoryRun = started(rollingScenario(() => memory.server));
  });

  afterAll(async () => {
    await memoryRun.catch(() => undefined);
    await stopInstance(memory);
  });

  describeWithRedis('in Redis, shared by two instances taking turns', () => {
    let redis: TestRedis;
    const connections: LimiterRedisConnection[] = [];
    const instances: Instance[] = [];
    let redisRun: Promise<void>;

    async function connect(url: string): Promise<LimiterRedisConnection> {
      const connection = createLimiterRedis({ url });
      connections.push(connection);
      await untilShared(connection);
      return connection;
    }

    beforeAll(async () => {
      const acquired = await acquireTestRedis();
      if (acquired === undefined) throw new Error('describeWithRedis ran without a Redis');
      redis = acquired;
      const redisPrefix = uniquePrefix('rolling');
      for (let i = 0; i < 2; i++)
        instances.push(await startInstance(await connect(redis.url), redisPrefix));
      const [a, b] = instances as [Instance, Instance];
      redisRun = started(rollingScenario((index) => (index % 2 === 0 ? a.server : b.server)));
    });

    afterAll(async () => {
      await redisRun.catch(() => undefined);
      await Promise.all(instances.map(stopInstance));
      await Promise.all(connections.map((connection) => connection.close()));
      await redis.close();
    });

    it('admits exactly the first half again after t0 + W, and refuses the next', async () => {
      await redisRun;
    });
  });

  it('in memory: admits exactly the first half again after t0 + W, and refuses the next', async () => {
    await memoryRun;
  });
});
