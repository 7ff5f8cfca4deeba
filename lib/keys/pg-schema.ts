import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { ClientBase, Pool } from 'pg';
import { ConfigurationError } from '../errors';
import { type Migration, type MigrationResult, SCHEMA_VERSION } from './pg-key-views';

/**
 * The database schema of the key store: plain SQL files `migrations/NNN_name.sql`, applied in
 * order, each in its own transaction, recorded in `schema_migrations`. A session advisory lock
 * makes concurrent runs safe: the second waits, then finds nothing left to do.
 */

/** Taken by `migrate()` for its whole run (any other value would do; this one is Tollgate's). */
const MIGRATION_LOCK = 7403551200;
const FILE_PATTERN = /^(\d{3})_([a-z0-9_]+)\.sql$/;

/** The repository's `migrations/` folder, from the sources (`lib/keys`) or the build (`dist/lib/keys`). */
export function migrationsDirectory(): string {
  const candidates = [
    path.join(__dirname, '..', '..', 'migrations'),
    path.join(__dirname, '..', '..', '..', 'migrations'),
  ];
  const found = candidates.find((dir) => existsSync(path.join(dir, '001_keys.sql')));
  if (found === undefined) {
    throw new ConfigurationError(
      `the migrations folder was not found (looked in ${candidates.join(', ')})`,
    );
  }
  return found;
}

/** The migration files, in order; their versions must run 1, 2, 3… without a gap. */
export function readMigrations(directory = migrationsDirectory()): Migration[] {
  const migrations = readdirSync(directory)
    .filter((file) => file.endsWith('.sql'))
    .sort()
    .map((file, index) => {
      const match = FILE_PATTERN.exec(file);
      const version = Number(match?.[1]);
      if (match === null || version !== index + 1) {
        throw new ConfigurationError(
          `${path.join(directory, file)}: expected a name like ${String(index + 1).padStart(3, '0')}_name.sql`,
        );
      }
      return {
        version,
        name: match[2] ?? '',
        sql: readFileSync(path.join(directory, file), 'utf8'),
      };
    });
  return migrations;
}

/** The version the database is migrated to: 0 when it has never been. */
export async function schemaVersion(client: Pick<ClientBase, 'query'> | Pool): Promise<number> {
  const table = await client.query<{ present: boolean }>(
    "SELECT to_regclass('schema_migrations') IS NOT NULL AS present",
  );
  if (table.rows[0]?.present !== true) return 0;
  const result = await client.query<{ version: number }>(
    'SELECT coalesce(max(version), 0) AS version FROM schema_migrations',
  );
  return result.rows[0]?.version ?? 0;
}

/** Throws a one-line `ConfigurationError` unless the database is at `SCHEMA_VERSION`. */
export async function assertMigrated(client: Pick<ClientBase, 'query'> | Pool): Promise<void> {
  const version = await schemaVersion(client);
  if (version < SCHEMA_VERSION) {
    throw new ConfigurationError(
      `the database is at schema version ${version}, this build needs ${SCHEMA_VERSION}: run the migrations first (tollgate-keys migrate, or npm run migrate in a checkout)`,
    );
  }
  if (version > SCHEMA_VERSION) {
    throw new ConfigurationError(
      `the database is at schema version ${version}, newer than this build knows (${SCHEMA_VERSION}): run a newer Tollgate`,
    );
  }
}

/** Applies the migrations the database lacks, one transaction each, under an advisory lock. */
export async function migrate(pool: Pool, migrations = readMigrations()): Promise<MigrationResult> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    try {
      await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
      const from = await schemaVersion(client);
      const known = migrations.length;
      if (from > known) {
        throw new ConfigurationError(
          `the database is at schema version ${from}, newer than these migrations (${known})`,
        );
      }
      const applied: Migration[] = [];
      for (const migration of migrations.slice(from)) {
        await client.query('BEGIN');
        try {
          await client.query(migration.sql);
          await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
            migration.version,
            migration.name,
          ]);
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK');
          throw new ConfigurationError(
            `migration ${migration.version} (${migration.name}) failed: ${(error as Error).message}`,
          );
        }
        applied.push(migration);
      }
      return { from, to: from + applied.length, applied };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]);
    }
  } finally {
    client.release();
  }
}
