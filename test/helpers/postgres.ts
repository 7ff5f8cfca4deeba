import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client } from 'pg';
import { freePort } from './redis';

/**
 * PostgreSQL for tests: each test file starts its OWN cluster (initdb + pg_ctl) in a temporary
 * folder, on a free loopback port, with trust authentication for the `postgres` user, and stops
 * and removes it at the end. PostgreSQL refuses to run as root: when the tests run as root, the
 * server's commands run as the unprivileged `postgres` user (`runuser -u postgres --`), which owns
 * the folder. When no PostgreSQL binaries are found the suites are skipped with a loud notice,
 * unless `REQUIRE_POSTGRES=1`, which makes them fail.
 */

const SERVER_USER = 'postgres';

/** The folder of `initdb`, `pg_ctl` and `postgres`: Debian's newest, or from PATH. */
export function postgresBinDir(): string | undefined {
  const debian = '/usr/lib/postgresql';
  if (existsSync(debian)) {
    const versions = readdirSync(debian)
      .filter((name) => existsSync(path.join(debian, name, 'bin', 'initdb')))
      .sort((a, b) => Number(b) - Number(a));
    if (versions[0] !== undefined) return path.join(debian, versions[0], 'bin');
  }
  try {
    const initdb = execFileSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' }).trim();
    return initdb === '' ? undefined : path.dirname(initdb);
  } catch {
    return undefined;
  }
}

export interface TestPostgres {
  readonly port: number;
  /** The `postgres` database: for creating others. */
  readonly adminUrl: string;
  /** A new, empty database; its URL. */
  createDatabase(label?: string): Promise<string>;
  /** `pg_ctl stop -m fast`: connections are cut. */
  stop(): void;
  /**
   * `pg_ctl stop -m immediate`: the server's processes are killed, as in a crash. Asynchronous, as
   * is `restart()`, so that a test's own traffic keeps flowing while the server goes and comes.
   */
  kill(): Promise<void>;
  /** `start()` without blocking the test's event loop (after a `kill()`, crash recovery runs). */
  restart(): Promise<void>;
  /** Starts it again on the same port and data folder. */
  start(): void;
  /** Stops it for good and removes its folder. */
  destroy(): void;
}

const asRoot = process.getuid?.() === 0;

function command(binary: string, args: string[]): [string, string[]] {
  return asRoot ? ['runuser', ['-u', SERVER_USER, '--', binary, ...args]] : [binary, args];
}

function run(binary: string, args: string[]): void {
  const [file, fileArgs] = command(binary, args);
  execFileSync(file, fileArgs, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 60_000 });
}

async function runAsync(binary: string, args: string[]): Promise<void> {
  const [file, fileArgs] = command(binary, args);
  await promisify(execFile)(file, fileArgs, { timeout: 60_000 });
}

export async function startTestPostgres(): Promise<TestPostgres> {
  const bin = postgresBinDir();
  if (bin === undefined) throw new Error('PostgreSQL binaries (initdb, pg_ctl) were not found');
  const directory = mkdtempSync(path.join(tmpdir(), 'tollgate-pg-'));
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', SERVER_USER], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', SERVER_USER], { encoding: 'utf8' }).trim());
    chownSync(directory, uid, gid);
  }
  const data = path.join(directory, 'data');
  run(path.join(bin, 'initdb'), [
    '-D',
    data,
    '-U',
    'postgres',
    '--auth=trust',
    '--no-sync',
    '-E',
    'UTF8',
    '--locale=C',
  ]);
  const port = await freePort();
  const options = [
    `-p ${port}`,
    `-k ${directory}`,
    '-c listen_addresses=127.0.0.1',
    '-c fsync=off',
    '-c synchronous_commit=off',
    '-c full_page_writes=off',
    '-c max_connections=60',
  ].join(' ');
  const pgCtl = path.join(bin, 'pg_ctl');
  const startArgs = ['-D', data, '-o', options, '-l', path.join(directory, 'log'), '-w', 'start'];
  const start = (): void => {
    run(pgCtl, startArgs);
  };
  const stop = (): void => {
    run(pgCtl, ['-D', data, '-m', 'fast', '-w', 'stop']);
  };
  const kill = (): Promise<void> => runAsync(pgCtl, ['-D', data, '-m', 'immediate', '-w', 'stop']);
  const restart = (): Promise<void> => runAsync(pgCtl, startArgs);
  start();
  let alive = true;
  const onExit = (): void => {
    if (alive) {
      try {
        run(pgCtl, ['-D', data, '-m', 'immediate', 'stop']);
      } catch {
        // already stopped
      }
    }
  };
  process.once('exit', onExit);
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    port,
    adminUrl,
    async createDatabase(label = 'db') {
      const name = `${label}_${randomBytes(4).toString('hex')}`.toLowerCase();
      const client = new Client({ connectionString: adminUrl });
      await client.connect();
      try {
        await client.query(`CREATE DATABASE "${name}"`);
      } finally {
        await client.end();
      }
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    stop,
    kill,
    restart,
    start,
    destroy() {
      alive = false;
      process.removeListener('exit', onExit);
      try {
        stop();
      } catch {
        // already stopped
      }
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/** True when PostgreSQL tests can run here; prints a loud notice when they cannot. */
export function postgresAvailable(): boolean {
  const available = postgresBinDir() !== undefined;
  if (!available && process.env.REQUIRE_POSTGRES !== '1') {
    process.stderr.write(
      '\n*** PostgreSQL tests SKIPPED: install PostgreSQL (initdb, pg_ctl) (REQUIRE_POSTGRES=1 makes this a failure) ***\n\n',
    );
  }
  return available || process.env.REQUIRE_POSTGRES === '1';
}

/** `describe` for suites that need PostgreSQL: skipped with a notice when none can be had. */
export const describeWithPostgres: jest.Describe = postgresAvailable() ? describe : describe.skip;
