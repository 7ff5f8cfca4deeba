import fc from 'fast-check';
import { generateKey, KEY_MAX_LENGTH, KEY_MIN_LENGTH, keyShape } from '../../lib/model/key-format';

/**
 * Key shapes: keys made by the key command carry a checksum, so any one-character typo or forgery
 * of that shape is refused before a lookup, while keys of other shapes stay lookup-able.
 */

const RUNS = 500;
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const TYPED = /^(sk|pk)_(live|test)_[0-9A-Za-z]{32}_[0-9A-Za-z]{6}$/;

const typedKey = fc
  .tuple(
    fc.constantFrom('secret', 'publishable' as const),
    fc.constantFrom('live', 'test' as const),
    fc.integer(),
  )
  .map(([type, environment]) => generateKey(type, environment));

describe('key shapes', () => {
  it('classifies every key the key command makes as typed', () => {
    fc.assert(
      fc.property(typedKey, (key) => {
        expect(keyShape(key)).toBe('typed');
      }),
      { numRuns: RUNS },
    );
  });

  it('refuses any one base62 character changed in a typed key as corrupt', () => {
    fc.assert(
      fc.property(
        typedKey,
        fc.nat(),
        fc.constantFrom(...Array.from(BASE62)),
        (key, position, replacement) => {
          const body = [...key.matchAll(/[0-9A-Za-z]/g)]
            .map((match) => match.index)
            .filter((index) => index >= 8);
          const index = body[position % body.length] ?? 8;
          fc.pre(key.charAt(index) !== replacement);
          expect(keyShape(key.slice(0, index) + replacement + key.slice(index + 1))).toBe(
            'corrupt',
          );
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('refuses two adjacent characters swapped in a typed key', () => {
    fc.assert(
      fc.property(typedKey, fc.integer({ min: 8, max: 46 }), (key, index) => {
        const swapped =
          key.slice(0, index) + key.charAt(index + 1) + key.charAt(index) + key.slice(index + 2);
        fc.pre(swapped !== key && TYPED.test(swapped));
        expect(keyShape(swapped)).toBe('corrupt');
      }),
      { numRuns: RUNS },
    );
  });

  it('never throws, and reads anything outside 20-200 visible ASCII characters as malformed', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ unit: 'binary', maxLength: 260 }), fc.string({ maxLength: 260 })),
        (value) => {
          const shape = keyShape(value);
          const wellFormed =
            value.length >= KEY_MIN_LENGTH &&
            value.length <= KEY_MAX_LENGTH &&
            /^[\x21-\x7e]+$/.test(value);
          if (!wellFormed) expect(shape).toBe('malformed');
          else
            expect(shape).toBe(
              TYPED.test(value) ? expect.stringMatching(/^(typed|corrupt)$/) : 'opaque',
            );
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('keeps keys of other tools lookup-able: any other visible-ASCII shape is opaque', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[\x21-\x7e]{20,200}$/), (value) => {
        fc.pre(!TYPED.test(value));
        expect(keyShape(value)).toBe('opaque');
      }),
      { numRuns: RUNS },
    );
  });
});
