import { parentPort, workerData } from 'node:worker_threads';
import { ConfigurationError } from '../../lib';
import { RingFollower } from '../../lib/internal';
import { createLogger } from '../logger';
import { type RunningGateway, startGateway } from '../start';
import { peersNotReady } from './face';
import { failureError, type KeyWrite } from './key-writes';
import type { Answers, FromWorker, Question, ToWorker, WorkerStart } from './messages';

/**
 * One worker thread of a gateway serving one port from several threads: its own gateway on the
 * shared port (`reusePort`), no admin listener and no stub upstream (the main thread's). It tells
 * the main thread when it listens and how ready it is, answers its questions (metrics, an
 * account's decisions and usage), serves the keys the main thread loads (each keys file ring, or
 * the database ring's bases and changes), hands it the database keys it served, for their last
 * use to be written, and drains when told.
 */

/** How often the worker checks its own readiness and tells the others when it changed. */
const READINESS_TICK_MS = 250;
/** How often the worker hands the main thread the database keys it served. */
const USES_TICK_MS = 1000;

/** The key writes asked of the main thread and not yet answered. */
const writes = new Map<
  number,
  { readonly write: KeyWrite; resolve(value: unknown): void; reject(error: Error): void }
>();
let nextWrite = 1;

const port = parentPort;
if (port !== null) {
  const start = workerData as WorkerStart;
  const send = (message: FromWorker): void => {
    port.postMessage(message);
  };
  const logger = createLogger(start.config.logLevel, undefined, { worker: start.index });
  const slots = new Int32Array(start.readySlots);
  startGateway(start.config, {
    logger,
    print: () => undefined,
    worker: {
      index: start.index,
      upstreamUrl: start.upstreamUrl,
      secret: start.secret,
      demoCredentials: start.demoCredentials,
      keysTable: start.keysTable,
      keysFollow: start.keysFollow,
      writeKey: (write) =>
        new Promise((resolve, reject) => {
          const id = nextWrite++;
          writes.set(id, { write, resolve, reject });
          send({ type: 'write', id, write });
        }),
      threads: start.threads,
      peersNotReady: () => peersNotReady(slots, start.index),
    },
  }).then(
    (gateway) => {
      serve(gateway, start, slots, send, port);
      send({ type: 'listening', url: gateway.url });
    },
    (error: unknown) => {
      send({
        type: 'failed',
        configuration: error instanceof ConfigurationError,
        message: error instanceof Error ? error.message : String(error),
      });
    },
  );
}

function serve(
  gateway: RunningGateway,
  start: WorkerStart,
  slots: Int32Array,
  send: (message: FromWorker) => void,
  port: NonNullable<typeof parentPort>,
): void {
  let told = '';
  const tellReadiness = (): void => {
    const report = gateway.app.readiness.own();
    Atomics.store(slots, start.index - 1, report.ready ? 1 : 0);
    const text = JSON.stringify(report);
    if (text === told) return;
    told = text;
    send({ type: 'readiness', report });
  };
  tellReadiness();
  const ticker = setInterval(tellReadiness, READINESS_TICK_MS);
  ticker.unref();
  const keys = gateway.keyStore instanceof RingFollower ? gateway.keyStore : undefined;
  const handUses = (): void => {
    const uses = keys?.takeUses() ?? [];
    if (uses.length > 0) send({ type: 'used', uses });
  };
  const usesTicker = setInterval(handUses, USES_TICK_MS);
  usesTicker.unref();

  port.on('message', (message: ToWorker) => {
    switch (message.type) {
      case 'ask':
        answer(gateway, message.question).then(
          (value) => {
            send({ type: 'answer', id: message.id, value });
          },
          (error: unknown) => {
            send({
              type: 'unanswered',
              id: message.id,
              message: error instanceof Error ? error.message : String(error),
            });
          },
        );
        return;
      case 'keys':
      case 'keys-ring':
        gateway.serveKeys(message);
        return;
      case 'written':
      case 'unwritten': {
        const pending = writes.get(message.id);
        if (pending === undefined) return;
        writes.delete(message.id);
        if (message.type === 'written') pending.resolve(message.value);
        else pending.reject(failureError(pending.write, message.failure));
        return;
      }
      case 'stop':
        clearInterval(ticker);
        clearInterval(usesTicker);
        Atomics.store(slots, start.index - 1, 0);
        gateway.stop(message.drainMs).then(
          () => {
            // The uses of the last requests, before the main thread writes them and closes.
            handUses();
            process.exit(0);
          },
          () => process.exit(1),
        );
        return;
    }
  });
}

function answer(gateway: RunningGateway, question: Question): Promise<Answers[keyof Answers]> {
  switch (question.what) {
    case 'metrics':
      return gateway.app.metrics.registry.getMetricsAsJSON();
    case 'decisions':
      return Promise.resolve(gateway.app.decisions(question.accountId));
    case 'usage':
      return gateway.app.usage(question.accountId, question.limits);
  }
}
