import { parentPort, workerData } from 'node:worker_threads';
import { ConfigurationError } from '../../lib';
import { createLogger } from '../logger';
import { type RunningGateway, startGateway } from '../start';
import { peersNotReady } from './face';
import type { Answers, FromWorker, Question, ToWorker, WorkerStart } from './messages';

/**
 * One worker thread of a gateway serving one port from several threads: its own gateway on the
 * shared port (`reusePort`), no admin listener and no stub upstream (the main thread's). It tells
 * the main thread when it listens and how ready it is, answers its questions (metrics, an
 * account's decisions and usage), serves each keys file ring the main thread loads, and drains
 * when told.
 */

/** How often the worker checks its own readiness and tells the others when it changed. */
const READINESS_TICK_MS = 250;

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
        gateway.serveKeys(message.table);
        return;
      case 'stop':
        clearInterval(ticker);
        Atomics.store(slots, start.index - 1, 0);
        gateway.stop(message.drainMs).then(
          () => process.exit(0),
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
