import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import express from 'express';
import rateLimit from 'express-rate-limit';
import { createProxyMiddleware } from 'http-proxy-middleware';
import { Redis } from 'ioredis';
import ipRangeCheck from 'ip-range-check';
import { RedisStore, type RedisReply } from 'rate-limit-redis';

/**
 * The naive composition: what a payments team would write in ten lines with the same
 * libraries as the gateway. Express 5, a map from the SHA-256 of each secret key to its account,
 * ip-range-check against the account's whitelist, express-rate-limit (1,500 a minute per account,
 * the gateway's `payments` scope) with rate-limit-redis over ioredis, http-proxy-middleware to the
 * upstream (keep-alive) with the account header added and `Authorization` removed. Secret keys only (no
 * tokens, no roles, no failure budget, no request id): the bar the gateway is compared with.
 * KEYS_FILE (the gateway's keys file), REDIS_URL, REDIS_PREFIX, UPSTREAM_URL, PORT; listens on
 * 127.0.0.1 only.
 */

interface KeysFile {
  readonly accounts: readonly {
    readonly id: string;
    readonly ipWhitelist?: readonly string[];
    readonly keys: readonly { readonly id: string; readonly secretKeySha256: string }[];
  }[];
}

interface Holder {
  readonly accountId: string;
  readonly keyId: string;
  readonly whitelist: string[] | undefined;
}

function required(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === '') throw new Error(`${name} is required`);
  return value;
}

const document = JSON.parse(readFileSync(required('KEYS_FILE'), 'utf8')) as KeysFile;
const holders = new Map<string, Holder>();
for (const account of document.accounts) {
  for (const key of account.keys) {
    holders.set(key.secretKeySha256, {
      accountId: account.id,
      keyId: key.id,
      whitelist: account.ipWhitelist === undefined ? undefined : [...account.ipWhitelist],
    });
  }
}
const redis = new Redis(required('REDIS_URL'));

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.use((req, res, next) => {
  const header = req.get('authorization') ?? '';
  const key = header.startsWith('Bearer ') ? header.slice(7) : '';
  const holder = holders.get(createHash('sha256').update(key).digest('hex'));
  if (holder === undefined) {
    res.status(401).json({ error: 'unauthorized' });
    return;
  }
  if (holder.whitelist !== undefined && !ipRangeCheck(req.ip ?? '', holder.whitelist)) {
    res.status(403).json({ error: 'forbidden' });
    return;
  }
  res.locals.holder = holder;
  next();
});
app.use(
  rateLimit({
    windowMs: 60_000,
    limit: 1500,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    keyGenerator: (_req, res) => (res.locals.holder as Holder).accountId,
    store: new RedisStore({
      prefix: process.env.REDIS_PREFIX ?? 'naive:',
      sendCommand: (command: string, ...args: string[]) =>
        redis.call(command, ...args) as Promise<RedisReply>,
    }),
  }),
);
app.use(
  createProxyMiddleware({
    target: required('UPSTREAM_URL'),
    // Without an agent, http-proxy sends `Connection: close`: a connection per request.
    agent: new http.Agent({ keepAlive: true }),
    on: {
      proxyReq: (proxyReq, _req, res) => {
        const holder = res.locals.holder as Holder;
        proxyReq.removeHeader('authorization');
        proxyReq.setHeader('x-gateway-account-id', holder.accountId);
        proxyReq.setHeader('x-gateway-key-id', holder.keyId);
        proxyReq.setHeader('x-gateway-credential', 'secret');
      },
    },
  }),
);

const port = Number(process.env.PORT ?? 8094);
const server = app.listen(port, '127.0.0.1', () => {
  console.log(`naive composition listening on http://127.0.0.1:${port}`);
});
server.keepAliveTimeout = 65_000;
process.once('SIGTERM', () => {
  server.close();
  server.closeIdleConnections();
  redis.disconnect();
});
