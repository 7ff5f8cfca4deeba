import { sha256 } from '../../lib/keys/key-store';
import { TOKEN_SECRET } from './fixtures';
import { distScript, type HttpResult, httpRequest, NodeProcess } from './process';
import { freePort } from './redis';

/**
 * Gateway PROCESSES on one PostgreSQL key store (`dist/gateway/server.js`, what `npm start` runs),
 * for the tests that measure a change made on one instance until another enforces it.
 */

export interface DatabaseGateway {
  readonly process: NodeProcess;
  readonly port: number;
  readonly adminPort: number | undefined;
}

/**
 * Starts a gateway on `url` (with the admin listener when `adminToken` is given) and adds it to
 * `processes` for the caller to stop; resolves once it has logged `gateway.started`.
 */
export async function startDatabaseGateway(
  url: string,
  adminToken: string | undefined,
  processes: NodeProcess[],
): Promise<DatabaseGateway> {
  const port = await freePort();
  const adminPort = adminToken === undefined ? undefined : await freePort();
  const child = new NodeProcess(distScript('gateway/server.js'), [], {
    PORT: String(port),
    HOST: '127.0.0.1',
    TOLLGATE_DATABASE_URL: url,
    TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
    ...(adminPort === undefined || adminToken === undefined
      ? {}
      : {
          TOLLGATE_ADMIN_PORT: String(adminPort),
          TOLLGATE_ADMIN_TOKEN_SHA256: sha256(adminToken).toString('hex'),
        }),
  });
  processes.push(child);
  await child.waitForEntry((entry) => entry.event === 'gateway.started', 0, 20_000);
  return { process: child, port, adminPort };
}

/** A request to `gateway()`'s admin listener with `adminToken`. */
export function adminClient(
  gateway: () => DatabaseGateway,
  adminToken: string,
): (method: string, route: string, json?: unknown) => Promise<HttpResult> {
  return (method, route, json) =>
    httpRequest({
      port: gateway().adminPort ?? 0,
      method,
      path: route,
      headers: { authorization: `Bearer ${adminToken}` },
      ...(json === undefined ? {} : { json }),
    });
}

/**
 * Asks `request()` every 10 ms until it answers as `wanted` says, failing after 5 s; the ms it
 * took go into `figures[label]` when a label is given.
 */
export async function until(
  figures: Record<string, number>,
  label: string | undefined,
  wanted: (answer: HttpResult) => boolean,
  request: () => Promise<HttpResult>,
): Promise<HttpResult> {
  const started = performance.now();
  for (;;) {
    const answer = await request();
    if (wanted(answer)) {
      if (label !== undefined) figures[label] = performance.now() - started;
      return answer;
    }
    if (performance.now() - started > 5000) {
      throw new Error(`${label ?? 'waiting'}: still ${answer.status} ${answer.text} after 5 s`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
