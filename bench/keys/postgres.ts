import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { PgKeyStore } from '../../lib/entry/postgres';
import { freePort } from '../processes';
import type { BenchRow } from './generate';

/**
 * The bench's own PostgreSQL: a fresh cluster (initdb + pg_ctl) in a temporary folder on a free
 * loopback port, as test/helpers/postgres.ts starts one (run as the `postgres` user when the bench
 * runs as root), migrated with the project's migrations, removed at the end.
 */

export interface BenchPostgres {
  readonly url: string;
  destroy(): void;
}

function binDir(): string {
  const debian = '/usr/lib/postgresql';
  if (existsSync(debian)) {
    const versions = readdirSync(debian)
      .filter((name) => existsSync(path.join(debian, name, 'bin', 'initdb')))
      .sort((a, b) => Number(b) - Number(a));
    if (versions[0] !== undefined) return path.join(debian, versions[0], 'bin');
  }
  const initdb = execFileSync('sh', ['-c', 'command -v initdb || true'], { encoding: 'utf8' });
  if (initdb.trim() === '') throw new Error('PostgreSQL binaries (initdb, pg_ctl) were not found');
  return path.dirname(initdb.trim());
}

export async function startPostgres(): Promise<BenchPostgres> {
  const bin = binDir();
  const asRoot = process.getuid?.() === 0;
  const run = (binary: string, args: string[]): void => {
    const [command, commandArgs] = asRoot
      ? ['runuser', ['-u', 'postgres', '--', binary, ...args]]
      : [binary, args];
    execFileSync(command, commandArgs, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 120_000 });
  };
  const directory = mkdtempSync(path.join(tmpdir(), 'tollgate-bench-pg-'));
  if (asRoot) {
    const id = (flag: string): number =>
      Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(directory, id('-u'), id('-g'));
  }
  const data = path.join(directory, 'data');
  run(path.join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync']);
  const port = await freePort();
  const options = [
    `-p ${port}`,
    `-k ${directory}`,
    '-c listen_addresses=127.0.0.1',
    '-c fsync=off',
    '-c synchronous_commit=off',
    '-c full_page_writes=off',
    '-c shared_buffers=256MB',
    '-c max_wal_size=4GB',
    // The bench vacuums the keys table itself between reloads (`vacuumKeys`): autovacuum would
    // clean up each million-row UPDATE during the measured reload, on the gateway's own cores.
    '-c autovacuum=off',
  ].join(' ');
  const pgCtl = path.join(bin, 'pg_ctl');
  run(pgCtl, ['-D', data, '-o', options, '-l', path.join(directory, 'log'), '-w', 'start']);
  const stop = (): void => {
    try {
      run(pgCtl, ['-D', data, '-m', 'immediate', 'stop']);
    } catch {
      // already stopped
    }
  };
  process.once('exit', stop);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  await PgKeyStore.migrate(url);
  return {
    url,
    destroy() {
      process.removeListener('exit', stop);
      stop();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/**
 * Inserts the population in batches of 10,000 rows. The change triggers are off for the bulk load
 * (`session_replication_role = replica`): each row takes its version from the change sequence
 * directly, and nobody is told (nobody listens yet).
 */
export async function loadRows(url: string, rows: readonly BenchRow[]): Promise<void> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('SET session_replication_role = replica');
    const batch = 10_000;
    for (let start = 0; start < rows.length; start += batch) {
      const slice = rows.slice(start, start + batch);
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO accounts (id, ip_whitelist, version)
         SELECT id, CASE WHEN list = '' THEN NULL ELSE string_to_array(list, ',') END,
                nextval('tollgate_change_version')
         FROM unnest($1::text[], $2::text[]) AS t(id, list)`,
        [slice.map((row) => row.accountId), slice.map((row) => row.whitelist?.join(',') ?? '')],
      );
      await client.query(
        `INSERT INTO keys (id, account_id, role, publishable_key, secret_sha256, version)
         SELECT id, account_id, 'level-2', pk, decode(digest, 'hex'), nextval('tollgate_change_version')
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS t(id, account_id, pk, digest)`,
        [
          slice.map((row) => row.keyId),
          slice.map((row) => row.accountId),
          slice.map((row) => row.publishableKey),
          slice.map((row) => row.digest.toString('hex')),
        ],
      );
      await client.query('COMMIT');
    }
    await client.query('ANALYZE');
  } finally {
    await client.end();
  }
}

/**
 * Gives every key a new version without a NOTIFY (triggers off): only the instances' version
 * backstop sees it, and each then fetches and applies every key again, the database's full reload.
 * `keyId` is revoked (`revoke`) or made valid again in the same statement, so the bench sees when
 * the batch is in.
 * The UPDATE runs now, in a transaction left open, and a CHECKPOINT writes its pages out; the
 * returned `commit()` makes it visible, so the database's own work on a million rows is over
 * before the measured time starts.
 */
export async function touchEveryKey(
  url: string,
  keyId: string,
  revoke: boolean,
): Promise<{ commit(): Promise<void> }> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('BEGIN');
    await client.query('SET LOCAL session_replication_role = replica');
    // The gateways' own writes (`last_used_at`) wait for the commit instead of deadlocking with
    // a million row locks taken in another order; reads go on.
    await client.query('LOCK TABLE keys IN EXCLUSIVE MODE');
    await client.query(
      `UPDATE keys SET version = nextval('tollgate_change_version'),
         revoked_at = CASE WHEN id = $1 THEN $2::timestamptz ELSE revoked_at END`,
      [keyId, revoke ? new Date() : null],
    );
    // The UPDATE's dirty pages written out now, on another connection, rather than by the
    // checkpointer while the bench measures.
    const other = new Client({ connectionString: url });
    await other.connect();
    await other.query('CHECKPOINT').finally(() => other.end());
    // And the kernel's writeback of those pages done before the steady window, not in it.
    execFileSync('sync');
  } catch (error) {
    await client.end();
    throw error;
  }
  return {
    async commit() {
      try {
        await client.query('COMMIT');
      } finally {
        await client.end();
      }
    },
  };
}

/**
 * Removes the dead rows of the last million-row UPDATE (`VACUUM keys`), between reloads and outside
 * any measured window. In production that is autovacuum's work, on the database's own machine.
 */
export async function vacuumKeys(url: string): Promise<void> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('VACUUM keys');
  } finally {
    await client.end();
  }
}

/** Revokes one key the way the key command does (triggers on: a version and a NOTIFY). */
export async function revokeKey(url: string, keyId: string): Promise<void> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('UPDATE keys SET revoked_at = now() WHERE id = $1', [keyId]);
  } finally {
    await client.end();
  }
}
