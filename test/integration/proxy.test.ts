import type { IncomingHttpHeaders } from 'node:http';
import net from 'node:net';
import { expectErrorBody } from '../helpers/error-body';
import { allSecrets } from '../helpers/fixtures';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import { findLeaks } from '../helpers/logs';
import { exchangeToken } from '../helpers/routes';

/** Proxying: what the upstream receives, and what comes back from it. */

const PK_HEADER = 'X-Service-Public-API-Key';

/** Identity and forwarding headers a client might send to impersonate someone. */
const FORGED_HEADERS = {
  'X-Gateway-Account-Id': 'acct_walled',
  'X-Gateway-Key-Id': 'key_walled',
  'X-Gateway-Role': 'administrator',
  'X-Gateway-Credential': 'secret',
  'X-Gateway-Anything': 'forged',
  'X-Request-Id': 'client-chosen-request-id',
  'X-Forwarded-For': '203.0.113.9',
  'X-Forwarded-Host': 'evil.example',
  'X-Forwarded-Proto': 'https',
  Forwarded: 'for=203.0.113.9;host=evil.example',
  'X-Real-IP': '203.0.113.9',
};

describe('proxying to the upstream', () => {
  let gateway: TestGateway;
  const tokens: string[] = [];

  beforeAll(async () => {
    gateway = await startTestGateway();
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    gateway.upstream.reset();
    expect(
      findLeaks(gateway.logs.lines.join('\n'), [...allSecrets(gateway.fixtures), ...tokens]),
    ).toEqual([]);
  });

  const credentials = [
    [
      'secret',
      (g: TestGateway): Record<string, string> => bearer(g.fixtures.keys.level2.secretKey),
    ],
    ['token', (_g: TestGateway): Record<string, string> => bearer(tokens[0] ?? '')],
    [
      'publishable',
      (g: TestGateway): Record<string, string> => ({
        [PK_HEADER]: g.fixtures.keys.level2.publishableKey,
      }),
    ],
  ] as const;

  beforeAll(async () => {
    tokens.push(await exchangeToken(gateway, gateway.fixtures.keys.level2));
  });

  it.each(credentials)(
    "with a %s credential the upstream gets the gateway identity headers and none of the client's",
    async (kind, headersOf) => {
      const key = gateway.fixtures.keys.level2;
      const result = await gateway.send({
        method: 'POST',
        path: '/api/v1/payment/status/?x=1',
        headers: { ...headersOf(gateway), ...FORGED_HEADERS, 'X-Custom-Header': 'kept' },
        body: { invoice_id: 'inv_7' },
      });
      expect(result.status).toBe(200);
      expect(gateway.upstream.requests).toHaveLength(1);
      const headers: IncomingHttpHeaders = gateway.upstream.requests[0]?.headers ?? {};
      expect(headers['x-gateway-account-id']).toBe(key.accountId);
      expect(headers['x-gateway-key-id']).toBe(key.id);
      expect(headers['x-gateway-role']).toBe(key.role);
      expect(headers['x-gateway-credential']).toBe(kind);
      expect(headers['x-request-id']).toBe(result.headers['x-request-id']);
      expect(result.headers['x-request-id']).not.toBe(FORGED_HEADERS['X-Request-Id']);
      expect(headers['x-custom-header']).toBe('kept');

      for (const name of [
        'authorization',
        PK_HEADER.toLowerCase(),
        'x-gateway-anything',
        'x-forwarded-for',
        'x-forwarded-host',
        'x-forwarded-proto',
        'forwarded',
        'x-real-ip',
      ]) {
        expect({ name, value: headers[name] }).toEqual({ name, value: undefined });
      }
      const everything = JSON.stringify(headers);
      expect(everything).not.toContain('acct_walled');
      expect(everything).not.toContain('203.0.113.9');
      expect(everything).not.toContain('client-chosen-request-id');
      expect(findLeaks(everything, [...allSecrets(gateway.fixtures), ...tokens])).toEqual([]);
    },
  );

  it('a publishable key sent in the body reaches the upstream only as part of the unchanged body', async () => {
    const body = `{"public_key":${JSON.stringify(gateway.fixtures.keys.level1.publishableKey)},"invoice_id":"inv_8"}`;
    const result = await gateway.send({
      method: 'POST',
      path: '/api/v1/payment/status/',
      headers: { 'content-type': 'application/json' },
      body,
    });
    expect(result.status).toBe(200);
    expect(gateway.upstream.requests[0]?.body.toString('utf8')).toBe(body);
    expect(gateway.upstream.requests[0]?.headers['x-gateway-credential']).toBe('publishable');
  });

  it('method, path, query and body reach the upstream unchanged, encoded characters included', async () => {
    const path = '/api/v1/payment/status/?q=a%20b&x=%2F&x=2&empty=&flag';
    const body = '{"invoice_id":"inv_é\\u00e9",  "n":1e3}';
    const result = await gateway.send({
      method: 'POST',
      path,
      headers: {
        ...bearer(gateway.fixtures.keys.admin.secretKey),
        'content-type': 'application/json; charset=utf-8',
      },
      body,
    });
    expect(result.status).toBe(200);
    expect(gateway.upstream.requests[0]).toMatchObject({ method: 'POST', url: path });
    expect(gateway.upstream.requests[0]?.body.equals(Buffer.from(body))).toBe(true);
    expect(gateway.upstream.requests[0]?.headers['content-type']).toBe(
      'application/json; charset=utf-8',
    );
  });

  it.each([
    [201, 'application/json', '{"id":"po_1", "status":"pending_approval"}'],
    [404, 'application/json', '{"error":"payout not found"}'],
    [409, 'application/problem+json', '{"title":"already approved"}'],
    [500, 'text/plain', 'upstream exploded'],
    [503, 'text/html', '<h1>maintenance</h1>'],
  ])(
    'an upstream %i (%s) streams back unchanged, not as a gateway error',
    async (status, contentType, text) => {
      gateway.upstream.respond = (_request, res) => {
        res.writeHead(status, {
          'content-type': contentType,
          'x-upstream-header': 'present',
          'x-request-id': 'upstream-id',
        });
        res.end(text);
      };
      const result = await gateway.send({
        method: 'POST',
        path: '/api/v1/payouts/',
        headers: bearer(gateway.fixtures.keys.admin.secretKey),
        body: { amount: 5 },
      });
      expect(result.status).toBe(status);
      expect(result.text).toBe(text);
      expect(result.headers['content-type']).toBe(contentType);
      expect(result.headers['x-upstream-header']).toBe('present');
      expect(result.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
      expect(result.headers['x-request-id']).toBe(
        gateway.upstream.requests[0]?.headers['x-request-id'],
      );
    },
  );

  it('a large chunked upstream body streams back byte for byte', async () => {
    const chunk = Buffer.alloc(64 * 1024, 'abcdefgh');
    const chunks = 16;
    gateway.upstream.respond = (_request, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      let sent = 0;
      const next = (): void => {
        if (sent === chunks) {
          res.end();
          return;
        }
        sent += 1;
        res.write(chunk, next);
      };
      next();
    };
    const result = await gateway.send({
      path: '/api/v1/transactions/',
      headers: bearer(gateway.fixtures.keys.admin.secretKey),
    });
    expect(result.status).toBe(200);
    expect(result.headers['transfer-encoding']).toBe('chunked');
    expect(Buffer.byteLength(result.text)).toBe(chunk.length * chunks);
    expect(result.text).toBe(chunk.toString('utf8').repeat(chunks));
  });

  /** A raw request with the admin's secret key: the socket, once the answer's head has arrived. */
  async function openStream(): Promise<{ socket: net.Socket; received: () => number }> {
    const socket = net.connect(gateway.port, '127.0.0.1');
    let head = '';
    let bodyBytes = 0;
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.on('data', (chunk: Buffer) => {
        if (!head.includes('\r\n\r\n')) {
          head += chunk.toString('latin1');
          const end = head.indexOf('\r\n\r\n');
          if (end !== -1) {
            bodyBytes += head.length - end - 4;
            resolve();
          }
        } else bodyBytes += chunk.length;
      });
      socket.write(
        'GET /api/v1/transactions/ HTTP/1.1\r\nHost: gateway\r\n' +
          `Authorization: Bearer ${gateway.fixtures.keys.admin.secretKey}\r\n\r\n`,
      );
    });
    expect(head).toMatch(/^HTTP\/1\.1 200 /);
    return { socket, received: () => bodyBytes };
  }

  /** The upstream writes `total` bytes as fast as its connection takes them; says when it is done. */
  function streamFromUpstream(total: number): { written: () => number; closed: Promise<boolean> } {
    let written = 0;
    let resolveClosed: (finished: boolean) => void = () => undefined;
    const closed = new Promise<boolean>((resolve) => {
      resolveClosed = resolve;
    });
    gateway.upstream.respond = (_request, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(64 * 1024, 'x');
      const pump = (): void => {
        while (written < total) {
          written += chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        res.end();
      };
      res.on('close', () => {
        resolveClosed(res.writableFinished);
      });
      pump();
    };
    return { written: () => written, closed };
  }

  it("passes a slow client's backpressure to the upstream instead of buffering the body", async () => {
    const total = 256 * 1024 * 1024;
    const upstream = streamFromUpstream(total);
    const { socket, received } = await openStream();
    socket.pause();
    await new Promise((resolve) => setTimeout(resolve, 500));
    // Socket buffers on both hops hold a few megabytes at most; the rest waits at the upstream.
    const whilePaused = upstream.written();
    expect(whilePaused).toBeLessThan(32 * 1024 * 1024);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(upstream.written()).toBe(whilePaused);
    socket.resume();
    await expect(upstream.closed).resolves.toBe(true);
    await new Promise<void>((resolve) => {
      const check = (): void => {
        if (received() >= total) resolve();
        else setTimeout(check, 20);
      };
      check();
    });
    expect(received()).toBeGreaterThanOrEqual(total);
    socket.destroy();
  });

  it('a client that hangs up while the body streams cancels the upstream request', async () => {
    const upstream = streamFromUpstream(256 * 1024 * 1024);
    const { socket } = await openStream();
    socket.destroy();
    // The upstream's answer is cut off (closed unfinished), not written out to nobody.
    await expect(upstream.closed).resolves.toBe(false);
    expect(upstream.written()).toBeLessThan(256 * 1024 * 1024);
    const after = await gateway.send({
      path: '/api/v1/transactions/',
      headers: bearer(gateway.fixtures.keys.admin.secretKey),
    });
    expect(after.status).toBe(200);
  });
});

