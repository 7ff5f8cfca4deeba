import http from 'node:http';
import { clientErrorHandler, type ExpressPrototypes, expressServerOptions } from '../lib';

/**
 * The gateway's HTTP server: Node's settings chosen for a server facing hostile clients. A request
 * without `Host` reaches the app (which answers 400 with the JSON error body) instead of Node's
 * bare status line; requests Node's parser refuses get the JSON error body too; keep-alive outlives
 * a load balancer's idle timeout; a request must arrive whole within 30 s. Requests and responses
 * are born with the app's Express prototypes (`expressServerOptions`), which cuts the gateway's CPU
 * per request (figures in BENCHMARKS.md).
 */
export function createGatewayServer(app: http.RequestListener & ExpressPrototypes): http.Server {
  const server = http.createServer({ requireHostHeader: false, ...expressServerOptions(app) }, app);
  server.on('clientError', clientErrorHandler());
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.requestTimeout = 30_000;
  return server;
}
