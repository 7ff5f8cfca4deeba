import { DEFAULT_PUBLIC_KEY_HEADER } from '../../lib/core/credentials';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
  untilShared,
} from '../helpers/redis';
import { rawRequest, type RawResponse, sendRaw } from './raw-http';

/**
 * Linear cost: no scan of a path, query, header or body (credential detection, redaction, token
 * parsing) is worse than linear. An input full of `eyJ` (the start of a token) or of `.` (its
 * separator) costs at most 5 times a plain one of the same length.
 *
 * Each hostile shape is timed against a plain input of exactly the same length (`a` repeated) on
 * the same route, in alternating requests on fresh connections; the medians are compared, with a
 * small absolute slack for the noise of a shared machine. Statuses are checked so that every
 * request really went through the gateway (404 for an unknown path, 200 for `/healthz`, 401 for a
 * credential that is not a key). Sizes stay under Node's 16 KB limit for a request head.
 */

const FACTOR = 5;
const SLACK_MS = 2;
const SAMPLES = 15;
const WARM_UP = 3;
/** Length of a hostile path segment or query value. */
const LONG = 14_000;
/** Length of a hostile header value: a token longer than 2,048 characters is refused unread. */
const HEADER = 2_040;
const WALLETS = '/api/v1/wallets/';
const EXCHANGE = '/api/v1/auth/generate-token/';

/** `unit` repeated to exactly `length` characters. */
function fill(unit: string, length: number): string {
  return unit.repeat(Math.ceil(length / unit.length)).slice(0, length);
}

/** `eyJ…` up to the middle, one `.`, then `eyJ…` again: a token's start with no second dot. */
function oneDot(length: number): string {
  const half = Math.floor((length - 1) / 2);
  return `${fill('eyJ', half)}.${fill('eyJ', length - 1 - half)}`;
}

interface Probe {
  readonly method?: string;
  readonly target: string;
  readonly headers?: readonly (readonly [string, string])[];
  readonly body?: string;
}

interface Shape {
  readonly name: string;
  readonly status: number;
  readonly hostile: (gateway: TestGateway) => Probe;
  readonly plain: (gateway: TestGateway) => Probe;
}

const pathOf = (segment: string): Probe => ({ target: `/${segment}` });
const healthzQuery = (value: string): Probe => ({ target: `/healthz?q=${value}` });
const bearerProbe = (value: string): Probe => ({
  target: WALLETS,
  headers: [['Authorization', `Bearer ${value}`]],
});
const publishableProbe = (value: string) => (): Probe => ({
  target: WALLETS,
  headers: [[DEFAULT_PUBLIC_KEY_HEADER, value]],
});
const exchangeProbe =
  (secret: string) =>
  (gateway: TestGateway): Probe => ({
    method: 'POST',
    target: EXCHANGE,
    headers: [['Content-Type', 'application/json']],
    body: JSON.stringify({
      api_key: gateway.fixtures.keys.admin.publishableKey,
      api_secret: secret,
    }),
  });

const SHAPES: readonly Shape[] = [
  {
    name: 'a path of `eyJ` repeated (14 KB)',
    status: 404,
    hostile: () => pathOf(fill('eyJ', LONG)),
    plain: () => pathOf(fill('a', LONG)),
  },
  {
    name: 'a path of `eyJ` repeated around one `.` (14 KB)',
    status: 404,
    hostile: () => pathOf(oneDot(LONG)),
    plain: () => pathOf(fill('a', LONG)),
  },
  {
    name: 'a path of `a.` repeated (14 KB)',
    status: 404,
    hostile: () => pathOf(fill('a.', LONG)),
    plain: () => pathOf(fill('a', LONG)),
  },
  {
    name: 'a path of `eyJ.` repeated (14 KB)',
    status: 404,
    hostile: () => pathOf(fill('eyJ.', LONG)),
    plain: () => pathOf(fill('a', LONG)),
  },
  {
    name: 'a path of `eyJ` segments (14 KB)',
    status: 404,
    hostile: () => pathOf(fill('eyJeyJeyJ/', LONG)),
    plain: () => pathOf(fill('aaaaaaaaa/', LONG)),
  },
  {
    name: 'a /healthz query value of `eyJ` repeated (14 KB)',
    status: 200,
    hostile: () => healthzQuery(fill('eyJ', LONG)),
    plain: () => healthzQuery(fill('a', LONG)),
  },
  {
    name: 'a /healthz query value of `eyJ` repeated around one `.` (14 KB)',
    status: 200,
    hostile: () => healthzQuery(oneDot(LONG)),
    plain: () => healthzQuery(fill('a', LONG)),
  },
  {
    name: 'a /healthz query value of `a.` repeated (14 KB)',
    status: 200,
    hostile: () => healthzQuery(fill('a.', LONG)),
    plain: () => healthzQuery(fill('a', LONG)),
  },
  {
    name: 'a /healthz query of many `eyJ` parameters (14 KB)',
    status: 200,
    hostile: () => healthzQuery(fill('eyJeyJ.&q=', LONG)),
    plain: () => healthzQuery(fill('aaaaaaa&q=', LONG)),
  },
  {
    name: 'a Bearer credential of `eyJ` repeated (2 KB)',
    status: 401,
    hostile: () => bearerProbe(fill('eyJ', HEADER)),
    plain: () => bearerProbe(fill('a', HEADER)),
  },
  {
    name: 'a Bearer credential of `eyJ` repeated around one `.` (2 KB)',
    status: 401,
    hostile: () => bearerProbe(oneDot(HEADER)),
    plain: () => bearerProbe(fill('a', HEADER)),
  },
  {
    name: 'a Bearer credential of `.` repeated (2 KB)',
    status: 401,
    hostile: () => bearerProbe(fill('.', HEADER)),
    plain: () => bearerProbe(fill('a', HEADER)),
  },
  {
    name: 'a Bearer credential of `a.` repeated (2 KB)',
    status: 401,
    hostile: () => bearerProbe(fill('a.', HEADER)),
    plain: () => bearerProbe(fill('a', HEADER)),
  },
  {
    name: 'a publishable-key header of `.` repeated (14 KB)',
    status: 401,
    hostile: publishableProbe(fill('.', LONG)),
    plain: publishableProbe(fill('a', LONG)),
  },
  {
    name: 'a publishable-key header of `eyJ` repeated (14 KB)',
    status: 401,
    hostile: publishableProbe(fill('eyJ', LONG)),
    plain: publishableProbe(fill('a', LONG)),
  },
  {
    name: 'a JSON body whose api_secret is `eyJ` repeated around one `.` (14 KB)',
    status: 401,
    hostile: exchangeProbe(oneDot(LONG)),
    plain: exchangeProbe(fill('a', LONG)),
  },
];

