import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import { ConfigurationError, type Logger, ThreadShare } from '../../lib';
import {
  loadSharedFileKeyStore,
  noteUsesElsewhere,
  openSharedPgKeyStore,
  type PackedTable,
  RingBroadcast,
} from '../../lib/internal';
import { GATEWAY_LIMIT_SCOPES } from '../keys-cli/limit-scopes';
import type { GatewayConfig } from '../config';
import { createDemoKeys, formatDemoCredentials } from '../demo-keys';
import type { ReadinessReport } from '../readiness';
import {
  drain,
  fileReloader,
  type OpenedKeys,
  openKeys,
  type RunningAdmin,
  startAdmin,
  startedFields,
  warnOfSettings,
} from '../start';
import { startStubUpstream } from '../stub-upstream';
import { hostReadiness, sumDecisions, sumMetrics } from './face';
import { type KeyWrite, runKeyWrite } from './key-writes';
import type { Answers, FromWorker, Question, ToWorker, WorkerStart } from './messages';

/**
 * The main thread of a gateway served by several worker threads on one port. It starts what there
 * is one of per host (the keys file or the key database, read here for every worker, the stub
 * upstream, the admin listener, the demo keys and the signing secret the workers share), starts
 * the workers, and makes them one face: `/metrics` sums theirs,
 * `/readyz` is ready when every worker is, SIGHUP reloads each once, SIGTERM drains them all, and a
 * worker that stops unasked is replaced while the others go on serving.
 */

export interface RunningHost {
  readonly url: string;
  readonly adminUrl: string | undefined;
  readonly workers: number;
  /** The thread serving each worker slot now (`undefined` while one is being replaced). */
  threads(): readonly (Worker | undefined)[];
  reloadKeys(): Promise<boolean>;
  stop(drainMs?: number): Promise<void>;
}

export interface HostOptions {
  readonly logger: Logger;
  /** Where the demo credentials are printed (once, never through the logger). */
  readonly print: (text: string) => void;
}

/** How long a question to a worker may take before it is given up. */
const QUESTION_TIMEOUT_MS = 2000;
/** A worker that stops sooner than this after it started is restarted after a growing pause. */
const QUICK_EXIT_MS = 10_000;
const MAX_RESTART_PAUSE_MS = 5000;

/** One worker slot: the thread serving it now, and what the main thread knows of it. */
interface Slot {
  readonly index: number;
  thread: Worker | undefined;
  startedAt: number;
  /** Consecutive quick exits, for the restart pause. */
  quickExits: number;
  report: ReadinessReport | undefined;
  readonly pending: Map<number, Pending>;
}

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
  readonly timer: NodeJS.Timeout;
}

