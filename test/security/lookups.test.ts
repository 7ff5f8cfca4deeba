import express, { type RequestHandler } from 'express';
import request from 'supertest';
import { authenticate } from '../../lib/express/authenticate';
import { errorHandler } from '../../lib/express/error-handler';
import { jsonBody } from '../../lib/express/json-body';
import type { KeyRecord, KeyStore } from '../../lib/keys/key-store';
import { authenticateKeyPair } from '../../lib/express/token-exchange';
import { MAX_TOKEN_LENGTH, TokenService } from '../../lib/tokens/tokens';
import { createFixtures, TOKEN_SECRET } from '../helpers/fixtures';

/**
 * Values that cannot be keys are refused before the key store is asked: a typed key whose checksum
 * is wrong, a value of the wrong length or characters, an oversized header. Keys of other shapes
 * are still looked up, so keys made by other tools keep working.
 */

/** A key store that counts the lookups it answers. */
class CountingKeyStore implements KeyStore {
  lookups = 0;
  constructor(private readonly inner: KeyStore) {}
  findBySecretKey(secretKey: string): ReturnType<KeyStore['findBySecretKey']> {
    this.lookups++;
    return this.inner.findBySecretKey(secretKey);
  }
  findByKeyPair(publishableKey: string, secretKey: string): ReturnType<KeyStore['findByKeyPair']> {
    this.lookups++;
    return this.inner.findByKeyPair(publishableKey, secretKey);
  }
  findByPublishableKey(publishableKey: string): ReturnType<KeyStore['findByPublishableKey']> {
    this.lookups++;
    return this.inner.findByPublishableKey(publishableKey);
  }
  findById(keyId: string): KeyRecord | undefined {
    this.lookups++;
    return this.inner.findById(keyId);
  }
}

const fixtures = createFixtures();
const { keys } = fixtures;
const store = new CountingKeyStore(fixtures.ring);
const tokens = new TokenService({ secret: TOKEN_SECRET });

function appWith(auth: RequestHandler): express.Express {
  const app = express();
  app.post('/', jsonBody(), auth, (_req, res) => {
    res.json({ ok: true });
  });
  app.use(errorHandler());
  return app;
}

const bearerApp = appWith(
  authenticate({ keyStore: store, tokens, accept: ['secret', 'token', 'publishable'] }),
);
const pairApp = appWith(authenticateKeyPair({ keyStore: store }));

/** The same key with its checksum's last character changed. */
const badChecksum = (key: string): string => `${key.slice(0, -1)}${key.endsWith('0') ? '1' : '0'}`;

describe('values refused before any key lookup', () => {
  beforeEach(() => {
    store.lookups = 0;
  });

  it.each([
    [
      'a typed secret key with a wrong checksum',
      () => `Bearer ${badChecksum(keys.admin.secretKey)}`,
    ],
    ['a value shorter than any key', () => 'Bearer sk_short'],
    ['a value longer than any key', () => `Bearer ${'k'.repeat(201)}`],
    ['an Authorization value over the length cap', () => `Bearer ${'k'.repeat(MAX_TOKEN_LENGTH)}`],
    ['a publishable key sent as a Bearer secret', () => `Bearer ${keys.admin.publishableKey}`],
  ])('Authorization with %s: 401, no lookup', async (_name, header) => {
    const response = await request(bearerApp).post('/').set('Authorization', header());
    expect(response.status).toBe(401);
    expect(store.lookups).toBe(0);
  });

  it('a publishable key with a wrong checksum: 401, no lookup', async () => {
    const response = await request(bearerApp)
      .post('/')
      .set('X-Service-Public-API-Key', badChecksum(keys.admin.publishableKey));
    expect(response.status).toBe(401);
    expect(store.lookups).toBe(0);
  });

  it.each([
    [
      'a secret with a wrong checksum',
      () => ({ api_key: keys.admin.publishableKey, api_secret: badChecksum(keys.admin.secretKey) }),
    ],
    [
      'a publishable key with a wrong checksum',
      () => ({ api_key: badChecksum(keys.admin.publishableKey), api_secret: keys.admin.secretKey }),
    ],
    [
      'a secret of the wrong length',
      () => ({ api_key: keys.admin.publishableKey, api_secret: 'too-short' }),
    ],
    [
      'a secret with a control character',
      () => ({ api_key: keys.admin.publishableKey, api_secret: `${keys.admin.secretKey}\n` }),
    ],
  ])('a key pair with %s: 401 invalid_credentials, no lookup', async (_name, body) => {
    const response = await request(pairApp).post('/').send(body());
    expect(response.status).toBe(401);
    expect(response.body).toMatchObject({ code: 'invalid_credentials' });
    expect(store.lookups).toBe(0);
  });

  it('still looks up, and accepts, keys of other shapes', async () => {
    const bearer = await request(bearerApp)
      .post('/')
      .set('Authorization', `Bearer ${keys.foreign.secretKey}`);
    const pair = await request(pairApp)
      .post('/')
      .send({ api_key: keys.foreign.publishableKey, api_secret: keys.foreign.secretKey });
    expect([bearer.status, pair.status]).toEqual([200, 200]);
    expect(store.lookups).toBe(2);
  });
});
