import { generateKey } from '../../lib/model/key-format';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import { expectErrorBody } from '../helpers/error-body';
import type { Fixtures, TestKey } from '../helpers/fixtures';
import { askAs } from '../helpers/forward-auth';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import { exchange, exchangeToken, sleep } from '../helpers/routes';

/**
 * A key's `expiresAt`, enforced when a credential is checked, through the gateway's
 * own routes and the forward-auth door: the key answers `401 expired_api_key` from its deadline on,
 * and tokens minted from it before stop working then (`401 invalid_token`).
 */

const LIFETIME_MS = 1500;

function testKey(id: string): TestKey {
  return {
    id,
    accountId: 'acct_expiry',
    role: 'administrator',
    publishableKey: generateKey('publishable', 'test'),
    secretKey: generateKey('secret', 'test'),
  };
}

describe('keys with expiresAt', () => {
  const expired = testKey('key_expired');
  const expiring = testKey('key_expiring');
  const lasting = testKey('key_lasting');
  let gateway: TestGateway;
  let expiringAt: number;

  beforeAll(async () => {
    expiringAt = Date.now() + LIFETIME_MS;
    const entry = (key: TestKey, expiresAt: number) => ({
      id: key.id,
      publishableKey: key.publishableKey,
      secretKeySha256: sha256(key.secretKey).toString('hex'),
      expiresAt: new Date(expiresAt).toISOString(),
    });
    const document = {
      accounts: [
        {
          id: 'acct_expiry',
          keys: [
            entry(expired, Date.now() - 1000),
            entry(expiring, expiringAt),
            entry(lasting, Date.now() + 3_600_000),
          ],
        },
      ],
    };
    const fixtures = {
      keys: { expired, expiring, lasting },
      document,
      ring: KeyRing.fromDocument(document, 'test'),
    } as unknown as Fixtures;
    gateway = await startTestGateway({ fixtures, trustProxy: ['127.0.0.1'] });
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('refuses a key past its deadline with 401 expired_api_key, whatever the credential', async () => {
    const secret = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(expired.secretKey),
    });
    expectErrorBody(secret, { status: 401, code: 'expired_api_key', message: 'Expired API key' });
    expect(secret.headers['www-authenticate']).toBe('Bearer');
    const publishable = await gateway.send({
      method: 'POST',
      path: '/api/v1/checkout/',
      headers: { 'x-service-public-api-key': expired.publishableKey },
    });
    expectErrorBody(publishable, { status: 401, code: 'expired_api_key' });
    expectErrorBody(await exchange(gateway, expired), { status: 401, code: 'expired_api_key' });
    expect(gateway.upstream.requests).toEqual([]);
  });

  it('refuses it through the forward-auth door too', async () => {
    for (const proxy of ['traefik', 'envoy'] as const) {
      const answer = await askAs(proxy, gateway, {
        method: 'GET',
        target: '/api/v1/wallets/',
        headers: bearer(expired.secretKey),
        clientIp: '198.51.100.20',
      });
      expectErrorBody(answer, { status: 401, code: 'expired_api_key' });
    }
  });

  it('keeps a key before its deadline, then refuses it and the tokens minted from it', async () => {
    const token = await exchangeToken(gateway, expiring);
    const before = await gateway.send({ path: '/api/v1/wallets/', headers: bearer(token) });
    expect(before.status).toBe(200);
    expect(
      (await gateway.send({ path: '/api/v1/wallets/', headers: bearer(expiring.secretKey) }))
        .status,
    ).toBe(200);

    await sleep(Math.max(0, expiringAt - Date.now()) + 50);

    const secret = await gateway.send({
      path: '/api/v1/wallets/',
      headers: bearer(expiring.secretKey),
    });
    expectErrorBody(secret, { status: 401, code: 'expired_api_key' });
    const afterToken = await gateway.send({ path: '/api/v1/wallets/', headers: bearer(token) });
    expectErrorBody(afterToken, { status: 401, code: 'invalid_token' });
    // A key with a later deadline is untouched.
    expect(
      (await gateway.send({ path: '/api/v1/wallets/', headers: bearer(lasting.secretKey) })).status,
    ).toBe(200);
  });
});