describe('a custom publicKeyHeader', () => {
  const CUSTOM = 'X-Acme-Public-Key';
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway({ publicKeyHeader: CUSTOM });
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    gateway.upstream.reset();
  });

  it('authenticates publishable keys sent in that header, and strips it before the upstream', async () => {
    const key = gateway.fixtures.keys.level1;
    const result = await gateway.send({
      method: 'POST',
      path: '/api/v1/checkout/',
      headers: { [CUSTOM]: key.publishableKey },
      body: { amount: 3 },
    });
    expect(result.status).toBe(200);
    const forwarded = gateway.upstream.requests[0]?.headers ?? {};
    expect(forwarded['x-gateway-credential']).toBe('publishable');
    expect(forwarded['x-gateway-key-id']).toBe(key.id);
    expect(forwarded[CUSTOM.toLowerCase()]).toBeUndefined();
  });

  it('no longer accepts the default header: 401 missing_credentials, upstream not called', async () => {
    const result = await gateway.send({
      method: 'POST',
      path: '/api/v1/checkout/',
      headers: { [PK_HEADER]: gateway.fixtures.keys.level1.publishableKey },
      body: { amount: 3 },
    });
    expectErrorBody(result, {
      status: 401,
      code: 'missing_credentials',
      message: 'Authentication required',
    });
    expect(gateway.upstream.requests).toHaveLength(0);
  });

  it('still accepts public_key in the body', async () => {
    const result = await gateway.send({
      method: 'POST',
      path: '/api/v1/payment/status/',
      body: { public_key: gateway.fixtures.keys.level1.publishableKey, invoice_id: 'inv_1' },
    });
    expect(result.status).toBe(200);
  });

  it('refuses the custom header together with a Bearer credential (400)', async () => {
    const result = await gateway.send({
      method: 'POST',
      path: '/api/v1/payment/status/',
      headers: {
        [CUSTOM]: gateway.fixtures.keys.level1.publishableKey,
        ...bearer(gateway.fixtures.keys.level1.secretKey),
      },
      body: { invoice_id: 'inv_1' },
    });
    expectErrorBody(result, { status: 400, code: 'invalid_request' });
  });
});
