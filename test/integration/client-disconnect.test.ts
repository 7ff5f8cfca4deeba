import net from 'node:net';
import { createLimiterRedis, type LimiterRedisConnection } from '../../lib/rate-limit/redis-client';
import { TokenService } from '../../lib/tokens/tokens';
import { createApp, type GatewayApp } from '../../gateway/app';
import { createFixtures, TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs } from '../helpers/logs';
import {
  acquireTestRedis,
  describeWithRedis,
  type TestRedis,
  uniquePrefix,
  untilShared,
} from '../helpers/redis';
import { startRecordingUpstream, type RecordingUpstream } from '../helpers/upstream';

/**
 * A client that hangs up while its request is still being checked (the limiter's Redis round trip)
 * must not take the gateway down, and its request must not reach the upstream. The round trip is
 * made slow by a relay that holds every chunk between the gateway and a real Redis.
 */

const RELAY_DELAY_MS = 30;

/** A TCP relay to `target` that delays every chunk, both ways, by `delayMs`. */
async function startSlowRelay(
  target: { host: string; port: number },
  delayMs: number,
): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const later = (to: net.Socket) => (chunk: Buffer) => {
    setTimeout(() => {
      if (!to.destroyed) to.write(chunk);
    }, delayMs);
  };
  const server = net.createServer((client) => {
    const redis = net.connect(target.port, target.host);
    for (const socket of [client, redis]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        client.destroy();
        redis.destroy();
      });
    }
    client.on('data', later(redis));
    redis.on('data', later(client));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) =>
        server.close(() => {
          resolve();
        }),
      );
    },
  };
}

describeWithRedis('a client hanging up while its request is checked', () => {
  const fixtures = createFixtures();
  let upstream: RecordingUpstream;
  let app: GatewayApp;
  let port: number;
  let close: () => Promise<void>;
  let redis: TestRedis | undefined;
  let relay: Awaited<ReturnType<typeof startSlowRelay>>;
  let limiterRedis: LimiterRedisConnection;

  beforeAll(async () => {
    redis = await acquireTestRedis();
    if (redis === undefined) throw new Error('no Redis');
    const target = new URL(redis.url);
    relay = await startSlowRelay(
      { host: target.hostname, port: Number(target.port || 6379) },
      RELAY_DELAY_MS,
    );
    target.host = `127.0.0.1:${relay.port}`;
    limiterRedis = createLimiterRedis({ url: target.toString(), commandTimeoutMs: 1000 });
    await untilShared(limiterRedis);
    upstream = await startRecordingUpstream();
    app = createApp({
      keyStore: fixtures.ring,
      tokens: new TokenService({ secret: TOKEN_SECRET }),
      upstreamUrl: upstream.url,
      logger: captureLogs().logger,
      redis: limiterRedis,
      redisPrefix: uniquePrefix('disconnect'),
    });
    const server = app.listen(0, '127.0.0.1');
    await new Promise<void>((resolve) => server.once('listening', resolve));
    port = (server.address() as net.AddressInfo).port;
    close = async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) =>
        server.close(() => {
          resolve();
        }),
      );
      app.shutdown();
      await limiterRedis.close();
      await relay.close();
      await upstream.close();
      await redis?.close();
    };
  });
  afterAll(async () => {
    await close();
  });

  const request = (secret: string, hangUpAfterMs?: number): Promise<string> =>
    new Promise((resolve) => {
      let answer = '';
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.write(
          `GET /api/v1/wallets/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${secret}\r\n\r\n`,
        );
        if (hangUpAfterMs !== undefined) setTimeout(() => socket.resetAndDestroy(), hangUpAfterMs);
      });
      socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
      socket.on('error', () => undefined);
      socket.on('close', () => {
        resolve(answer);
      });
    });

  it('is not forwarded upstream, and the gateway keeps answering', async () => {
    const { admin } = fixtures.keys;
    await Promise.all(Array.from({ length: 10 }, () => request(admin.secretKey, 5)));
    await new Promise((resolve) => setTimeout(resolve, RELAY_DELAY_MS * 6));
    expect(upstream.requests).toHaveLength(0);

    const after = await request(admin.secretKey);
    expect(after).toMatch(/^HTTP\/1\.1 200 /);
    expect(upstream.requests).toHaveLength(1);
  });
});
