import { startStubUpstream } from './stub-upstream';

/** Runs the stub payment handlers as their own process: `node dist/gateway/stub-upstream-server.js`. */
async function main(): Promise<void> {
  const port = Number(process.env.PORT ?? 8090);
  const host = process.env.HOST ?? '127.0.0.1';
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error('stub-upstream: PORT must be a whole number from 0 to 65535');
    process.exit(1);
  }
  const { server, url } = await startStubUpstream(host, port);
  console.log(`stub upstream listening on ${url}`);
  const stop = (): void => {
    server.close(() => process.exit(0));
    server.closeIdleConnections();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

void main();
