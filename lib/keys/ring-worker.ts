import { setPriority } from 'node:os';
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
  // The lowest priority for this thread alone (Linux gives each thread its own nice value): on a
  // busy machine the request thread goes first, and the build only takes longer.
  try {
    setPriority(19);
  } catch {
    // not allowed here: the build runs at the process's priority
  }
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
