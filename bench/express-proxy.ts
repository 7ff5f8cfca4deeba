import http from 'node:http';
import express from 'express';
import { createProxyMiddleware } from 'http-proxy-middleware';

/**
 * Express 5 with http-proxy-middleware to the stub upstream and nothing else: no credential, no
 * whitelist, no limit. What an Express app pays for one proxied hop, the ceiling of any gateway
 * built on Express and a proxy (UPSTREAM_URL, PORT; listens on 127.0.0.1 only).
 */

const upstream = process.env.UPSTREAM_URL;
if (upstream === undefined || upstream === '') throw new Error('UPSTREAM_URL is required');

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
// Without an agent, http-proxy sends `Connection: close` and opens a connection per request.
const agent = new http.Agent({ keepAlive: true });
app.use(createProxyMiddleware({ target: upstream, agent }));

const port = Number(process.env.PORT ?? 8092);
const server = app.listen(port, '127.0.0.1', () => {
  console.log(`express + proxy listening on http://127.0.0.1:${port}`);
});
server.keepAliveTimeout = 65_000;
process.once('SIGTERM', () => {
  server.close();
  server.closeIdleConnections();
});
