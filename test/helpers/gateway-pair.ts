import { Pool } from 'pg';
import { loadConfig } from '../../gateway/config';
import { type RunningGateway, startGateway } from '../../gateway/start';
import type { Logger } from '../../lib';
import { sha256 } from '../../lib/keys/key-store';
import { migrate } from '../../lib/keys/pg-schema';
import { TOKEN_SECRET } from './fixtures';
import { captureLogs } from './logs';
import type { TestPostgres } from './postgres';

/** Two gateways on one database: the first with its admin listener, the second API only. */
export interface GatewayPair {
  /** The database's URL (`postgres://…`). */
  readonly url: string;
  readonly first: RunningGateway;
  readonly second: RunningGateway;
}

/**
 * Creates the database `name` on `server`, migrates it, and starts two gateways on it in this
 * process, as `npm start` runs them (`TOLLGATE_DATABASE_URL`, ports chosen by the system): the
 * first with its admin listener behind `adminToken`, logging to `logger`; the second without one.
 */
export async function startGatewayPair(
  server: TestPostgres,
  name: string,
  adminToken: string,
  logger: Logger,
): Promise<GatewayPair> {
  const url = await server.createDatabase(name);
  const pool = new Pool({ connectionString: url });
  await migrate(pool);
  await pool.end();
  const env = { PORT: '0', TOLLGATE_DATABASE_URL: url, TOLLGATE_TOKEN_SECRET: TOKEN_SECRET };
  const first = await startGateway(
    loadConfig({
      ...env,
      TOLLGATE_ADMIN_PORT: '0',
      TOLLGATE_ADMIN_TOKEN_SHA256: sha256(adminToken).toString('hex'),
    }),
    { logger, print: () => undefined },
  );
  const second = await startGateway(loadConfig(env), {
    logger: captureLogs().logger,
    print: () => undefined,
  });
  return { url, first, second };
}
