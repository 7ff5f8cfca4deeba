import { Worker } from 'node:worker_threads';
import { HostState } from '../../../lib/host/host-state';
import { createSharedCountersBuffer } from '../../../lib/rate-limit/shared-counters';
import { distScript } from '../../helpers/process';

/**
 * Real worker threads sharing one process's counts: four workers, each with its own view of one
 * buffer of shared counters and its own `HostClient` on a port from one `HostState` (this
 * thread), released together by a barrier on a shared array, all asking for the same keys at once.
 *
 * - A fixed and a rolling window each admit exactly their limit in total, however the workers'
 *   admissions interleave.
 * - A request meeting two scopes counts in both or in neither: each scope's count read back is
 *   exactly what the workers admitted that meets it, and the busier one admits exactly its limit.
 * - Four workers claiming the same idempotency names at once: one claim wins each name, and every
 *   other worker gets the winner's record.
 *
 * - A worker's port keeps it alive while it awaits an answer, and not once nothing is awaited: a
 *   worker that claims one name gets its answer, then exits on its own.
 *
 * The workers run the compiled kit (`dist/`, built by `npm test` first), required by path.
 */

const WORKERS = 4;
/** Requests each worker sends, in rounds of `ROUND` called in one turn. */
const REQUESTS = 120;
const ROUND = 8;
const LIMIT = 50;
/**
 * The two-scope run: three requests in four meet a per-account and a per-address scope, the
 * fourth the per-account scope only. The address scope fills first (at 30, with about 10 of the
 * others admitted), and the account scope then fills with account-only requests: a request the
 * address refuses must not spend the account's room.
 */
const ACCOUNT_LIMIT = 60;
const ADDRESS_LIMIT = 30;
const NAMES = 200;

/** Slots of the barrier: the start signal, and the workers done admitting. */
const GO = 0;
const DONE = 1;

/** What one worker runs: the kit's compiled modules, a barrier, then its part of the scenario. */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { AdmissionStore } = require(workerData.modules.admission);
const { HostClient } = require(workerData.modules.client);
const { HostIdempotencyStore } = require(workerData.modules.records);
const { SharedCounters } = require(workerData.modules.counters);

const barrier = new Int32Array(workerData.barrier);
const host = new HostClient(workerData.port);
const store = new AdmissionStore({ windowMs: 60000, sharedCounters: new SharedCounters(workerData.counters) });

/** Waits until every worker has added itself to \`slot\`. */
function meet(slot) {
  Atomics.add(barrier, slot, 1);
  Atomics.notify(barrier, slot);
  for (let seen = Atomics.load(barrier, slot); seen < workerData.workers; seen = Atomics.load(barrier, slot)) {
    Atomics.wait(barrier, slot, seen);
  }
}

async function admitAll(requestsOf) {
  let admitted = 0;
  const byKind = {};
  for (let sent = 0; sent < workerData.requests; sent += workerData.round) {
    const round = [];
    for (let i = sent; i < sent + workerData.round; i++) {
      const { kind, requests } = requestsOf(i);
      round.push(store.admit(requests).then((outcome) => {
        if (outcome.refusedAt >= 0) return;
        admitted += 1;
        byKind[kind] = (byKind[kind] ?? 0) + 1;
      }));
    }
    await Promise.all(round);
  }
  return { admitted, byKind };
}

async function run() {
  const scenario = workerData.scenario;
  let work;
  if (scenario === 'fixed' || scenario === 'rolling') {
    const counter = store.countersFor('rl:one:', { rolling: scenario === 'rolling' });
    const requests = [{ counter, key: 'account:{acct_1}', limit: workerData.limit, enforced: true }];
    work = async () => {
      const result = await admitAll(() => ({ kind: 'one', requests }));
      const [reading] = await store.read(requests);
      return { ...result, counts: [reading.count] };
    };
  } else if (scenario === 'two-scopes') {
    const account = store.countersFor('rl:account:', { rolling: true });
    const address = store.countersFor('rl:address:');
    const accountRequest = { counter: account, key: 'account:{acct_1}', limit: workerData.accountLimit, enforced: true };
    const addressRequest = { counter: address, key: 'ip:203.0.113.7', limit: workerData.addressLimit, enforced: true };
    const both = [accountRequest, addressRequest];
    const onlyAccount = [accountRequest];
    work = async () => {
      const result = await admitAll((i) =>
        i % 4 === 3 ? { kind: 'account', requests: onlyAccount } : { kind: 'both', requests: both },
      );
      meet(${DONE});
      const readings = await store.read(both);
      return { ...result, counts: readings.map((reading) => reading.count) };
    };
  } else {
    const records = new HostIdempotencyStore({ host, name: 'idempotency' });
    work = async () => {
      const claims = [];
      for (let i = 0; i < workerData.names; i++) {
        claims.push(records.claim('idem:{acct_1}:key-' + i, 'claim-' + workerData.index, 60000));
      }
      return { found: (await Promise.all(claims)).map((found) => found ?? null) };
    };
  }
  parentPort.postMessage({ ready: true });
  Atomics.wait(barrier, ${GO}, 0);
  const result = await work();
  store.shutdown();
  host.close();
  parentPort.postMessage({ result });
}

