import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { ConfigurationError } from '../errors';
import { transferList } from './packed-table';
import { buildRingHere, type RingJob } from './ring-sources';

/**
 * The ring worker: builds one ring (ring-sources.ts) in its own thread and posts it back, its
 * buffers transferred, not copied. The request thread never parses the file or the rows.
 */
/** Nice 10: about a tenth of the CPU share of a thread at the default priority. */
const BACKGROUND_NICE = 10;
const port = parentPort;
if (port !== null) {
  // A rebuild while requests are served runs at a lower priority, for this thread alone (Linux
  // gives each thread its own nice value): on a busy machine the request thread goes first, and
  // the build only takes longer. The first load, before any request, keeps the full priority.
  if ((workerData as RingJob).background === true) {
    try {
      setPriority(BACKGROUND_NICE);
    } catch {
      // not allowed here: the build runs at the process's priority
    }
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
