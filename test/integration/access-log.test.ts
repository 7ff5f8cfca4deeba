import { startTestGateway, type TestGateway, bearer } from '../helpers/gateway';
import { allSecrets } from '../helpers/fixtures';
import { findLeaks } from '../helpers/logs';

/**
 * The access log: one line per request with the decision folded in, refusals at
 * `info`, the probes (`/healthz`, `/readyz`) not logged at `info`, and no secret in any line.
 */

describe('the access log', () => {
  let gateway: TestGateway;

  beforeAll(async () => {
    gateway = await startTestGateway();
  });
  afterAll(async () => {
    await gateway.close();
  });
  beforeEach(() => {
    gateway.logs.clear();
  });

  const linesOf = (requestId: string): Record<string, unknown>[] =>
    gateway.logs.entries().filter((entry) => entry.request_id === requestId);

  it('writes exactly one line for an allowed request, with the decision folded in', async () => {
    const { keys } = gateway.fixtures;
    const result = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(keys.level2.secretKey),
    });
    expect(result.status).toBe(200);
    const lines = linesOf(String(result.headers['x-request-id']));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 'info',
      event: 'http.request',
      method: 'GET',
      path: '/api/v1/wallets/',
      route: 'GET /api/v1/wallets/',
      status: 200,
      outcome: 'allowed',
      account_id: 'acct_open',
      key_id: 'key_l2',
      credential: 'secret',
      role: 'level-2',
      rate_limits: 'memory',
      client_ip: '127.0.0.1',
    });
    expect(lines[0]?.duration_ms).toEqual(expect.any(Number));
  });

  it('logs a refusal at info, once, with its code', async () => {
    const result = await gateway.send({ path: '/api/v1/wallets/' });
    expect(result.status).toBe(401);
    expect(linesOf(String(result.headers['x-request-id']))).toEqual([
      expect.objectContaining({
        level: 'info',
        outcome: 'refused',
        reason: 'missing_credentials',
        status: 401,
      }),
    ]);
    expect(gateway.logs.entries().filter((entry) => entry.level !== 'info')).toEqual([]);
  });

  it('does not log /healthz or /readyz at info', async () => {
    for (const path of ['/healthz', '/readyz']) {
      const result = await gateway.send({ path });
      expect(result.status).toBe(200);
    }
    expect(gateway.logs.lines).toEqual([]);
  });

  it('never writes a secret', async () => {
    const { keys } = gateway.fixtures;
    await gateway.send({ path: `/api/v1/wallets/${keys.admin.secretKey}/` });
    await gateway.send({ path: '/api/v1/wallets/', headers: bearer(keys.admin.secretKey) });
    expect(findLeaks(gateway.logs.lines.join('\n'), allSecrets(gateway.fixtures))).toEqual([]);
  });
});
