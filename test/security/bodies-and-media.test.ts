import { gzipSync } from 'node:zlib';
import jwt from 'jsonwebtoken';
import { DEFAULT_BODY_LIMIT } from '../../lib/express/json-body';
import { describeHostileCases, type HostileCase, UNTHROTTLED } from './hostile-cases';

/**
 * Request bodies: content types, charsets, encodings, sizes, malformed and hostile JSON (duplicate
 * keys, prototype keys, deep nesting, huge numbers), mostly on the token exchange, which reads the
 * secret from the body.
 */

const EXCHANGE = '/api/v1/auth/generate-token/';
const STATUS = '/api/v1/payment/status/';
const BODY_LIMIT_BYTES = Number(/^(\d+)kb$/.exec(DEFAULT_BODY_LIMIT)?.[1]) * 1024;

type Keys = Parameters<HostileCase['request']>[0]['keys'];
const pair = (keys: Keys, key: keyof Keys = 'admin'): string =>
  JSON.stringify({ api_key: keys[key].publishableKey, api_secret: keys[key].secretKey });

const exchange = (
  body: string | Buffer,
  contentType = 'application/json',
  headers: Record<string, string> = {},
) => ({
  method: 'POST',
  path: EXCHANGE,
  headers: { 'content-type': contentType, ...headers },
  body,
});

const badRequest = { status: 400, code: 'invalid_request', upstream: false } as const;
const unsupported = { status: 415, code: 'unsupported_media_type', upstream: false } as const;
const accepted = { status: 200, code: null, upstream: false, answerHoldsToken: true } as const;