interface Timed {
  readonly ms: number;
  readonly response: RawResponse;
}

async function timed(port: number, probe: Probe): Promise<Timed> {
  const bytes = rawRequest({
    method: probe.method ?? 'GET',
    target: probe.target,
    headers: probe.headers ?? [],
    ...(probe.body === undefined ? {} : { body: probe.body }),
  });
  const began = process.hrtime.bigint();
  const response = await sendRaw({ port, bytes, timeoutMs: 10_000 });
  return { ms: Number(process.hrtime.bigint() - began) / 1e6, response };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? sorted[middle]!
    : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
}

const round = (ms: number): number => Math.round(ms * 100) / 100;

interface Mode {
  readonly label: string;
  readonly describe: jest.Describe;
  readonly shared: boolean;
}

const MODES: readonly Mode[] = [
  { label: 'counting in memory', describe, shared: false },
  { label: 'sharing Redis', describe: describeWithRedis, shared: true },
];

for (const mode of MODES) {
  mode.describe(`scans cost linear time, ${mode.label}`, () => {
    let testRedis: TestRedis | undefined;
    let connection: LimiterRedisConnection | undefined;
    let gateway: TestGateway;

    beforeAll(async () => {
      if (mode.shared) {
        testRedis = await acquireTestRedis();
        if (testRedis === undefined) throw new Error('describeWithRedis ran without a Redis');
        connection = createLimiterRedis({ url: testRedis.url });
        await untilShared(connection);
      }
      gateway = await startTestGateway({
        // Hundreds of refused credentials from one address: keep the failure budget out of the way.
        limits: { authFailures: 1_000_000 },
        ...(connection === undefined
          ? {}
          : { redis: connection, redisPrefix: uniquePrefix('linear-cost') }),
      });
    });
    afterAll(async () => {
      await gateway.close();
      await connection?.close();
      await testRedis?.close();
    });

    it.each(SHAPES.map((shape) => [shape.name, shape] as const))(
      `%s costs at most ${FACTOR} times a plain input of the same length`,
      async (_name, shape) => {
        const hostile = shape.hostile(gateway);
        const plain = shape.plain(gateway);
        expect(hostile.target.length + (hostile.body?.length ?? 0)).toBe(
          plain.target.length + (plain.body?.length ?? 0),
        );
        expect((hostile.headers ?? []).map(([name, value]) => `${name}: ${value}`.length)).toEqual(
          (plain.headers ?? []).map(([name, value]) => `${name}: ${value}`.length),
        );

        const times = { hostile: [] as number[], plain: [] as number[] };
        const statuses = new Set<string>();
        for (let pass = 0; pass < WARM_UP + SAMPLES; pass++) {
          // Alternate which goes first, so that drift on the machine hits both alike.
          const order =
            pass % 2 === 0 ? (['hostile', 'plain'] as const) : (['plain', 'hostile'] as const);
          for (const which of order) {
            const result = await timed(gateway.port, which === 'hostile' ? hostile : plain);
            statuses.add(`${which} ${result.response.status}`);
            if (pass >= WARM_UP) times[which].push(result.ms);
          }
        }
        expect([...statuses].sort()).toEqual([`hostile ${shape.status}`, `plain ${shape.status}`]);

        const medians = {
          hostile: round(median(times.hostile)),
          plain: round(median(times.plain)),
        };
        expect({
          ...medians,
          withinBound: medians.hostile <= FACTOR * medians.plain + SLACK_MS,
        }).toEqual({ ...medians, withinBound: true });
      },
      30_000,
    );

    it(`three clients sending \`eyJ\` queries slow others' /healthz no more than plain ones would`, async () => {
      const hostile = healthzQuery(fill('eyJ', LONG));
      const plain = healthzQuery(fill('a', LONG));
      const probe: Probe = { target: '/healthz' };

      const neighbours = async (load: Probe): Promise<number[]> => {
        let running = true;
        const clients = Array.from({ length: 3 }, async () => {
          while (running) await timed(gateway.port, load);
        });
        const times: number[] = [];
        for (let n = 0; n < WARM_UP + SAMPLES; n++) {
          const result = await timed(gateway.port, probe);
          expect(result.response.status).toBe(200);
          if (n >= WARM_UP) times.push(result.ms);
        }
        running = false;
        await Promise.all(clients);
        return times;
      };

      const withPlain = round(median(await neighbours(plain)));
      const withHostile = round(median(await neighbours(hostile)));
      expect({
        withPlain,
        withHostile,
        withinBound: withHostile <= FACTOR * withPlain + SLACK_MS,
      }).toEqual({ withPlain, withHostile, withinBound: true });
    }, 60_000);
  });
}
