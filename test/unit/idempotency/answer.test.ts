import fc from 'fast-check';
import { ERROR_CODES } from '../../../lib/errors';
import { decodeAnswer, encodeAnswer, type StoredAnswer } from '../../../lib/idempotency/answer';

/** Stored answers as bytes: what `encodeAnswer` writes, `decodeAnswer` reads back unchanged. */

/** A `Content-Type` as a response header can carry it: Latin-1 characters, tab, no controls. */
const contentType = fc.option(
  fc.string({
    unit: fc
      .oneof(
        fc.integer({ min: 0x20, max: 0x7e }),
        fc.integer({ min: 0x80, max: 0xff }),
        fc.constant(0x09),
      )
      .map((code) => String.fromCharCode(code)),
    maxLength: 200,
  }),
  { nil: undefined },
);

const upstreamAnswer: fc.Arbitrary<StoredAnswer> = fc.record({
  kind: fc.constant('answer' as const),
  status: fc.integer({ min: 100, max: 599 }),
  contentType,
  body: fc.uint8Array({ maxLength: 2048 }).map((bytes) => Buffer.from(bytes)),
});

const errorAnswer: fc.Arbitrary<StoredAnswer> = fc.record({
  kind: fc.constant('error' as const),
  status: fc.integer({ min: 100, max: 599 }),
  code: fc.constantFrom(...ERROR_CODES),
  message: fc.string({ unit: 'grapheme', maxLength: 200 }),
});

function roundTrip(answer: StoredAnswer): StoredAnswer | undefined {
  return decodeAnswer(encodeAnswer(answer));
}

describe('encodeAnswer and decodeAnswer', () => {
  it('round-trips every answer', () => {
    fc.assert(
      fc.property(fc.oneof(upstreamAnswer, errorAnswer), (answer) => {
        expect(roundTrip(answer)).toEqual(answer);
      }),
      { numRuns: 500 },
    );
  });

  it('tells no Content-Type from an empty one, and keeps an empty body', () => {
    const none: StoredAnswer = {
      kind: 'answer',
      status: 204,
      contentType: undefined,
      body: Buffer.alloc(0),
    };
    const empty: StoredAnswer = { ...none, contentType: '' };
    expect(roundTrip(none)).toEqual(none);
    expect(roundTrip(empty)).toEqual(empty);
    expect(encodeAnswer(none).equals(encodeAnswer(empty))).toBe(false);
  });

  it('keeps body bytes that look like a header', () => {
    const answer: StoredAnswer = {
      kind: 'answer',
      status: 201,
      contentType: undefined,
      body: Buffer.from([1, 0, 0, 201, 0xff, 0xff, 0, 1, 2]),
    };
    expect(roundTrip(answer)).toEqual(answer);
  });

  it.each([
    'idempotency_key_in_use',
    'idempotency_key_reused',
    'idempotency_key_invalid',
    'idempotency_key_required',
    'idempotency_unavailable',
    'upstream_timeout',
  ] as const)('round-trips an error answer with code %s', (code) => {
    const answer: StoredAnswer = {
      kind: 'error',
      status: 504,
      code,
      message: 'The upstream did not answer in time — “quoted”',
    };
    expect(roundTrip(answer)).toEqual(answer);
  });

  it('refuses bytes it did not write', () => {
    const valid = encodeAnswer({
      kind: 'error',
      status: 504,
      code: 'upstream_timeout',
      message: 'late',
    });
    const changed = (offset: number, value: number): Buffer => {
      const copy = Buffer.from(valid);
      copy.writeUInt8(value, offset);
      return copy;
    };
    expect(decodeAnswer(valid)).toBeDefined();
    // Too short, another version, an unknown kind.
    expect(decodeAnswer(Buffer.alloc(0))).toBeUndefined();
    expect(decodeAnswer(Buffer.from([1, 0, 0, 200]))).toBeUndefined();
    expect(decodeAnswer(Buffer.from([1, 0, 0, 200, 0]))).toBeUndefined();
    expect(decodeAnswer(changed(0, 2))).toBeUndefined();
    expect(decodeAnswer(changed(1, 2))).toBeUndefined();
    // A status no answer has.
    for (const status of [0, 99, 600, 0xffff]) {
      const copy = Buffer.from(valid);
      copy.writeUInt16BE(status, 2);
      expect(decodeAnswer(copy)).toBeUndefined();
    }
    // A code that is not one of the kit's.
    expect(decodeAnswer(changed(5, 'x'.charCodeAt(0)))).toBeUndefined();
    // A Content-Type longer than the bytes.
    const answer = encodeAnswer({
      kind: 'answer',
      status: 200,
      contentType: 'application/json',
      body: Buffer.alloc(0),
    });
    expect(decodeAnswer(answer.subarray(0, answer.length - 1))).toBeUndefined();
    expect(decodeAnswer(Buffer.from('{"status":200}', 'utf8'))).toBeUndefined();
  });

  it('refuses an error answer whose code is cut short', () => {
    const whole = encodeAnswer({ kind: 'error', status: 409, code: 'conflict', message: '' });
    for (let length = 5; length < whole.length; length++) {
      expect({ length, decoded: decodeAnswer(whole.subarray(0, length)) }).toEqual({
        length,
        decoded: undefined,
      });
    }
  });

  it('never throws on random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        const decoded = decodeAnswer(Buffer.from(bytes));
        if (decoded !== undefined) {
          // Whatever it reads is an answer it would write the same way.
          expect(encodeAnswer(decoded).equals(Buffer.from(bytes))).toBe(true);
        }
      }),
      { numRuns: 1000 },
    );
  });
});
