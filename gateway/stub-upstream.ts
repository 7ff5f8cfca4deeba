import { randomUUID } from 'node:crypto';
import http from 'node:http';

/**
 * Stub payment handlers that stand in for the real payments service behind the gateway. They trust
 * the gateway's `X-Gateway-*` headers (the gateway strips any a client sends), keep a little state
 * per account in memory, and answer every route of the route table coherently. Plain node:http,
 * so benchmarks measure the gateway, not the stub.
 */

interface Payout {
  id: string;
  amount: number;
  currency: string;
  status: 'pending_approval' | 'approved';
  created_by: string;
  approved_by?: string;
}

interface Checkout {
  id: string;
  invoice_id: string;
  amount: number;
  currency: string;
  state: 'PENDING';
}

interface AccountState {
  payouts: Map<string, Payout>;
  checkouts: Map<string, Checkout>;
}

type Json = Record<string, unknown>;
type Reply = [status: number, body: Json];

const WALLETS = [
  {
    id: 'wal_kes_001',
    currency: 'KES',
    available_balance: '125000.00',
    current_balance: '130000.00',
  },
  { id: 'wal_usd_001', currency: 'USD', available_balance: '2100.50', current_balance: '2100.50' },
];
const TRANSACTIONS = [
  { id: 'txn_0001', type: 'collection', amount: '1500.00', currency: 'KES', state: 'COMPLETE' },
  { id: 'txn_0002', type: 'payout', amount: '-300.00', currency: 'KES', state: 'COMPLETE' },
];
const MAX_BODY_BYTES = 1024 * 1024;

export function createStubUpstream(): http.Server {
  const accounts = new Map<string, AccountState>();
  const stateOf = (account: string): AccountState => {
    let state = accounts.get(account);
    if (state === undefined) {
      state = { payouts: new Map(), checkouts: new Map() };
      accounts.set(account, state);
    }
    return state;
  };

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on('end', () => {
      const [status, body] = route(req, Buffer.concat(chunks), stateOf);
      const payload = JSON.stringify(body);
      res.writeHead(status, {
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(payload),
      });
      res.end(payload);
    });
  });
  server.keepAliveTimeout = 65_000;
  return server;
}

function route(
  req: http.IncomingMessage,
  raw: Buffer,
  stateOf: (account: string) => AccountState,
): Reply {
  const url = new URL(req.url ?? '/', 'http://upstream');
  const path = url.pathname.replace(/\/?$/, '/');
  const account = header(req, 'x-gateway-account-id');
  const keyId = header(req, 'x-gateway-key-id');
  if (account === undefined || keyId === undefined) {
    return [401, { error: 'missing gateway identity' }];
  }
  const body = parseBody(raw);
  const state = stateOf(account);
  const segments = path.split('/').filter((segment) => segment !== '');
  const [, , resource, id, action] = segments; // api, v1, resource, id?, action?
  // `payment/status` is a fixed path, not a resource id: without this it fell through to 404.
  // HEAD is answered as GET (Node drops the body), as the gateway's Allow headers promise.
  const method = req.method === 'HEAD' ? 'GET' : (req.method ?? '');
  const fixed = resource === 'payment' && id === 'status' && action === undefined;
  const key = fixed
    ? `${method} payment/status`
    : `${method} ${resource ?? ''}${id === undefined ? '' : '/:id'}${action === undefined ? '' : `/${action}`}`;

  switch (key) {
    case 'GET wallets':
      return [200, { account_id: account, wallets: WALLETS }];
    case 'GET transactions':
      return [200, { account_id: account, transactions: TRANSACTIONS, next_cursor: null }];
    case 'GET transactions/:id': {
      const transaction = TRANSACTIONS.find((item) => item.id === id);
      return transaction === undefined
        ? [404, { error: 'transaction not found' }]
        : [200, transaction];
    }
    case 'POST payment/status': {
      const invoiceId = body.invoice_id;
      if (typeof invoiceId !== 'string' || invoiceId === '')
        return [400, { error: 'invoice_id is required' }];
      const checkout = [...state.checkouts.values()].find((item) => item.invoice_id === invoiceId);
      return [
        200,
        { invoice_id: invoiceId, state: checkout?.state ?? 'COMPLETE', account_id: account },
      ];
    }
    case 'POST checkout': {
      const amount = Number(body.amount ?? 100);
      if (!Number.isFinite(amount) || amount <= 0)
        return [400, { error: 'amount must be positive' }];
      const checkout: Checkout = {
        id: `chk_${randomUUID().slice(0, 12)}`,
        invoice_id: `INV-${randomUUID().slice(0, 8).toUpperCase()}`,
        amount,
        currency: typeof body.currency === 'string' ? body.currency : 'KES',
        state: 'PENDING',
      };
      state.checkouts.set(checkout.id, checkout);
      return [201, { ...checkout }];
    }
    case 'GET checkout/:id': {
      const checkout = state.checkouts.get(id ?? '');
      return checkout === undefined
        ? [404, { error: 'checkout not found' }]
        : [200, { ...checkout }];
    }
    case 'POST payouts': {
      const amount = Number(body.amount ?? 0);
      if (!Number.isFinite(amount) || amount <= 0)
        return [400, { error: 'amount must be positive' }];
      const payout: Payout = {
        id: `po_${randomUUID().slice(0, 12)}`,
        amount,
        currency: typeof body.currency === 'string' ? body.currency : 'KES',
        status: 'pending_approval',
        created_by: keyId,
      };
      state.payouts.set(payout.id, payout);
      return [201, { ...payout }];
    }
    case 'POST payouts/:id/approve': {
      const payout = state.payouts.get(id ?? '');
      if (payout === undefined) return [404, { error: 'payout not found' }];
      if (payout.status === 'approved') return [409, { error: 'payout already approved' }];
      payout.status = 'approved';
      payout.approved_by = keyId;
      return [200, { ...payout }];
    }
    case 'POST otp/confirm':
      return typeof body.otp === 'string' && /^\d{4,8}$/.test(body.otp)
        ? [200, { status: 'confirmed' }]
        : [400, { error: 'otp must be 4 to 8 digits' }];
    case 'POST chargebacks':
      return [
        201,
        {
          id: `cb_${randomUUID().slice(0, 12)}`,
          status: 'open',
          transaction_id: body.transaction_id ?? null,
        },
      ];
    default:
      return [404, { error: 'no such route' }];
  }
}

function header(req: http.IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function parseBody(raw: Buffer): Json {
  if (raw.length === 0) return {};
  try {
    const value: unknown = JSON.parse(raw.toString('utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Json)
      : {};
  } catch {
    return {};
  }
}

/** Starts the stub on `host:port` (0: any free port) and resolves with its base URL. */
export async function startStubUpstream(
  host = '127.0.0.1',
  port = 0,
): Promise<{ server: http.Server; url: string }> {
  const server = createStubUpstream();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === 'string')
    throw new Error('stub upstream has no TCP address');
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return { server, url: `http://${shownHost}:${address.port}` };
}