export async function startHost(config: GatewayConfig, options: HostOptions): Promise<RunningHost> {
  const { logger } = options;
  warnOfSettings(config, logger);
  const count = config.workers;
  // The demo keys are made here so that every worker serves the same ones.
  const demoCredentials =
    config.databaseUrl === undefined && config.keysFile === undefined
      ? createDemoKeys().credentials
      : undefined;
  const slots: Slot[] = [];
  // A keys file is loaded once, here, into shared memory: every worker serves that one ring, and
  // each reload's ring is handed to every worker once it is in force on this thread.
  let keysTable: PackedTable | undefined;
  const shareKeys = (table: PackedTable): void => {
    keysTable = table;
    for (const slot of slots)
      if (slot.thread !== undefined) post(slot.thread, { type: 'keys', table });
  };
  // The database is read by this thread alone: every worker follows the ring it keeps, the same
  // base in shared memory and the same batches of changes after it, in the order they happen here.
  const broadcast = new RingBroadcast((news) => {
    for (const slot of slots) {
      if (slot.thread !== undefined) post(slot.thread, { type: 'keys-ring', news });
    }
  });
  // A keys file or a key database is read here for every worker; demo keys only for the admin
  // listener, which lists them.
  const keys: OpenedKeys | undefined =
    config.keysFile !== undefined
      ? await sharedFileKeys(config.keysFile, shareKeys)
      : config.databaseUrl !== undefined
        ? await sharedDatabaseKeys(config.databaseUrl, logger, broadcast)
        : config.admin === undefined
          ? undefined
          : await openKeys(config, logger, demoCredentials);
  const secret = config.tokenSecret ?? randomBytes(48).toString('base64');
  const stub = config.upstreamUrl === undefined ? await startStubUpstream() : undefined;
  const upstreamUrl = config.upstreamUrl ?? stub?.url ?? '';
  const readySlots = new SharedArrayBuffer(count * Int32Array.BYTES_PER_ELEMENT);
  const ready = new Int32Array(readySlots);

  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const restarts = new Counter({
    name: 'tollgate_worker_restarts_total',
    help: 'Worker threads that stopped unasked and were replaced',
    registers: [registry],
  });
  new Gauge({
    name: 'tollgate_workers',
    help: 'Worker threads serving the public listener now',
    registers: [registry],
    collect() {
      this.set(slots.filter((slot) => slot.thread !== undefined).length);
    },
  });

  let stopping = false;
  let nextId = 1;

  // Limits and idempotency records in memory, and the failure budget, counted once for the host.
  const share = new ThreadShare({
    authFailureLimit: config.limits.authFailures,
    windowMs: config.limits.windowMs,
  });

  const workerStart = (index: number): WorkerStart => ({
    config,
    index,
    upstreamUrl,
    secret,
    demoCredentials,
    keysTable,
    keysFollow: keys?.databaseStore === undefined ? undefined : broadcast.start(keys.databaseStore),
    threads: share.link(),
    readySlots,
  });

  /** Starts the slot's thread; resolves once it listens, rejects when it cannot start. */
  const spawn = (slot: Slot): Promise<string> =>
    new Promise((resolve, reject) => {
      const workerData = workerStart(slot.index);
      const thread = new Worker(workerScript(), {
        workerData,
        transferList: [workerData.threads.port],
      });
      slot.thread = thread;
      slot.startedAt = Date.now();
      slot.report = undefined;
      let listening = false;
      thread.on('message', (message: FromWorker) => {
        switch (message.type) {
          case 'listening':
            listening = true;
            resolve(message.url);
            return;
          case 'failed':
            reject(
              message.configuration
                ? new ConfigurationError(message.message)
                : new Error(message.message),
            );
            return;
          case 'readiness':
            slot.report = message.report;
            return;
          case 'answer':
            settle(slot, message.id, (pending) => {
              pending.resolve(message.value);
            });
            return;
          case 'unanswered':
            settle(slot, message.id, (pending) => {
              pending.reject(new Error(message.message));
            });
            return;
          case 'used':
            if (keys?.databaseStore !== undefined) {
              noteUsesElsewhere(keys.databaseStore, message.uses);
            }
            return;
          case 'write':
            writeFor(thread, message.id, message.write);
            return;
        }
      });
      thread.on('error', (error) => {
        logger.error(
          { event: 'worker.failed', worker: slot.index, reason: error.message },
          'a worker thread failed',
        );
      });
      thread.on('exit', (code) => {
        slot.thread = undefined;
        slot.report = undefined;
        Atomics.store(ready, slot.index - 1, 0);
        for (const [id, pending] of slot.pending) {
          clearTimeout(pending.timer);
          pending.reject(new Error(`worker ${slot.index} stopped`));
          slot.pending.delete(id);
        }
        if (!listening) {
          reject(new Error(`worker ${slot.index} stopped before it listened (exit code ${code})`));
          return;
        }
        if (stopping) return;
        replace(slot, code);
      });
    });

  /** A worker's key write, made on this thread's database store; the answer goes to that worker. */
  const writeFor = (thread: Worker, id: number, write: KeyWrite): void => {
    const store = keys?.databaseStore;
    const written =
      store === undefined
        ? Promise.resolve({
            failure: { kind: 'failed', message: 'no key database is configured' } as const,
          })
        : runKeyWrite(store, write, logger);
    void written.then((outcome) => {
      post(
        thread,
        'value' in outcome
          ? { type: 'written', id, value: outcome.value }
          : { type: 'unwritten', id, failure: outcome.failure },
      );
    });
  };

  const replace = (slot: Slot, code: number): void => {
    const quick = Date.now() - slot.startedAt < QUICK_EXIT_MS;
    slot.quickExits = quick ? slot.quickExits + 1 : 0;
    const pause = quick ? Math.min(MAX_RESTART_PAUSE_MS, 250 * 2 ** (slot.quickExits - 1)) : 0;
    restarts.inc();
    logger.error(
      { event: 'worker.exited', worker: slot.index, exit_code: code, restart_in_ms: pause },
      'a worker thread stopped unasked; starting another in its place',
    );
    const timer = setTimeout(() => {
      if (stopping) return;
      spawn(slot).then(
        () => {
          logger.info({ event: 'worker.replaced', worker: slot.index }, 'worker thread replaced');
        },
        (error: unknown) => {
          logger.error(
            { event: 'worker.failed', worker: slot.index, reason: (error as Error).message },
            'the replacement worker thread did not start',
          );
          if (!stopping && slot.thread === undefined) replace(slot, -1);
        },
      );
    }, pause);
    timer.unref();
  };

  const settle = (slot: Slot, id: number, with_: (pending: Pending) => void): void => {
    const pending = slot.pending.get(id);
    if (pending === undefined) return;
    slot.pending.delete(id);
    clearTimeout(pending.timer);
    with_(pending);
  };

  const ask = <W extends Question['what']>(
    slot: Slot,
    question: Extract<Question, { what: W }>,
  ): Promise<Answers[W]> =>
    new Promise((resolve, reject) => {
      const thread = slot.thread;
      if (thread === undefined) {
        reject(new Error(`worker ${slot.index} is not running`));
        return;
      }
      const id = nextId++;
      const timer = setTimeout(() => {
        slot.pending.delete(id);
        reject(new Error(`worker ${slot.index} did not answer within ${QUESTION_TIMEOUT_MS} ms`));
      }, QUESTION_TIMEOUT_MS);
      slot.pending.set(id, { resolve, reject, timer });
      post(thread, { type: 'ask', id, question });
    });

  /** The question asked of every running worker; the answers of those that gave one. */
  const askAll = async <W extends Question['what']>(
    question: Extract<Question, { what: W }>,
  ): Promise<Answers[W][]> => {
    const answers = await Promise.allSettled(
      slots.filter((slot) => slot.thread !== undefined).map((slot) => ask(slot, question)),
    );
    return answers.flatMap((answer) => (answer.status === 'fulfilled' ? [answer.value] : []));
  };

  const stopWorkers = async (drainMs: number): Promise<void> => {
    stopping = true;
    await Promise.all(
      slots.map(async (slot) => {
        const thread = slot.thread;
        if (thread === undefined) return;
        const exited = new Promise<void>((resolve) => {
          thread.once('exit', () => {
            resolve();
          });
        });
        post(thread, { type: 'stop', drainMs });
        // A worker that cannot drain in time (a stuck upstream call) is ended.
        const timer = setTimeout(() => void thread.terminate(), drainMs + 2000);
        await exited;
        clearTimeout(timer);
      }),
    );
  };

  for (let index = 1; index <= count; index++) {
    slots.push({
      index,
      thread: undefined,
      startedAt: 0,
      quickExits: 0,
      report: undefined,
      pending: new Map(),
    });
  }
  let url: string;
  try {
    const urls = await Promise.all(slots.map(spawn));
    url = urls[0] ?? '';
  } catch (error) {
    await stopWorkers(0);
    share.close();
    if (stub !== undefined) await drain(stub.server, 0);
    await keys?.databaseStore?.close();
    throw error;
  }

  const readiness = hostReadiness(slots);
  const metrics = {
    contentType: registry.contentType,
    text: async (): Promise<string> => {
      return sumMetrics(await askAll({ what: 'metrics' }), registry);
    },
  };
  let admin: RunningAdmin | undefined;
  if (keys !== undefined) {
    admin = await startAdmin(config, keys, logger, {
      readiness,
      metrics,
      usage: (accountId, limits) => {
        const running = slots.find((slot) => slot.thread !== undefined);
        if (running === undefined) return Promise.reject(new Error('no worker is running'));
        return ask(running, { what: 'usage', accountId, limits });
      },
      decisions: async (accountId) => sumDecisions(await askAll({ what: 'decisions', accountId })),
    }).catch(async (error: unknown) => {
      await stopWorkers(0);
      throw error;
    });
  }
  if (demoCredentials !== undefined) options.print(formatDemoCredentials(demoCredentials));
  logger.info(
    {
      event: 'gateway.started',
      url,
      workers: count,
      upstream: stub === undefined ? 'configured' : 'bundled stub',
      ...startedFields(config, admin?.url),
    },
    `Tollgate listening on ${url} with ${count} worker threads`,
  );

  const fileStore = keys?.fileStore;
  const reloadFile = fileReloader(logger, () => undefined);
  return {
    url,
    adminUrl: admin?.url,
    workers: count,
    threads: () => slots.map((slot) => slot.thread),
    // The workers get the new ring through `shareKeys` once it is in force here.
    reloadKeys: () => (fileStore === undefined ? Promise.resolve(true) : reloadFile(fileStore)),
    stop: async (drainMs = 10_000) => {
      await Promise.all([stopWorkers(drainMs), admin?.stop(drainMs)]);
      share.close();
      await keys?.databaseStore?.close();
      if (stub !== undefined) await drain(stub.server, 1000);
    },
  };
}

