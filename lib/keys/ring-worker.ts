import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { ConfigurationError } from '../errors';
import { sharedTable, transferList } from './packed-table';
import { buildRingHere, type RingJob } from './ring-sources';

/**
 * The ring worker: builds one ring (ring-sources.ts) in its own thread and posts it back, its
 * buffers transferred, not copied. The request thread never parses the file or the rows.
 */
/** Nice 10: about a tenth of the CPU share of a thread at the default priority, when both want it. */
const LARGE_BUILD_NICE = 10;

/**
 * A large rebuild while requests are served gives way to them: this thread alone (Linux keeps a
 * nice value per thread; `setPriority()` without a pid sets the calling thread's) drops to nice 10,
 * so on a busy machine the request thread runs first and the build only takes longer. Small
 * builds and first loads keep the process's priority.
 */
function yieldToRequests(): void {
  try {
    setPriority(LARGE_BUILD_NICE);
  } catch {
    // not allowed here: the build keeps the process's priority
  }
}

const port = parentPort;
if (port !== null) {
  const job = workerData as RingJob;
  buildRingHere(job, { large: yieldToRequests }).then(
    (built) => {
      const table = job.shared === true ? sharedTable(built.table) : built.table;
      port.postMessage({ ok: true, built: { ...built, table } }, transferList(table));
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
