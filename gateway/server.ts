import { ConfigurationError } from '../lib';
import { loadConfig } from './config';
import { createLogger } from './logger';
import { startGateway } from './start';
import { startHost } from './workers/host';

/**
 * `npm start`: reads the environment (docs/configuration.md), starts the gateway (in as many
 * worker threads as `TOLLGATE_WORKERS` says), reloads the keys file on SIGHUP and drains in-flight
 * requests on SIGTERM/SIGINT. Invalid configuration ends
 * the process with one line naming the culprit and exit code 1.
 */
async function main(): Promise<void> {
  const config = loadConfig(process.env);
  const logger = createLogger(config.logLevel);
  const startOptions = {
    logger,
    // The demo credentials go to stderr, apart from the JSON log stream on stdout.
    print: (text: string) => process.stderr.write(`${text}\n`),
  };
  // Several threads on one port (TOLLGATE_WORKERS): this thread supervises them.
  const gateway =
    config.workers > 1
      ? await startHost(config, startOptions)
      : await startGateway(config, startOptions);

  process.on('SIGHUP', () => {
    void gateway.reloadKeys();
  });
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ event: 'gateway.stopping', signal }, 'draining in-flight requests');
    gateway.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', () => {
    stop('SIGTERM');
  });
  process.once('SIGINT', () => {
    stop('SIGINT');
  });
}

main().catch((error: unknown) => {
  if (error instanceof ConfigurationError) {
    console.error(`tollgate: configuration error: ${error.message}`);
  } else {
    const code = (error as { code?: unknown }).code;
    console.error(
      `tollgate: failed to start: ${error instanceof Error ? error.name : 'error'}${typeof code === 'string' ? ` (${code})` : ''}`,
    );
  }
  process.exit(1);
});
