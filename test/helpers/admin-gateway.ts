import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../../gateway/config';
import { type RunningGateway, startGateway } from '../../gateway/start';
import type { Logger } from '../../lib';
import { sha256 } from '../../lib/keys/key-store';
import { TOKEN_SECRET } from './fixtures';

/** A gateway on a keys file with its admin listener, and how to end it. */
export interface AdminGateway {
  readonly gateway: RunningGateway;
  /** The admin listener's port (on 127.0.0.1). */
  readonly adminPort: number;
  stop(): Promise<void>;
}

/**
 * The gateway as `npm start` runs it with a keys file holding `document` (written 0600 in a
 * folder of its own) and the admin listener behind `adminToken`, logging to `logger`.
 */
export async function startAdminGateway(
  document: unknown,
  adminToken: string,
  logger: Logger,
): Promise<AdminGateway> {
  const directory = mkdtempSync(path.join(tmpdir(), 'tollgate-admin-'));
  const keysFile = path.join(directory, 'keys.json');
  writeFileSync(keysFile, JSON.stringify(document), { mode: 0o600 });
  const gateway = await startGateway(
    loadConfig({
      PORT: '0',
      TOLLGATE_KEYS_FILE: keysFile,
      TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
      TOLLGATE_ADMIN_PORT: '0',
      TOLLGATE_ADMIN_TOKEN_SHA256: sha256(adminToken).toString('hex'),
    }),
    { logger, print: () => undefined },
  );
  if (gateway.adminUrl === undefined) throw new Error('the gateway opened no admin listener');
  return {
    gateway,
    adminPort: Number(new URL(gateway.adminUrl).port),
    async stop() {
      await gateway.stop(1000);
      rmSync(directory, { recursive: true, force: true });
    },
  };
}
