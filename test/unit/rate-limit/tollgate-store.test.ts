import type http from 'node:http';
import express from 'express';
import { type Options, rateLimit } from 'express-rate-limit';
import request from 'supertest';
import { ConfigurationError } from '../../../lib/errors';
import { TollgateStore } from '../../../lib/rate-limit/tollgate-store';

/**
 * The express-rate-limit `Store` backed by the limit engine, under express-rate-limit itself (in
 * memory; the Redis path is the engine's, tested with a real Redis in
 * test/integration/redis-limiter.test.ts): a refusal counts nothing, the Store methods, and the
 * library's own rules (one store per limiter, a decrement per skipped request).
 */

const WINDOW_MS = 60_000;

interface Logged {
  readonly errors: unknown[];
  readonly logger: { warn: (error: unknown) => void; error: (error: unknown) => void };
}

function logged(): Logged {
  const errors: unknown[] = [];
  return {
    errors,
    logger: {
      warn: (error) => errors.push(error),
      error: (error) => errors.push(error),
    },
  };
}

/** An app limited by express-rate-limit over `store`; `?fail` answers 500. */
function app(
  store: TollgateStore,
  limit: number,
  extra: Partial<Options> = {},
): { server: http.Server; log: Logged } {
  const log = logged();
  const limited = express();
  limited.use(
    rateLimit({
      windowMs: WINDOW_MS,
      limit,
      store,
      standardHeaders: 'draft-8',
      legacyHeaders: false,
      keyGenerator: () => 'client',
      logger: log.logger,
      validate: { trustProxy: false, xForwardedForHeader: false, ip: false },
      ...extra,
    }),
  );
  limited.get('/', (req, res) => {
    res.status(req.query.fail === undefined ? 200 : 500).end();
  });
  return { server: limited.listen(0, '127.0.0.1'), log };
}

const servers: http.Server[] = [];
const stores: TollgateStore[] = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.close();
  for (const store of stores.splice(0)) store.shutdown();
});

function storeOf(options: ConstructorParameters<typeof TollgateStore>[0] = {}): TollgateStore {
  const store = new TollgateStore(options);
  stores.push(store);
  return store;
}

async function statuses(server: http.Server, count: number, path = '/'): Promise<number[]> {
  const answers: number[] = [];
  for (let n = 0; n < count; n++) answers.push((await request(server).get(path)).status);
  return answers;
}

describe('TollgateStore under express-rate-limit', () => {
  it('admits the limit, then refuses counting nothing, with the IETF headers', async () => {
    const store = storeOf({ prefix: 'rl:one:' });
    const { server, log } = app(store, 3);
    servers.push(server);
    expect(await statuses(server, 5)).toEqual([200, 200, 200, 429, 429]);
    expect((await store.get('client'))?.totalHits).toBe(3);
    const answer = await request(server).get('/');
    expect(answer.headers.ratelimit).toMatch(/^"3-in-1min"; r=0; t=(60|59)$/);
    expect(answer.headers['retry-after']).toMatch(/^(60|59)$/);
    expect(log.errors).toEqual([]);
  });

  it("takes back a skipped failure, but never for a refusal's own decrement (skipFailedRequests)", async () => {
    const store = storeOf();
    const { server } = app(store, 2, { skipFailedRequests: true });
    servers.push(server);
    // A failure, taken back after the response.
    expect(await statuses(server, 1, '/?fail')).toEqual([500]);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await store.get('client')).toBeUndefined();
    // Two admitted, then two refusals: each is a failed request that express-rate-limit
    // decrements, and neither may take back an admission, since neither was counted.
    expect(await statuses(server, 4)).toEqual([200, 200, 429, 429]);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect((await store.get('client'))?.totalHits).toBe(2);
    expect(await statuses(server, 1)).toEqual([429]);
  });

  it('reports a store shared by two limiters (ERR_ERL_STORE_REUSE)', () => {
    const store = storeOf();
    const first = logged();
    const second = logged();
    rateLimit({ windowMs: WINDOW_MS, limit: 1, store, logger: first.logger });
    rateLimit({ windowMs: WINDOW_MS, limit: 1, store, logger: second.logger });
    expect(first.errors).toEqual([]);
    expect(second.errors).toEqual([expect.objectContaining({ code: 'ERR_ERL_STORE_REUSE' })]);
  });
});

describe('TollgateStore methods', () => {
  const started = (limit = 2): TollgateStore => {
    const store = storeOf();
    store.init({ windowMs: WINDOW_MS, limit } as Options);
    return store;
  };

  it('refuses a limit given as a function, and answers every call before init() with why', async () => {
    const store = storeOf();
    expect(() => {
      store.init({ windowMs: WINDOW_MS, limit: () => 1 } as unknown as Options);
    }).toThrow(ConfigurationError);
    await expect(store.increment('client')).rejects.toThrow(/not initialised/);
  });

  it.each([500, 86_400_001])(
    'refuses a window of %d ms, naming itself: the engine counts from one second to a day',
    (windowMs) => {
      expect(() => {
        storeOf().init({ windowMs, limit: 1 } as Options);
      }).toThrow(
        /^TollgateStore: windowMs must be a whole number of milliseconds from 1000 to 86400000$/,
      );
    },
  );

  it('answers the count with this request: above the limit when refused', async () => {
    const store = started();
    const totals = [];
    for (let n = 0; n < 4; n++) totals.push((await store.increment('client')).totalHits);
    expect(totals).toEqual([1, 2, 3, 3]);
    expect((await store.get('client'))?.totalHits).toBe(2);
  });

  it('decrements never below zero, and resetKey gives a full key its whole limit again', async () => {
    const store = started();
    await store.decrement('client');
    expect(await store.get('client')).toBeUndefined();
    for (let n = 0; n < 3; n++) await store.increment('client');
    await store.decrement('client');
    expect((await store.increment('client')).totalHits).toBe(2);
    await store.resetKey('client');
    expect(await store.get('client')).toBeUndefined();
    expect((await store.increment('client')).totalHits).toBe(1);
  });

  it('keeps one prefix per instance, defaulting to the kit', () => {
    expect(storeOf().prefix).toBe('tollgate:rl:');
    expect(storeOf({ prefix: 'app:' }).prefix).toBe('app:');
    expect(storeOf().localKeys).toBe(false);
  });
});
