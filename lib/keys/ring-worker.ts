import { parentPort, workerData } from 'node:worker_threads';
import { ConfigurationError } from '../errors';
import { transferList } from './packed-table';
import { buildRingHere, type RingJob } from './ring-sources';

/**
 * The ring worker: builds one ring (ring-sources.ts) in its own thread and posts it back, its
 * buffers transferred, not copied. The request thread never parses the file or the rows.
 */
const port = parentPort;
if (port !== null) {
  buildRingHere(workerData as RingJob).then(
    (built) => {
      port.postMessage({ ok: true, built }, transferList(built.table));
    },
    (error: unknown) => {
      port.postMessage({
        ok: false,
        configuration: error instanceof ConfigurationError,
        message: error instanceof Error ? error.message : String(error),
        code: (error as { code?: unknown }).code,
      });
    },
  );
}
