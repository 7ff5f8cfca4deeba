import http from 'node:http';
import express from 'express';
import { expressServerOptions } from '../lib';

/**
 * The floor: Express 5 alone answering the wallets JSON itself, no middlewares, no proxy, served
 * as `app.listen()` serves it. No gateway built on Express and served the same way can be faster
 * than this on the same machine. With FLOOR_BORN=1 the server is built with
 * `expressServerOptions(app)`, as the gateway's is: the floor for a gateway served that way.
 */

const WALLETS = [
  {
    id: 'wal_kes_001',
    currency: 'KES',
    available_balance: '125000.00',
    current_balance: '130000.00',
  },
  { id: 'wal_usd_001', currency: 'USD', available_balance: '2100.50', current_balance: '2100.50' },
];

const app = express();
app.disable('x-powered-by');
app.set('etag', false);
app.get('/api/v1/wallets/', (req, res) => {
  res.json({ account_id: req.get('x-gateway-account-id') ?? null, wallets: WALLETS });
});

const port = Number(process.env.PORT ?? 8091);
const born = process.env.FLOOR_BORN === '1';
const server = http.createServer(born ? expressServerOptions(app) : {}, app);
server.listen(port, '127.0.0.1', () => {
  console.log(
    `express floor${born ? ' (expressServerOptions)' : ''} listening on http://127.0.0.1:${port}`,
  );
});
server.keepAliveTimeout = 65_000;
process.once('SIGTERM', () => {
  server.close();
  server.closeIdleConnections();
});
