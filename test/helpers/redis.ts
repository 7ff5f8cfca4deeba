import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import type { LimiterRedisConnection } from '../../lib/rate-limit/redis-client';

/**
 * Redis for tests: `REDIS_URL` when set, else a `redis-server` from PATH
 * started on a free loopback port. When neither exists the Redis suites are skipped with a loud
 * notice, unless `REQUIRE_REDIS=1`, which makes them fail. Tests never flush a Redis they did not
 * start: every test uses its own key prefix (`uniquePrefix()`).
 */

export interface TestRedis {
  readonly url: string;
  /** True when this process started the server (so it may be stopped and restarted). */
  readonly owned: boolean;
  close(): Promise<void>;
}

export function redisServerPath(): string | undefined {
  try {
    return (
      execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim() ||
      undefined
    );
  } catch {
    return undefined;
  }
}

export function uniquePrefix(label = 'test'): string {
  return `tollgate-test:${label}:${randomBytes(6).toString('hex')}:`;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => {
        resolve(port);
      });
    });
  });
}

/** redis-server ended before it answered: most often, its port was taken. */
export class PortTakenError extends Error {
  constructor(port: number, code: number | null) {
    super(
      `redis-server on port ${port} exited at once (code ${String(code)}): its port is likely taken`,
    );
  }
}

/**
 * Runs `start` with a fresh free port until it does not fail with `PortTakenError` (3 tries):
 * freePort() only says a port was free a moment ago.
 */
export async function onAFreePort<T>(start: (port: number) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start(await freePort());
    } catch (error) {
      if (!(error instanceof PortTakenError) || attempt === 3) throw error;
    }
  }
}

/** A redis-server child process on a free loopback port, keeping nothing on disk. */
export interface OwnedRedis {
  readonly port: number;
  readonly url: string;
  readonly process: ChildProcess;
  stop(): Promise<void>;
}

export async function startRedisServer(
  port?: number,
  extraArgs: string[] = [],
): Promise<OwnedRedis> {
  const binary = redisServerPath();
  if (binary === undefined) throw new Error('redis-server is not on PATH');
  if (port === undefined) return onAFreePort((free) => startRedisServer(free, extraArgs));
  const chosen = port;
  // A replica writes the master's snapshot to its working directory: keep it out of the repo, and
  // remove it once the server has exited.
  const dir = mkdtempSync(path.join(tmpdir(), 'tollgate-redis-'));
  const removeDir = (): void => {
    rmSync(dir, { recursive: true, force: true });
  };
  const child = spawn(
    binary,
    [
      '--port',
      String(chosen),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--daemonize',
      'no',
      '--dir',
      dir,
      ...extraArgs,
    ],
    { stdio: 'ignore' },
  );
  const url = `redis://127.0.0.1:${chosen}`;
  // A server that exits at once could not bind its port (another test's server took it between
  // freePort() and now, or a cluster node's bus port, port + 10000, is taken): say so at once.
  const exitedEarly = new Promise<never>((_resolve, reject) => {
    child.once('exit', (code) => {
      removeDir();
      reject(new PortTakenError(chosen, code));
    });
  });
  exitedEarly.catch(() => undefined);
  await Promise.race([waitForRedis(url, 5000), exitedEarly]);
  child.removeAllListeners('exit');
  return {
    port: chosen,
    url,
    process: child,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) {
        removeDir();
        return;
      }
      const exited = new Promise<void>((resolve) =>
        child.once('exit', () => {
          resolve();
        }),
      );
      child.kill('SIGKILL');
      await exited;
      removeDir();
    },
  };
}

export async function waitForRedis(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new Redis(url, {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: 200,
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.ping();
      client.disconnect();
      return;
    } catch {
      closeFailedClient(client);
      if (Date.now() > deadline)
        throw new Error(`Redis at ${url} did not answer within ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

/**
 * Disconnects a client whose connection may already have ended (a refused or timed-out connect,
 * with `retryStrategy: () => null`). ioredis's `disconnect()` arms a 2-second timer that only the
 * socket's next `close` clears: on a socket that has already closed, nothing clears it, and that
 * timer alone keeps the process alive 2 s more (Jest then reports that it did not exit when the
 * suite ends within 2 s of its Redis starting, as `test/multiprocess/account-limits.test.ts` does).
 */
export function closeFailedClient(client: Redis): void {
  if (client.status !== 'end') client.disconnect();
}

/** Resolves once the kit's connection counts in Redis (`shared`); throws naming its state after `timeoutMs`. */
export async function untilShared(
  connection: LimiterRedisConnection,
  timeoutMs = 5000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (connection.health.state !== 'shared') {
    if (Date.now() > deadline) {
      throw new Error(`the limiter's Redis connection stayed ${connection.health.state}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The Redis the suite uses, or `undefined` (after a loud notice) when none can be had. */
export async function acquireTestRedis(): Promise<TestRedis | undefined> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') {
    await waitForRedis(fromEnv, 3000);
    return { url: fromEnv, owned: false, close: () => Promise.resolve() };
  }
  if (redisServerPath() !== undefined) {
    const server = await startRedisServer();
    return { url: server.url, owned: true, close: () => server.stop() };
  }
  if (process.env.REQUIRE_REDIS === '1') {
    throw new Error('REQUIRE_REDIS=1 but REDIS_URL is unset and redis-server is not on PATH');
  }
  return undefined;
}

/** True when Redis tests can run here; prints a loud notice when they cannot and are skipped. */
export function redisAvailable(): boolean {
  const available = (process.env.REDIS_URL ?? '') !== '' || redisServerPath() !== undefined;
  if (!available && process.env.REQUIRE_REDIS !== '1') {
    process.stderr.write(
      '\n*** Redis tests SKIPPED: set REDIS_URL or put redis-server on PATH (REQUIRE_REDIS=1 makes this a failure) ***\n\n',
    );
  }
  return available || process.env.REQUIRE_REDIS === '1';
}

/** `describe` for suites that need Redis: skipped with a notice when none can be had (see above). */
export const describeWithRedis: jest.Describe = redisAvailable() ? describe : describe.skip;

/**
 * The admissions a rolling-window key holds as Redis stores it (the ring's header: `r1`, then
 * big-endian start, n, cap, last), before those that left the window are dropped; 0 when absent.
 */
export async function rollingCount(
  redis: { getBuffer(key: string): Promise<Buffer | null> },
  key: string,
): Promise<number> {
  const ring = await redis.getBuffer(key);
  if (ring === null) return 0;
  expect(ring.subarray(0, 2).toString('latin1')).toBe('r1');
  return ring.readUInt32BE(6);
}
