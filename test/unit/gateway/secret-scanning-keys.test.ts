import { generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
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

function signer(id: string): Signer {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
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
    expect(await keys.check('current', signatureOf(current, BODY), BODY)).toBe('verified');
    const other = Buffer.from(`${BODY.toString()} `);
    expect(await keys.check('current', signatureOf(current, BODY), other)).toBe('bad_signature');
    expect(await keys.check('current', signatureOf(next, BODY), BODY)).toBe('bad_signature');
    expect(await keys.check('current', 'bm90IERFUg==', BODY)).toBe('bad_signature');
    expect(await keys.check('current', '', BODY)).toBe('bad_signature');
    expect(await keys.check('next', signatureOf(next, BODY), BODY)).toBe('unknown_key');
  });

  it('reads again for an unknown identifier at most once per interval', async () => {
    const reads: KeysRead[] = [];
    const keys = new VerificationKeys({ file, refreshIntervalMs: 60_000 }, (read) =>
      reads.push(read),
    );
    expect(await keys.check('current', signatureOf(current, BODY), BODY)).toBe('verified');
    writeFileSync(file, documentOf([current, next]));
    // The first unknown identifier after the first read reads the file again and finds it.
    expect(await keys.check('next', signatureOf(next, BODY), BODY)).toBe('verified');
    const third = signer('third');
    writeFileSync(file, documentOf([current, next, third]));
    // Within the interval, another unknown identifier reads nothing.
    expect(await keys.check('third', signatureOf(third, BODY), BODY)).toBe('unknown_key');
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
        Array.from({ length: 10 }, () => keys.check('current', signatureOf(current, BODY), BODY)),
      );
      expect(checks).toEqual(Array.from({ length: 10 }, () => 'verified'));
      expect(reads).toBe(1);
      failing = true;
      expect(await keys.check('unknown', signatureOf(next, BODY), BODY)).toBe('unknown_key');
      expect(reads).toBe(2);
      expect(failures).toEqual([{ outcome: 'failed', reason: 'the keys URL answered 503' }]);
      expect(await keys.check('current', signatureOf(current, BODY), BODY)).toBe('verified');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('refuses a document that is not a list of ECDSA P-256 keys', () => {
    const { publicKey: rsa } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const { publicKey: p384 } = generateKeyPairSync('ec', { namedCurve: 'secp384r1' });
    const pemOf = (key: KeyObject): string =>
      key.export({ type: 'spki', format: 'pem' }).toString();
    expect(() => parseKeysDocument('{}')).toThrow('no public_keys list');
    expect(() => parseKeysDocument('{"public_keys":[{"key":"x"}]}')).toThrow('lacks');
    for (const key of [rsa, p384]) {
      const text = JSON.stringify({ public_keys: [{ key_identifier: 'k', key: pemOf(key) }] });
      expect(() => parseKeysDocument(text)).toThrow('is not an ECDSA P-256 key');
    }
    expect([...parseKeysDocument(documentOf([current, next])).keys()]).toEqual(['current', 'next']);
  });
});