async function sharedFileKeys(
  path: string,
  share: (table: PackedTable) => void,
): Promise<OpenedKeys> {
  const fileStore = await loadSharedFileKeyStore(
    path,
    { limitScopes: GATEWAY_LIMIT_SCOPES },
    share,
  );
  return { keyStore: fileStore, fileStore, databaseStore: undefined, demo: undefined };
}

/** The database key store, opened here with its ring in shared memory, told to `broadcast`. */
async function sharedDatabaseKeys(
  connectionString: string,
  logger: Logger,
  broadcast: RingBroadcast,
): Promise<OpenedKeys> {
  const databaseStore = await openSharedPgKeyStore(
    { connectionString, logger, limitScopes: GATEWAY_LIMIT_SCOPES },
    broadcast,
  );
  return { keyStore: databaseStore, fileStore: undefined, databaseStore, demo: undefined };
}

function post(thread: Worker, message: ToWorker): void {
  thread.postMessage(message);
}

/**
 * The compiled worker: beside this file in `dist/gateway/workers/`; when this file runs from its
 * TypeScript source (the tests), the build's copy, which `npm test` makes first.
 */
function workerScript(): string {
  const beside = path.join(__dirname, 'worker-thread.js');
  if (existsSync(beside)) return beside;
  const built = path.join(__dirname, '..', '..', 'dist', 'gateway', 'workers', 'worker-thread.js');
  if (existsSync(built)) return built;
  throw new Error(
    `the worker thread script was not found (looked for ${beside} and ${built}): run npm run build`,
  );
}
