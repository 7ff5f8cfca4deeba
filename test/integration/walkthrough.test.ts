import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import { allSecrets } from '../helpers/fixtures';
import { findLeaks } from '../helpers/logs';

describe('the walk-through of the sample gateway', () => {
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await startTestGateway();
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('exchanges a key pair for a token, reads wallets with it, and leaks nothing', async () => {
    const { admin } = gateway.fixtures.keys;
    const exchange = await gateway.send({
      method: 'POST',
      path: '/api/v1/auth/generate-token/',
      body: { api_key: admin.publishableKey, api_secret: admin.secretKey },
    });
    expect(exchange.status).toBe(200);
    expect(exchange.body).toMatchObject({ token_type: 'Bearer', expires_in: 1800 });
    const token = exchange.body?.token as string;

    const wallets = await gateway.send({ path: '/api/v1/wallets/', headers: bearer(token) });
    expect(wallets.status).toBe(200);
    const forwarded = gateway.upstream.requests.at(-1);
    expect(forwarded?.headers['x-gateway-account-id']).toBe('acct_open');
    expect(forwarded?.headers['x-gateway-credential']).toBe('token');
    expect(forwarded?.headers.authorization).toBeUndefined();

    expect(
      findLeaks(gateway.logs.lines.join('\n'), [...allSecrets(gateway.fixtures), token]),
    ).toEqual([]);
  });
});
