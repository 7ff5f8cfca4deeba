import { toTollgateError } from '../../lib/express/error-handler';
import {
  AuthenticationError,
  TollgateError,
  InternalError,
  IpNotWhitelistedError,
  RateLimitedError,
} from '../../lib/errors';

import { UpstreamError } from '../../gateway/errors';
/** What body-parser (through Express) passes to `next`: an error with `type`, `status` and `expose`. */
function bodyParserError(type: string, status: number, message: string): Error {
  return Object.assign(new Error(message), {
    type,
    status,
    statusCode: status,
    expose: status < 500,
  });
}

describe('toTollgateError', () => {
  it.each([
    [new AuthenticationError('expired_token')],
    [new IpNotWhitelistedError()],
    [new RateLimitedError(12)],
    [new UpstreamError('timeout')],
  ])('returns a TollgateError as it is: %p', (error) => {
    expect(toTollgateError(error)).toBe(error);
  });

  it.each([
    ['entity.too.large', 413, 413, 'payload_too_large'],
    ['encoding.unsupported', 415, 415, 'unsupported_media_type'],
    ['charset.unsupported', 415, 415, 'unsupported_media_type'],
    ['entity.parse.failed', 400, 400, 'invalid_request'],
    ['request.aborted', 400, 400, 'invalid_request'],
    ['request.size.invalid', 400, 400, 'invalid_request'],
    ['stream.encoding.set', 500, 400, 'invalid_request'],
  ])('maps the body-parser error %s (status %i) to %i %s', (type, status, expectedStatus, code) => {
    const original = bodyParserError(
      type,
      status,
      `Unexpected token } in JSON at position 12: {"api_secret":"sk_x"`,
    );
    const mapped = toTollgateError(original);
    expect(mapped).toBeInstanceOf(TollgateError);
    expect(mapped).toMatchObject({ status: expectedStatus, code });
    expect(mapped.message).not.toContain('api_secret');
    expect(mapped.message).not.toContain('Unexpected token');
  });

  it.each([
    [400, 400, 'invalid_request'],
    [413, 413, 'payload_too_large'],
    [415, 415, 'unsupported_media_type'],
    [431, 431, 'headers_too_large'],
  ])('maps an HTTP error with status %i to %i %s', (status, expectedStatus, code) => {
    const original = Object.assign(new URIError("Failed to decode param '%E0%A4%A'"), { status });
    const mapped = toTollgateError(original);
    expect(mapped).toMatchObject({ status: expectedStatus, code });
    expect(mapped.message).not.toContain('%E0');
  });

  it.each([
    ['a plain Error', new Error('connect ECONNREFUSED 10.1.2.3:5432 password=hunter2')],
    ['a TypeError', new TypeError("Cannot read properties of undefined (reading 'api_secret')")],
    ['an error with a 5xx status', Object.assign(new Error('upstream said no'), { status: 503 })],
    [
      'an error with a status that is a string',
      Object.assign(new Error('weird'), { status: '400' }),
    ],
    ['an error with status 200', Object.assign(new Error('not an error status'), { status: 200 })],
    [
      'an unknown error type without a status',
      Object.assign(new Error('new kind'), { type: 'entity.verify.failed' }),
    ],
    ['a thrown string', 'sk_live_leaked_secret_in_a_string'],
    ['null', null],
    ['undefined', undefined],
    ['a number', 42],
  ])('maps %s to 500 internal_error, never with the original message', (_what, original) => {
    const mapped = toTollgateError(original);
    expect(mapped).toBeInstanceOf(InternalError);
    expect(mapped).toMatchObject({
      status: 500,
      code: 'internal_error',
      message: 'Internal error',
    });
    const originalText =
      original instanceof Error
        ? original.message
        : typeof original === 'string'
          ? original
          : undefined;
    if (originalText !== undefined) {
      expect(mapped.message).not.toContain(originalText);
      expect(mapped.stack).not.toContain(originalText);
    }
  });
});
