import { createHash, generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  type KeysRead,
  parseKeysDocument,
  VerificationKeys,
} from '../../../gateway/secret-scanning/verification-keys';

/**
 * The secret-scanning programme's public keys as the gateway reads them: from a file and from a
 * loopback server that counts its reads, with locally made P-256 keys standing in for GitHub's.
 */

interface Signer {
  readonly id: string;
  readonly privateKey: KeyObject;
  readonly pem: string;
}

/** A signer identified as the programme's keys are: 64 hex digits (here, of its name). */
function signer(name: string): Signer {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const id = createHash('sha256').update(name).digest('hex');
  return { id, privateKey, pem: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
}

function documentOf(signers: readonly Signer[]): string {
  return JSON.stringify({
    public_keys: signers.map((s) => ({ key_identifier: s.id, key: s.pem, is_current: true })),
  });
}

function signatureOf(by: Signer, body: Buffer): string {
  return sign('sha256', body, { key: by.privateKey, dsaEncoding: 'der' }).toString('base64');
}

function pemOf(key: KeyObject): string {
  return key.export({ type: 'spki', format: 'pem' }).toString();
}

const BODY = Buffer.from('[{"token":"sk_live_x","type":"t","url":"u","source":"content"}]');

describe('the verification keys of secret scanning', () => {
  const current = signer('current');
  const next = signer('next');
  let folder: string;
  let file: string;

  beforeEach(() => {
    folder = mkdtempSync(path.join(tmpdir(), 'tollgate-scanning-'));
    file = path.join(folder, 'keys.json');
    writeFileSync(file, documentOf([current]));
  });
  afterEach(() => {
    rmSync(folder, { recursive: true, force: true });
  });

  it('verifies a signature over the raw body, and nothing else', async () => {
    const keys = new VerificationKeys({ file });
    expect(await keys.check(current.id, signatureOf(current, BODY), BODY)).toBe('verified');
    const other = Buffer.from(`${BODY.toString()} `);
    expect(await keys.check(current.id, signatureOf(current, BODY), other)).toBe('bad_signature');
    expect(await keys.check(current.id, signatureOf(next, BODY), BODY)).toBe('bad_signature');
    expect(await keys.check(current.id, 'bm90IERFUg==', BODY)).toBe('bad_signature');
    expect(await keys.check(current.id, '', BODY)).toBe('bad_signature');
    expect(await keys.check(next.id, signatureOf(next, BODY), BODY)).toBe('unknown_key');
  });

  it('reads again for an unknown identifier at most once per interval', async () => {
    const reads: KeysRead[] = [];
    const keys = new VerificationKeys({ file, refreshIntervalMs: 60_000 }, (read) =>
      reads.push(read),
    );
    expect(await keys.check(current.id, signatureOf(current, BODY), BODY)).toBe('verified');
    writeFileSync(file, documentOf([current, next]));
    // The first unknown identifier after the first read reads the file again and finds it.
    expect(await keys.check(next.id, signatureOf(next, BODY), BODY)).toBe('verified');
    const third = signer('third');
    writeFileSync(file, documentOf([current, next, third]));
    // Within the interval, another unknown identifier reads nothing.
    expect(await keys.check(third.id, signatureOf(third, BODY), BODY)).toBe('unknown_key');
    expect(reads).toEqual([
      { outcome: 'done', keys: 1 },
      { outcome: 'done', keys: 2 },
    ]);
  });

  it('shares one read of the URL among reports arriving together, and keeps keys it failed to read', async () => {
    let reads = 0;
    let failing = false;
    const server = http.createServer((_req, res) => {
      reads += 1;
      if (failing) {
        res.statusCode = 503;
        res.end();
        return;
      }
      res.setHeader('content-type', 'application/json');
      res.end(documentOf([current]));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${String((server.address() as AddressInfo).port)}/keys`;
    try {
      const failures: KeysRead[] = [];
      const keys = new VerificationKeys({ url, refreshIntervalMs: 0 }, (read) => {
        if (read.outcome === 'failed') failures.push(read);
      });
      const checks = await Promise.all(
        Array.from({ length: 10 }, () => keys.check(current.id, signatureOf(current, BODY), BODY)),
      );
      expect(checks).toEqual(Array.from({ length: 10 }, () => 'verified'));
      expect(reads).toBe(1);
      failing = true;
      // Perhaps listed in the document not read: not checkable now, not unknown.
      expect(await keys.check(signer('unknown').id, signatureOf(next, BODY), BODY)).toBe(
        'keys_unavailable',
      );
      expect(reads).toBe(2);
      expect(failures).toEqual([{ outcome: 'failed', reason: 'the keys URL answered 503' }]);
      expect(await keys.check(current.id, signatureOf(current, BODY), BODY)).toBe('verified');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('tells a key the document cannot be read for from a key it does not list', async () => {
    type Serving = 'down' | 'error' | 'unparsable' | 'document';
    let serving: Serving = 'down';
    const server = http.createServer((req, res) => {
      if (serving === 'down') {
        // No answer at all: the connection is cut, as an unreachable server's would be.
        req.socket.destroy();
        return;
      }
      if (serving === 'error') {
        res.statusCode = 502;
        res.end('Bad Gateway');
        return;
      }
      res.setHeader('content-type', 'application/json');
      res.end(serving === 'unparsable' ? '{"public_keys": [' : documentOf([current]));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${String((server.address() as AddressInfo).port)}/keys`;
    try {
      const keys = new VerificationKeys({ url, refreshIntervalMs: 0 });
      const signed = signatureOf(current, BODY);
      for (const failure of ['down', 'error', 'unparsable'] as const) {
        serving = failure;
        expect({ failure, check: await keys.check(current.id, signed, BODY) }).toEqual({
          failure,
          check: 'keys_unavailable',
        });
        // An identifier the programme never uses cannot be listed: refused as unknown.
        expect(await keys.check('made-up', signed, BODY)).toBe('unknown_key');
      }
      serving = 'document';
      expect(await keys.check(current.id, signed, BODY)).toBe('verified');
      // The document read, an identifier it does not list is unknown.
      expect(await keys.check(next.id, signatureOf(next, BODY), BODY)).toBe('unknown_key');
      // The document unreadable again, a key already known still verifies.
      serving = 'error';
      expect(await keys.check(next.id, signatureOf(next, BODY), BODY)).toBe('keys_unavailable');
      expect(await keys.check(current.id, signed, BODY)).toBe('verified');
      expect(await keys.check(current.id, signatureOf(next, BODY), BODY)).toBe('bad_signature');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('asks for a report again once the document may be read again', async () => {
    const server = http.createServer((_req, res) => {
      res.statusCode = 500;
      res.end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${String((server.address() as AddressInfo).port)}/keys`;
    try {
      const keys = new VerificationKeys({ url, refreshIntervalMs: 60_000 });
      const signed = signatureOf(current, BODY);
      // The first read, then the one right after it: each may happen at once.
      expect(await keys.check(current.id, signed, BODY)).toBe('keys_unavailable');
      expect(keys.retryAfterSeconds()).toBe(1);
      expect(await keys.check(current.id, signed, BODY)).toBe('keys_unavailable');
      // Then at most one read a minute.
      expect(keys.retryAfterSeconds()).toBeGreaterThan(55);
      expect(keys.retryAfterSeconds()).toBeLessThanOrEqual(60);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('refuses a document that is not a public-keys list, and skips keys that are not ECDSA P-256', () => {
    const { publicKey: rsa } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const { publicKey: p384 } = generateKeyPairSync('ec', { namedCurve: 'secp384r1' });
    expect(() => parseKeysDocument('{}')).toThrow('no public_keys list');
    expect(() => parseKeysDocument('{"public_keys":[{"key":"x"}]}')).toThrow('lacks');
    const text = JSON.stringify({
      public_keys: [
        { key_identifier: 'rsa', key: pemOf(rsa) },
        { key_identifier: 'p384', key: pemOf(p384) },
        { key_identifier: 'unreadable', key: 'not a PEM' },
        ...(JSON.parse(documentOf([current, next])) as { public_keys: unknown[] }).public_keys,
      ],
    });
    const document = parseKeysDocument(text);
    expect([...document.keys.keys()]).toEqual([current.id, next.id]);
    expect(document.skipped).toEqual(['rsa', 'p384', 'unreadable']);
  });

  it('learns new P-256 keys beside a key of another type, logging that one once', async () => {
    const { publicKey: rsa } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const rsaId = createHash('sha256').update('rsa').digest('hex');
    const withRsa = (signers: readonly Signer[]): string =>
      JSON.stringify({
        public_keys: [
          { key_identifier: rsaId, key: pemOf(rsa), is_current: false },
          ...(JSON.parse(documentOf(signers)) as { public_keys: unknown[] }).public_keys,
        ],
      });
    writeFileSync(file, withRsa([current]));
    const reads: KeysRead[] = [];
    const keys = new VerificationKeys({ file, refreshIntervalMs: 0 }, (read) => reads.push(read));
    expect(await keys.check(current.id, signatureOf(current, BODY), BODY)).toBe('verified');
    writeFileSync(file, withRsa([current, next]));
    expect(await keys.check(next.id, signatureOf(next, BODY), BODY)).toBe('verified');
    expect(reads).toEqual([
      { outcome: 'skipped', identifier: rsaId },
      { outcome: 'done', keys: 1 },
      { outcome: 'done', keys: 2 },
    ]);
  });

  it('stops trusting a key the programme withdrew, once every source has been read', async () => {
    const keys = new VerificationKeys({ file, refreshIntervalMs: 0 });
    expect(await keys.check(current.id, signatureOf(current, BODY), BODY)).toBe('verified');
    writeFileSync(file, documentOf([next]));
    expect(await keys.check(next.id, signatureOf(next, BODY), BODY)).toBe('verified');
    expect(await keys.check(current.id, signatureOf(current, BODY), BODY)).toBe('unknown_key');
  });

  it("reads nothing again for an identifier not shaped as the programme's", async () => {
    const reads: KeysRead[] = [];
    const keys = new VerificationKeys({ file, refreshIntervalMs: 0 }, (read) => reads.push(read));
    expect(await keys.check(current.id, signatureOf(current, BODY), BODY)).toBe('verified');
    for (const madeUp of ['made-up', 'g'.repeat(64), `${current.id}0`]) {
      expect(await keys.check(madeUp, signatureOf(current, BODY), BODY)).toBe('unknown_key');
    }
    expect(await keys.check(next.id, signatureOf(next, BODY), BODY)).toBe('unknown_key');
    expect(reads).toEqual([
      { outcome: 'done', keys: 1 },
      { outcome: 'done', keys: 1 },
    ]);
  });
});
