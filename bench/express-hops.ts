import http from 'node:http';
import express from 'express';
import { Redis } from 'ioredis';
import { createProxy } from '../gateway/proxy';
import { type AuthContext, expressServerOptions } from '../lib';

/**
 * The gateway's hops without its checks: Express 5 with its server built as the gateway's is
 * (`expressServerOptions`), one Redis round trip per request (a `SET` of one key that expires in
 * a minute, where the gateway's limits send one `EVALSHA`), and the gateway's own proxy
 * (`gateway/proxy.ts`) to the stub upstream with a fixed identity. No credential, whitelist,
 * role, limit, request id or log: what any gateway of this shape pays before its first check
 * (REDIS_URL, UPSTREAM_URL, PORT; listens on 127.0.0.1 only).
 */

function required(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === '') throw new Error(`${name} is required`);
  return value;
}

const IDENTITY: AuthContext = {
  accountId: 'acct_hops',
  keyId: 'key_hops',
  role: 'level-1',
  credential: 'secret',
};
const KEY = `tollgate-bench:hops:${process.pid}`;

const redis = new Redis(required('REDIS_URL'));
const proxy = createProxy({
  upstreamUrl: required('UPSTREAM_URL'),
  timeoutMs: 10_000,
  publicKeyHeader: 'x-public-key',
});

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.use((req, _res, next) => {
  req.auth = IDENTITY;
  redis.set(KEY, '1', 'PX', 60_000).then(
    () => {
      next();
    },
    (error: unknown) => {
      next(error);
    },
  );
});
app.use(proxy.handler);

const port = Number(process.env.PORT ?? 8093);
const server = http.createServer(expressServerOptions(app), app);
server.listen(port, '127.0.0.1', () => {
  console.log(`express + redis + proxy listening on http://127.0.0.1:${port}`);
});
server.keepAliveTimeout = 65_000;
process.once('SIGTERM', () => {
  server.close();
  server.closeIdleConnections();
  proxy.close();
  redis.disconnect();
});
