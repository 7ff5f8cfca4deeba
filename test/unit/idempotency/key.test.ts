import fc from 'fast-check';
import { IdempotencyKeyInvalidError } from '../../../lib/errors';
import { idempotencyKeyOf, MAX_IDEMPOTENCY_KEY_LENGTH } from '../../../lib/idempotency/key';

/** The `Idempotency-Key` header's syntax (contract section 17). */

function expectRefused(values: string[], message?: RegExp): void {
  const key = idempotencyKeyOf(values);
  expect(key).toBeInstanceOf(IdempotencyKeyInvalidError);
  if (key instanceof IdempotencyKeyInvalidError) {
    expect(key.status).toBe(400);
    expect(key.code).toBe('idempotency_key_invalid');
    if (message !== undefined) expect(key.message).toMatch(message);
  }
}

describe('idempotencyKeyOf', () => {
  it('is undefined without the header', () => {
    expect(idempotencyKeyOf(undefined)).toBeUndefined();
    expect(idempotencyKeyOf([])).toBeUndefined();
  });

  it('takes a bare key as it is', () => {
    expect(idempotencyKeyOf(['8e03978e-40d5-43e8-bc93-6894a57f9324'])).toBe(
      '8e03978e-40d5-43e8-bc93-6894a57f9324',
    );
  });

  it('takes a quoted key without its quotes', () => {
    expect(idempotencyKeyOf(['"8e03978e-40d5"'])).toBe('8e03978e-40d5');
  });

  it('takes 1 and 255 characters, bare or quoted, and refuses 256', () => {
    expect(idempotencyKeyOf(['a'])).toBe('a');
    expect(idempotencyKeyOf(['"a"'])).toBe('a');
    const longest = 'k'.repeat(MAX_IDEMPOTENCY_KEY_LENGTH);
    expect(MAX_IDEMPOTENCY_KEY_LENGTH).toBe(255);
    expect(idempotencyKeyOf([longest])).toBe(longest);
    expect(idempotencyKeyOf([`"${longest}"`])).toBe(longest);
    expectRefused([`${longest}k`]);
    expectRefused([`"${longest}k"`]);
  });

  it('refuses an empty key, a lone quote and empty quotes', () => {
    expectRefused([''], /empty/);
    expectRefused(['"']);
    expectRefused(['""']);
  });

  it('refuses a quote or a backslash inside a quoted key', () => {
    expectRefused(['"ab"c"']);
    expectRefused(['"a\\"b"']);
    expectRefused(['"a\\b"']);
    expectRefused(['"a\\\\b"']);
  });

  it('refuses a bare key that starts or ends with a quote, and takes one with a quote inside', () => {
    expectRefused(['"abc']);
    expectRefused(['abc"']);
    expect(idempotencyKeyOf(['ab"c'])).toBe('ab"c');
    // A backslash is a visible character: a bare key may carry one.
    expect(idempotencyKeyOf(['a\\b'])).toBe('a\\b');
  });

  it('refuses spaces, non-ASCII and control characters, bare or quoted', () => {
    for (const inside of [
      'a b',
      ' ab',
      'ab ',
      'café',
      'ключ',
      'a\tb',
      'a\u0000b',
      'a\u007fb',
      'a\rb',
    ]) {
      expectRefused([inside]);
      expectRefused([`"${inside}"`]);
    }
  });

  it('refuses the header sent twice, even with the same key', () => {
    expectRefused(['a', 'b'], /once/);
    expectRefused(['a', 'a'], /once/);
    expectRefused(['a', '"a"'], /once/);
  });

  it('names the same key bare and quoted, for every valid key', () => {
    // Quotes and backslashes more often than their share of the range.
    const character = fc.oneof(
      { weight: 1, arbitrary: fc.constantFrom(0x22, 0x5c) },
      { weight: 6, arbitrary: fc.integer({ min: 0x21, max: 0x7e }) },
    );
    const visible = fc
      .array(character, { minLength: 1, maxLength: 255 })
      .map((codes) => String.fromCharCode(...codes));
    fc.assert(
      fc.property(visible, (key) => {
        const bare = idempotencyKeyOf([key]);
        if (key.startsWith('"')) {
          // Read as the quoted form of what is inside.
          const inside = key.slice(1, -1);
          const isQuotedForm = key.length >= 3 && key.endsWith('"') && !/["\\]/.test(inside);
          expect(bare).toEqual(isQuotedForm ? inside : expect.any(IdempotencyKeyInvalidError));
        } else {
          expect(bare).toEqual(key.endsWith('"') ? expect.any(IdempotencyKeyInvalidError) : key);
        }
        const quoted = idempotencyKeyOf([`"${key}"`]);
        const canBeQuoted = !key.includes('"') && !key.includes('\\');
        expect(typeof quoted === 'string').toBe(canBeQuoted);
        if (typeof quoted === 'string') expect(quoted).toBe(key);
      }),
      { numRuns: 500 },
    );
  });

  it('refuses every value with a character outside 0x21 to 0x7E', () => {
    const outside = fc.oneof(
      fc.integer({ min: 0, max: 0x20 }),
      fc.integer({ min: 0x7f, max: 0xffff }).filter((code) => code < 0xd800 || code > 0xdfff),
    );
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary-ascii', maxLength: 20 }),
        outside,
        fc.string({ unit: 'binary-ascii', maxLength: 20 }),
        fc.boolean(),
        (before, code, after, quoted) => {
          const key = `k${before}${String.fromCharCode(code)}${after}k`;
          expectRefused([quoted ? `"${key}"` : key]);
        },
      ),
      { numRuns: 300 },
    );
  });
});
