import net from 'node:net';
import type { KeyRecord, KeyStore } from '../../lib/key-store';
import { TokenService } from '../../lib/tokens';
import { createApp, type GatewayApp } from '../../gateway/app';
import { createFixtures, TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs } from '../helpers/logs';
import { startRecordingUpstream, type RecordingUpstream } from '../helpers/upstream';

/**
 * A client that hangs up while its request is still being checked (a Redis round trip, a slow key
 * store) must not take the gateway down, and its request must not reach the upstream.
 */

const LOOKUP_DELAY_MS = 40;

/** The fixtures' keys behind a key store that answers secret-key lookups late. */
function slowKeyStore(inner: KeyStore): KeyStore {
  const late = <T>(value: T): Promise<T> =>
    new Promise((resolve) =>
      setTimeout(() => {
        resolve(value);
      }, LOOKUP_DELAY_MS),
    );
  return {
    findBySecretKey: async (secret): Promise<KeyRecord | undefined> =>
      late(await inner.findBySecretKey(secret)),
    findByKeyPair: (pk, secret) => inner.findByKeyPair(pk, secret),
    findByPublishableKey: (pk) => inner.findByPublishableKey(pk),
    findById: (id) => inner.findById(id),
  };
}

describe('a client hanging up while its request is checked', () => {
  const fixtures = createFixtures();
  let upstream: RecordingUpstream;
  let app: GatewayApp;
  let port: number;
  let close: () => Promise<void>;

  beforeAll(async () => {
    upstream = await startRecordingUpstream();
    app = createApp({
      keyStore: slowKeyStore(fixtures.ring),
      tokens: new TokenService({ secret: TOKEN_SECRET }),
      upstreamUrl: upstream.url,
      logger: captureLogs().logger,
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
      await upstream.close();
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
    await new Promise((resolve) => setTimeout(resolve, LOOKUP_DELAY_MS * 3));
    expect(upstream.requests).toHaveLength(0);

    const after = await request(admin.secretKey);
    expect(after).toMatch(/^HTTP\/1\.1 200 /);
    expect(upstream.requests).toHaveLength(1);
  });
});
