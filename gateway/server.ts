import { ConfigurationError } from '../lib';
import { loadConfig } from './config';
import { createLogger } from './logger';
import { startGateway } from './start';

/**
 * `npm start`: reads the environment (docs/configuration.md), starts the gateway, reloads the
 * keys file on SIGHUP and drains in-flight requests on SIGTERM/SIGINT. Invalid configuration ends
 * the process with one line naming the culprit and exit code 1.
 */
async function main(): Promise<void> {
  const config = loadConfig(process.env);
  const logger = createLogger(config.logLevel);
  const gateway = await startGateway(config, {
    logger,
    // The demo credentials go to stderr, apart from the JSON log stream on stdout.
    print: (text) => process.stderr.write(`${text}\n`),
  });

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
