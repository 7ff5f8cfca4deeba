import express from 'express';
import request from 'supertest';
import { authenticate } from '../../lib/express/authenticate';
import { errorHandler } from '../../lib/express/error-handler';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import { requestId } from '../../lib/express/request-context';
import { TokenService } from '../../lib/tokens/tokens';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';
import { TOKEN_SECRET } from '../helpers/fixtures';

/**
 * Credentials of unusual but legitimate shapes: a secret key of another tool with two dots in it
 * (the token's shape), and requests from Node's own fetch, which sends `Sec-Fetch-Mode: cors`.
 */

const DOTTED_SECRET = 'legacy.secret.KEY0123456789abcdef';

function dottedKeyRing(): KeyRing {
  return KeyRing.fromDocument({
    accounts: [
      {
        id: 'acct_legacy',
        keys: [
          {
            id: 'key_legacy',
            publishableKey: 'legacy-publishable-0123456789',
            secretKeySha256: sha256(DOTTED_SECRET).toString('hex'),
            role: 'level-2',
          },
        ],
      },
    ],
  });
}

describe('a secret key that has the shape of a token', () => {
  const tokens = new TokenService({ secret: TOKEN_SECRET });
  const appAccepting = (accept: ('secret' | 'token')[]) => {
    const app = express();
    app.use(requestId());
    app.get('/', authenticate({ keyStore: dottedKeyRing(), tokens, accept }), (req, res) => {
      res.json({ keyId: req.auth?.keyId, credential: req.auth?.credential });
    });
    app.use(errorHandler());
    return app;
  };

  it('authenticates as the secret key where secret keys and tokens are accepted', async () => {
    const response = await request(appAccepting(['secret', 'token']))
      .get('/')
      .set(bearer(DOTTED_SECRET));
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ keyId: 'key_legacy', credential: 'secret' });
  });

  it('authenticates as the secret key where only secret keys are accepted', async () => {
    const response = await request(appAccepting(['secret']))
      .get('/')
      .set(bearer(DOTTED_SECRET));
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ keyId: 'key_legacy', credential: 'secret' });
  });

  it('is still a bad token when no key has that value: 401 invalid_token', async () => {
    const response = await request(appAccepting(['secret', 'token']))
      .get('/')
      .set(bearer('legacy.secret.KEY0123456789abcdeX'));
    expect(response.status).toBe(401);
    expect(response.body).toMatchObject({ code: 'invalid_token' });
  });

  it('does not let a real token through where only secret keys are accepted', async () => {
    const { token } = tokens.issue({ id: 'key_legacy', accountId: 'acct_legacy', role: 'level-2' });
    const response = await request(appAccepting(['secret']))
      .get('/')
      .set(bearer(token));
    expect(response.status).toBe(401);
    expect(response.body).toMatchObject({ code: 'credential_not_allowed' });
  });
});

describe("requests from Node's own fetch", () => {
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await startTestGateway();
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('authenticate with a secret key (fetch sends Sec-Fetch-Mode, which is not a browser signal)', async () => {
    const response = await fetch(`${gateway.url}/api/v1/wallets/`, {
      headers: bearer(gateway.fixtures.keys.admin.secretKey),
    });
    expect(response.status).toBe(200);
    expect(gateway.upstream.requests).toHaveLength(1);
  });

  it('exchange a key pair for a token', async () => {
    const { admin } = gateway.fixtures.keys;
    const response = await fetch(`${gateway.url}/api/v1/auth/generate-token/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ api_key: admin.publishableKey, api_secret: admin.secretKey }),
    });
    expect(response.status).toBe(200);
  });
});
