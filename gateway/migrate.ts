import { ConfigurationError } from '../lib';
import { PgKeyStore } from '../lib/entry/postgres';
import { SCHEMA_VERSION } from '../lib/entry/postgres';
import { databaseUrlOf } from './config';

/**
 * `npm run migrate`: applies the SQL migrations (`migrations/NNN_name.sql`) the database at
 * `TOLLGATE_DATABASE_URL` lacks, in order, one transaction each, under an advisory lock (two
 * instances migrating at once is safe: the second finds nothing to do). Prints one line.
 */
async function main(): Promise<void> {
  const url = databaseUrlOf(process.env);
  if (url === undefined) {
    throw new ConfigurationError('TOLLGATE_DATABASE_URL is required: the database to migrate');
  }
  const result = await PgKeyStore.migrate(url);
  process.stdout.write(
    `${
      result.applied.length === 0
        ? `tollgate migrate: the database is at schema version ${result.to}, nothing to do`
        : `tollgate migrate: schema version ${result.from} -> ${result.to} (${result.applied.map((m) => `${String(m.version).padStart(3, '0')}_${m.name}`).join(', ')}); this build needs ${SCHEMA_VERSION}`
    }\n`,
  );
}

main().catch((error: unknown) => {
  const message =
    error instanceof ConfigurationError
      ? error.message
      : error instanceof Error
        ? error.message
        : String(error);
  process.stderr.write(`tollgate migrate: ${message}\n`);
  process.exit(1);
});