const cases: HostileCase[] = [
  {
    name: 'a key pair as application/json is exchanged for a token',
    request: ({ keys }) => exchange(pair(keys)),
    ...accepted,
  },
  {
    name: 'Content-Type text/plain: 415, not 500',
    request: ({ keys }) => exchange(pair(keys), 'text/plain'),
    ...unsupported,
  },
  {
    name: 'no Content-Type at all: 415',
    request: ({ keys }) => ({ method: 'POST', path: EXCHANGE, body: Buffer.from(pair(keys)) }),
    ...unsupported,
  },
  {
    name: 'application/json-patch+json: 415',
    request: ({ keys }) => exchange(pair(keys), 'application/json-patch+json'),
    ...unsupported,
  },
  {
    name: 'application/merge-patch+json: 415',
    request: ({ keys }) => exchange(pair(keys), 'application/merge-patch+json'),
    ...unsupported,
  },
  {
    name: 'a form-encoded key pair: 415',
    request: ({ keys }) =>
      exchange(
        `api_key=${keys.admin.publishableKey}&api_secret=${keys.admin.secretKey}`,
        'application/x-www-form-urlencoded',
      ),
    ...unsupported,
  },
  {
    name: 'multipart/form-data: 415',
    request: ({ keys }) =>
      exchange(
        `--b\r\nContent-Disposition: form-data; name="api_secret"\r\n\r\n${keys.admin.secretKey}\r\n--b--\r\n`,
        'multipart/form-data; boundary=b',
      ),
    ...unsupported,
  },
  {
    name: 'application/json; charset=latin1: 415',
    request: ({ keys }) => exchange(pair(keys), 'application/json; charset=latin1'),
    ...unsupported,
    message: 'JSON bodies must be UTF-8 (Content-Type: application/json; charset=utf-8)',
  },
  {
    name: 'a UTF-16 body declared as charset=utf-16: 415',
    request: ({ keys }) =>
      exchange(Buffer.from(pair(keys), 'utf16le'), 'application/json; charset=utf-16'),
    ...unsupported,
    message: 'JSON bodies must be UTF-8 (Content-Type: application/json; charset=utf-8)',
  },
  {
    name: 'a UTF-16 body declared as plain application/json: 400',
    request: ({ keys }) => exchange(Buffer.from(pair(keys), 'utf16le')),
    ...badRequest,
  },
  {
    name: 'a UTF-8 byte order mark before the JSON: 400',
    request: ({ keys }) =>
      exchange(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(pair(keys))])),
    ...badRequest,
  },
  {
    name: 'charset=UTF-8 in capitals is accepted',
    request: ({ keys }) => exchange(pair(keys), 'application/json; charset=UTF-8'),
    ...accepted,
  },
  {
    name: 'a quoted charset="utf-8" is accepted',
    request: ({ keys }) => exchange(pair(keys), 'application/json; charset="utf-8"'),
    ...accepted,
  },
  {
    name: 'APPLICATION/JSON in capitals is accepted',
    request: ({ keys }) => exchange(pair(keys), 'APPLICATION/JSON'),
    ...accepted,
  },
  {
    name: 'a malformed Content-Type list "application/json, text/plain": 415',
    request: ({ keys }) => exchange(pair(keys), 'application/json, text/plain'),
    ...unsupported,
  },
  {
    name: 'a charset parameter without a value is ignored, as HTTP parsers do',
    request: ({ keys }) => exchange(pair(keys), 'application/json; charset'),
    ...accepted,
  },
  {
    name: 'a gzip Content-Encoding: 415',
    request: ({ keys }) =>
      exchange(gzipSync(pair(keys)), 'application/json', { 'content-encoding': 'gzip' }),
    ...unsupported,
  },
  {
    name: 'Content-Encoding: identity is no encoding at all: accepted',
    request: ({ keys }) =>
      exchange(pair(keys), 'application/json', { 'content-encoding': 'identity' }),
    ...accepted,
  },
  {
    name: 'a deflate Content-Encoding: 415',
    request: ({ keys }) =>
      exchange(pair(keys), 'application/json', { 'content-encoding': 'deflate' }),
    ...unsupported,
  },
  {
    name: 'malformed JSON holding the secret: 400, and the secret is in no answer or log line',
    request: ({ keys }) => exchange(pair(keys).slice(0, -1)),
    ...badRequest,
    message: 'The body is not valid JSON',
  },
  { name: 'a JSON array: 400', request: ({ keys }) => exchange(`[${pair(keys)}]`), ...badRequest },
  { name: 'JSON null: 400', request: () => exchange('null'), ...badRequest },
  {
    name: 'a JSON string: 400',
    request: ({ keys }) => exchange(JSON.stringify(keys.admin.secretKey)),
    ...badRequest,
  },
  { name: 'JSON true: 400', request: () => exchange('true'), ...badRequest },
  {
    name: 'JSON with a comment: 400',
    request: ({ keys }) => exchange(`/* pair */ ${pair(keys)}`),
    ...badRequest,
  },
  {
    name: 'single-quoted pseudo-JSON: 400',
    request: ({ keys }) => exchange(pair(keys).replaceAll('"', "'")),
    ...badRequest,
  },
  {
    name: 'two JSON objects in a row: 400',
    request: ({ keys }) => exchange(`${pair(keys)}${pair(keys)}`),
    ...badRequest,
  },
  {
    name: 'NaN as a value: 400',
    request: () => exchange('{"api_key": NaN, "api_secret": Infinity}'),
    ...badRequest,
  },
  {
    name: 'an empty body with Content-Type application/json: 400',
    request: () => ({
      method: 'POST',
      path: EXCHANGE,
      headers: { 'content-type': 'application/json', 'content-length': '0' },
    }),
    ...badRequest,
  },
  {
    name: 'api_secret missing: 400',
    request: ({ keys }) => exchange(JSON.stringify({ api_key: keys.admin.publishableKey })),
    ...badRequest,
    message: 'api_secret must be a non-empty string',
  },
  {
    name: 'empty strings: 400',
    request: () => exchange('{"api_key": "", "api_secret": ""}'),
    ...badRequest,
  },
  {
    name: 'api_secret as a number: 400',
    request: ({ keys }) =>
      exchange(
        `{"api_key": ${JSON.stringify(keys.admin.publishableKey)}, "api_secret": 1234567890123456789012}`,
      ),
    ...badRequest,
  },
  {
    name: 'api_secret wrapped in an array: 400',
    request: ({ keys }) =>
      exchange(
        JSON.stringify({ api_key: keys.admin.publishableKey, api_secret: [keys.admin.secretKey] }),
      ),
    ...badRequest,
  },
  {
    name: 'api_secret as an object: 400',
    request: ({ keys }) =>
      exchange(
        JSON.stringify({
          api_key: keys.admin.publishableKey,
          api_secret: { toString: keys.admin.secretKey },
        }),
      ),
    ...badRequest,
  },
  {
    name: 'a huge number as api_key: 400',
    request: ({ keys }) =>
      exchange(`{"api_key": 1e999, "api_secret": ${JSON.stringify(keys.admin.secretKey)}}`),
    ...badRequest,
  },
  {
    name: 'a ten-thousand-digit number as api_key: 400',
    request: ({ keys }) =>
      exchange(
        `{"api_key": ${'9'.repeat(10_000)}, "api_secret": ${JSON.stringify(keys.admin.secretKey)}}`,
      ),
    ...badRequest,
  },
  {
    name: 'duplicate api_key fields: 400, never "the last one wins"',
    request: ({ keys }) =>
      exchange(
        `{"api_key": ${JSON.stringify(keys.level1.publishableKey)}, "api_key": ${JSON.stringify(keys.admin.publishableKey)}, "api_secret": ${JSON.stringify(keys.admin.secretKey)}}`,
      ),
    ...badRequest,
    message: 'The body names a field twice',
  },
  {
    name: 'a duplicate field spelt with a unicode escape: 400',
    request: ({ keys }) =>
      exchange(
        `{"api_key": "pk_nobody_0123456789abcdef", "api\\u005fkey": ${JSON.stringify(keys.admin.publishableKey)}, "api_secret": ${JSON.stringify(keys.admin.secretKey)}}`,
      ),
    ...badRequest,
  },
  {
    name: 'duplicate public_key fields on payment status: 400, the upstream never sees the body',
    request: ({ keys }) => ({
      method: 'POST',
      path: STATUS,
      headers: { 'content-type': 'application/json' },
      body: `{"public_key": ${JSON.stringify(keys.walled.publishableKey)}, "invoice_id": "inv_1", "public_key": ${JSON.stringify(keys.level1.publishableKey)}}`,
    }),
    ...badRequest,
  },
  {
    name: 'the key pair hidden under __proto__: 400',
    request: ({ keys }) => exchange(`{"__proto__": ${pair(keys)}}`),
    ...badRequest,
  },
  {
    name: 'constructor.prototype and extra role/exp/sub fields are ignored: the token carries the key record',
    request: ({ keys }) =>
      exchange(
        `{"constructor": {"prototype": {"role": "administrator"}}, "role": "administrator", "exp": 9999999999, "sub": "key_admin", ${pair(keys, 'level1').slice(1)}`,
      ),
    ...accepted,
    then: (result, ctx) => {
      const token = ctx.secret(String(result.body?.token));
      const claims = jwt.decode(token) as Record<string, unknown>;
      expect(claims).toMatchObject({ sub: ctx.keys.level1.id, role: 'level-1' });
      expect(Number(claims.exp) - Number(claims.iat)).toBe(ctx.gateway.tokens.ttlSeconds);
      expect(({} as Record<string, unknown>).role).toBeUndefined();
    },
  },
  {
    name: 'deeply nested arrays filling the body limit: 400',
    request: () =>
      exchange(`${'['.repeat(BODY_LIMIT_BYTES / 2 - 1)}${']'.repeat(BODY_LIMIT_BYTES / 2 - 1)}`),
    ...badRequest,
  },
  {
    name: 'deeply nested objects: 400',
    request: () => exchange(`${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`),
    ...badRequest,
  },
  {
    name: 'a NUL character inside api_secret: 401 invalid_credentials',
    request: ({ keys }) =>
      exchange(
        JSON.stringify({
          api_key: keys.admin.publishableKey,
          api_secret: `${keys.admin.secretKey}\u0000`,
        }),
      ),
    status: 401,
    code: 'invalid_credentials',
    upstream: false,
  },
  {
    name: 'a lone surrogate in api_key: 401 invalid_credentials',
    request: ({ keys }) =>
      exchange(
        `{"api_key": "\\ud800${keys.admin.publishableKey}", "api_secret": ${JSON.stringify(keys.admin.secretKey)}}`,
      ),
    status: 401,
    code: 'invalid_credentials',
    upstream: false,
  },
  {
    name: 'a body one byte over the limit: 413',
    request: () => exchange(`{"x":"${'a'.repeat(BODY_LIMIT_BYTES - 7)}"}`),
    status: 413,
    code: 'payload_too_large',
    upstream: false,
  },
  {
    name: 'a body exactly at the limit is read (then refused for its content): 400',
    request: () => exchange(`{"x":"${'a'.repeat(BODY_LIMIT_BYTES - 8)}"}`),
    ...badRequest,
  },
  {
    name: 'a 200 KB body: 413',
    request: () => exchange(JSON.stringify({ pad: 'x'.repeat(200 * 1024) })),
    status: 413,
    code: 'payload_too_large',
    upstream: false,
  },
  {
    name: 'a chunked key pair (raw) is read like any other body',
    request: ({ keys }) => {
      const body = pair(keys);
      return {
        raw: {
          method: 'POST',
          target: EXCHANGE,
          headers: [
            ['Content-Type', 'application/json'],
            ['Transfer-Encoding', 'chunked'],
          ],
          body: `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`,
        },
      };
    },
    ...accepted,
  },
  {
    name: 'Transfer-Encoding and Content-Length together (raw): 400 with the JSON error body',
    request: ({ keys }) => ({
      raw: {
        method: 'POST',
        target: EXCHANGE,
        headers: [
          ['Content-Type', 'application/json'],
          ['Transfer-Encoding', 'chunked'],
          ['Content-Length', '2'],
        ],
        body: `2\r\n{}\r\n0\r\n\r\n${pair(keys)}`,
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'Transfer-Encoding gzip without chunked (raw): 400 with the JSON error body',
    request: ({ keys }) => ({
      raw: {
        method: 'POST',
        target: EXCHANGE,
        headers: [
          ['Content-Type', 'application/json'],
          ['Transfer-Encoding', 'gzip'],
        ],
        body: pair(keys),
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'bytes beyond a short Content-Length are a second, malformed request (raw): 400 with the JSON error body',
    request: ({ keys }) => ({
      raw: {
        method: 'POST',
        target: EXCHANGE,
        headers: [
          ['Content-Type', 'application/json'],
          ['Content-Length', '2'],
        ],
        body: `{}${pair(keys)}`,
      },
    }),
    status: 400,
    code: 'invalid_request',
    upstream: false,
  },
  {
    name: 'an Authorization header beside the key pair: 400',
    request: ({ keys }) =>
      exchange(pair(keys), 'application/json', { authorization: `Bearer ${keys.admin.secretKey}` }),
    ...badRequest,
  },
  {
    name: 'public_key as a number on payment status: 400',
    request: () => ({
      method: 'POST',
      path: STATUS,
      headers: { 'content-type': 'application/json' },
      body: '{"public_key": 12345678901234567890, "invoice_id": "inv_1"}',
    }),
    ...badRequest,
  },
  {
    name: 'a payment status body reaches the upstream byte for byte',
    request: ({ keys }) => ({
      method: 'POST',
      path: STATUS,
      headers: { 'content-type': 'application/json' },
      body: `{ "invoice_id": "inv_1",  "public_key": ${JSON.stringify(keys.level1.publishableKey)} }`,
    }),
    status: 200,
    code: null,
    upstream: true,
    then: (_result, ctx) => {
      const forwarded = ctx.gateway.upstream.requests.at(-1);
      expect(forwarded?.body.toString()).toBe(
        `{ "invoice_id": "inv_1",  "public_key": ${JSON.stringify(ctx.keys.level1.publishableKey)} }`,
      );
    },
  },
];

describeHostileCases('hostile bodies and media types', cases, UNTHROTTLED);
