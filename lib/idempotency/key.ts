import { IdempotencyKeyInvalidError } from '../errors';

/**
 * The `Idempotency-Key` header: 1 to 255 visible ASCII characters (0x21 to 0x7E), bare or as a
 * structured-field string in double quotes. `"8e03…"` and `8e03…` name the same key. Inside the
 * quotes there is no `"` or `\`; a bare key neither starts nor ends with `"`.
 */

export const IDEMPOTENCY_HEADER = 'idempotency-key';
/** The answer header that marks a replayed answer. */
export const REPLAYED_HEADER = 'Idempotent-Replayed';
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;

const BARE = /^[\x21-\x7e]{1,255}$/;
const QUOTED_INSIDE = /^[\x21\x23-\x5b\x5d-\x7e]{1,255}$/;

const WHAT_A_KEY_IS =
  'Idempotency-Key must be 1 to 255 visible ASCII characters, bare or in double quotes';

/**
 * The key a request carries: `undefined` without the header, the key itself (quotes removed), or
 * the refusal of a malformed one. `values` is every value of the header, as Node keeps them apart.
 */
export function idempotencyKeyOf(
  values: readonly string[] | undefined,
): string | IdempotencyKeyInvalidError | undefined {
  if (values === undefined || values.length === 0) return undefined;
  if (values.length > 1) {
    return new IdempotencyKeyInvalidError('Idempotency-Key must be sent once');
  }
  const value = values[0] ?? '';
  if (value === '') return new IdempotencyKeyInvalidError('Idempotency-Key must not be empty');
  if (value.startsWith('"')) {
    const inside = value.length >= 2 && value.endsWith('"') ? value.slice(1, -1) : undefined;
    return inside !== undefined && QUOTED_INSIDE.test(inside)
      ? inside
      : new IdempotencyKeyInvalidError(WHAT_A_KEY_IS);
  }
  return BARE.test(value) && !value.endsWith('"')
    ? value
    : new IdempotencyKeyInvalidError(WHAT_A_KEY_IS);
}