run().catch((error) => parentPort.postMessage({ error: String(error && error.stack || error) }));
`;

/** A worker that claims one name, reports it, and has nothing left to do. */
const IDLE_WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { HostClient } = require(workerData.modules.client);
const { HostIdempotencyStore } = require(workerData.modules.records);
const records = new HostIdempotencyStore({ host: new HostClient(workerData.port), name: 'idle' });
records.claim('idem:{acct_1}:key', 'claim', 60000).then((found) => {
  parentPort.postMessage(found ?? null);
});
`;

interface WorkerResult {
  readonly admitted?: number;
  readonly byKind?: Readonly<Record<string, number>>;
  readonly counts?: readonly number[];
  readonly found?: readonly (string | null)[];
}

type Scenario = 'fixed' | 'rolling' | 'two-scopes' | 'claims';

let host: HostState | undefined;
afterEach(() => {
  host?.close();
  host = undefined;
});

/** Starts the workers, releases them together, and collects what each reports. */
async function runWorkers(scenario: Scenario): Promise<WorkerResult[]> {
  const state = new HostState();
  host = state;
  const barrier = new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT);
  const slots = new Int32Array(barrier);
  const modules = modulePaths();
  const counters = createSharedCountersBuffer({ maxKeys: 16, maxTimes: 1024 });
  const workers: Worker[] = [];
  const results: Promise<WorkerResult>[] = [];
  const ready: Promise<void>[] = [];
  for (let index = 0; index < WORKERS; index++) {
    const port = state.connect();
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: {
        scenario,
        index,
        port,
        barrier,
        counters,
        modules,
        workers: WORKERS,
        requests: REQUESTS,
        round: ROUND,
        limit: LIMIT,
        accountLimit: ACCOUNT_LIMIT,
        addressLimit: ADDRESS_LIMIT,
        names: NAMES,
      },
      transferList: [port],
    });
    workers.push(worker);
    let readyNow: () => void = () => undefined;
    ready.push(
      new Promise((resolve) => {
        readyNow = resolve;
      }),
    );
    results.push(
      new Promise((resolve, reject) => {
        worker.on('message', (message: { ready?: true; result?: WorkerResult; error?: string }) => {
          if (message.ready === true) readyNow();
          else if (message.error !== undefined) reject(new Error(message.error));
          else if (message.result !== undefined) resolve(message.result);
        });
        worker.on('error', reject);
        worker.on('exit', (code) => {
          reject(new Error(`worker ${index} exited (${code}) before it answered`));
        });
      }),
    );
  }
  try {
    await Promise.all(ready);
    Atomics.store(slots, GO, 1);
    Atomics.notify(slots, GO);
    return await Promise.all(results);
  } finally {
    await Promise.all(workers.map((worker) => worker.terminate()));
  }
}

function modulePaths(): Record<string, string> {
  return {
    admission: distScript('lib/rate-limit/admission-store.js'),
    client: distScript('lib/host/host-client.js'),
    records: distScript('lib/host/host-idempotency-store.js'),
    counters: distScript('lib/rate-limit/shared-counters.js'),
  };
}

function sum(values: readonly number[]): number {
  return values.reduce((total, value) => total + value, 0);
}

describe('shared counts with real worker threads', () => {
  it.each(['fixed', 'rolling'] as const)(
    'admits exactly the limit in total in a %s window, four workers asking at once',
    async (scenario) => {
      const results = await runWorkers(scenario);
      expect(sum(results.map((result) => result.admitted ?? 0))).toBe(LIMIT);
      // Every worker reads the same shared count.
      for (const result of results) expect(result.counts).toEqual([LIMIT]);
    },
  );

  it('counts a request meeting two scopes in both or in neither, across workers', async () => {
    const results = await runWorkers('two-scopes');
    const both = sum(results.map((result) => result.byKind?.both ?? 0));
    const accountOnly = sum(results.map((result) => result.byKind?.account ?? 0));
    // Each scope holds exactly the admitted requests that meet it: a request refused by one scope
    // spent nothing in the other. Both filled, each to exactly its limit.
    for (const result of results) expect(result.counts).toEqual([both + accountOnly, both]);
    expect(both).toBe(ADDRESS_LIMIT);
    expect(accountOnly).toBe(ACCOUNT_LIMIT - ADDRESS_LIMIT);
  });

  it('lets one claim of a name win across workers, the others getting its record', async () => {
    const results = await runWorkers('claims');
    for (let name = 0; name < NAMES; name++) {
      const found = results.map((result) => result.found?.[name]);
      const winners = found.flatMap((value, index) => (value === null ? [index] : []));
      expect(winners).toHaveLength(1);
      const winner = `claim-${winners[0] ?? -1}`;
      for (const value of found) if (value !== null) expect(value).toBe(winner);
    }
  });

  it('keeps a worker alive while it awaits an answer, and lets it exit once nothing is awaited', async () => {
    const state = new HostState();
    host = state;
    const port = state.connect();
    const worker = new Worker(IDLE_WORKER_SOURCE, {
      eval: true,
      workerData: { port, modules: modulePaths() },
      transferList: [port],
    });
    const answers: unknown[] = [];
    worker.on('message', (message: unknown) => answers.push(message));
    const exited = new Promise<number>((resolve) => worker.once('exit', resolve));
    const timeout = setTimeout(() => void worker.terminate(), 10_000);
    try {
      expect(await exited).toBe(0);
    } finally {
      clearTimeout(timeout);
    }
    expect(answers).toEqual([null]);
  });
});
