import fc from 'fast-check';
import { IdempotencySeal } from '../../../lib/idempotency/seal';

/** Sealed answers, record names and fingerprints: nothing readable or movable without the secret. */

const SECRET = 'seal test secret, at least 32 bytes long';
const seal = new IdempotencySeal(SECRET);
const CONTEXT = 'idem:{acct_1}:name' + 'f'.repeat(43);

describe('IdempotencySeal', () => {
  it('opens what it sealed, for any bytes and context', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 1024 }), fc.string(), (bytes, context) => {
        const plain = Buffer.from(bytes);
        const opened = seal.open(seal.seal(plain, context), context);
        expect(opened?.equals(plain)).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('seals the same bytes differently each time, without the plain bytes in sight', () => {
    const plain = Buffer.from('{"payout":"po_secret_123","iban":"DE89370400440532013000"}');
    const first = seal.seal(plain, CONTEXT);
    const second = seal.seal(plain, CONTEXT);
    expect(first).not.toBe(second);
    for (const sealed of [first, second]) {
      expect(sealed).not.toContain('po_secret_123');
      expect(Buffer.from(sealed, 'base64').includes(plain)).toBe(false);
      expect(Buffer.from(sealed, 'base64').includes(Buffer.from('DE89370400440532013000'))).toBe(
        false,
      );
    }
  });

  it('does not open under another context', () => {
    const sealed = seal.seal(Buffer.from('answer'), CONTEXT);
    expect(seal.open(sealed, CONTEXT)?.toString()).toBe('answer');
    expect(seal.open(sealed, CONTEXT.replace('acct_1', 'acct_2'))).toBeUndefined();
    expect(seal.open(sealed, `${CONTEXT}x`)).toBeUndefined();
    expect(seal.open(sealed, '')).toBeUndefined();
  });

  it('does not open under another secret', () => {
    const sealed = seal.seal(Buffer.from('answer'), CONTEXT);
    expect(new IdempotencySeal(SECRET).open(sealed, CONTEXT)?.toString()).toBe('answer');
    expect(new IdempotencySeal(`${SECRET}!`).open(sealed, CONTEXT)).toBeUndefined();
    expect(new IdempotencySeal(Buffer.from(SECRET, 'utf8')).open(sealed, CONTEXT)?.toString()).toBe(
      'answer',
    );
  });

  it('does not open once any byte is changed or the sealed text is cut', () => {
    const sealed = seal.seal(Buffer.from('a stored answer of some length'), CONTEXT);
    const bytes = Buffer.from(sealed, 'base64');
    for (let offset = 0; offset < bytes.length; offset++) {
      for (const flip of [0x01, 0x80]) {
        const tampered = Buffer.from(bytes);
        tampered.writeUInt8((tampered.readUInt8(offset) ^ flip) & 0xff, offset);
        expect({ offset, flip, opened: seal.open(tampered.toString('base64'), CONTEXT) }).toEqual({
          offset,
          flip,
          opened: undefined,
        });
      }
    }
    expect(seal.open(bytes.subarray(0, bytes.length - 1).toString('base64'), CONTEXT)).toBe(
      undefined,
    );
    expect(seal.open(bytes.subarray(0, 27).toString('base64'), CONTEXT)).toBeUndefined();
    expect(seal.open('', CONTEXT)).toBeUndefined();
    expect(seal.open('not base64 at all!', CONTEXT)).toBeUndefined();
  });

  it('gives a fingerprint that changes with the method, the path and the body', () => {
    const body = Buffer.from('{"amount":100}');
    const base = seal.fingerprint('POST', '/api/v1/payouts/', body);
    expect(base).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(seal.fingerprint('POST', '/api/v1/payouts/', Buffer.from('{"amount":100}'))).toBe(base);
    expect(seal.fingerprint('PUT', '/api/v1/payouts/', body)).not.toBe(base);
    expect(seal.fingerprint('POST', '/api/v1/checkout/', body)).not.toBe(base);
    // A route answers with or without its trailing slash: the same request either way.
    expect(seal.fingerprint('POST', '/api/v1/payouts', body)).toBe(base);
    expect(seal.fingerprint('POST', '/api/v1/payout', body)).not.toBe(base);
    expect(seal.fingerprint('POST', '/api/v1/payouts/', Buffer.from('{"amount":101}'))).not.toBe(
      base,
    );
    expect(seal.fingerprint('POST', '/api/v1/payouts/', Buffer.from('{"amount":100} '))).not.toBe(
      base,
    );
    // No body and an empty body are the same request.
    expect(seal.fingerprint('POST', '/api/v1/payouts/', undefined)).toBe(
      seal.fingerprint('POST', '/api/v1/payouts/', Buffer.alloc(0)),
    );
    // Keyed by the secret: another secret, another fingerprint.
    expect(
      new IdempotencySeal(`${SECRET}!`).fingerprint('POST', '/api/v1/payouts/', body),
    ).not.toBe(base);
  });

  it('gives distinct fingerprints to distinct requests', () => {
    const request = fc.record({
      method: fc.constantFrom('POST', 'PUT', 'PATCH', 'DELETE'),
      // Paths as routes see them: a trailing slash does not make another route.
      path: fc.string({ maxLength: 20 }).map((path) => `/${path.replace(/\/+$/, '')}`),
      body: fc.uint8Array({ maxLength: 20 }).map((bytes) => Buffer.from(bytes)),
    });
    fc.assert(
      fc.property(request, request, (a, b) => {
        const same = a.method === b.method && a.path === b.path && a.body.equals(b.body);
        expect(
          seal.fingerprint(a.method, a.path, a.body) === seal.fingerprint(b.method, b.path, b.body),
        ).toBe(same);
      }),
      { numRuns: 500 },
    );
  });

  it('names a record per account and key, without either in it', () => {
    const key = '8e03978e-40d5-43e8-bc93-6894a57f9324';
    const name = seal.recordName('acct_1', key);
    expect(name).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(name).not.toContain('acct_1');
    expect(name).not.toContain(key);
    expect(seal.recordName('acct_1', key)).toBe(name);
    expect(seal.recordName('acct_2', key)).not.toBe(name);
    expect(seal.recordName('acct_1', `${key}0`)).not.toBe(name);
    // The separator keeps account and key apart.
    expect(seal.recordName('acct_1a', 'b')).not.toBe(seal.recordName('acct_1', 'ab'));
    // Whatever the secret: after it changes, a retry still finds its key's record.
    expect(new IdempotencySeal(`${SECRET}!`).recordName('acct_1', key)).toBe(name);
  });

  it('tags the secret: the same tag under the same secret only', () => {
    expect(seal.secretTag).toMatch(/^[A-Za-z0-9_-]{8}$/);
    expect(new IdempotencySeal(SECRET).secretTag).toBe(seal.secretTag);
    expect(new IdempotencySeal(Buffer.from(SECRET, 'utf8')).secretTag).toBe(seal.secretTag);
    expect(new IdempotencySeal(`${SECRET}!`).secretTag).not.toBe(seal.secretTag);
    expect(SECRET).not.toContain(seal.secretTag);
  });
});
