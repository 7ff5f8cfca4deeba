import fc from 'fast-check';
import { InvalidRequestError } from '../../lib/errors';
import { parseJsonObject } from '../../lib/express/json-body';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { expectSafeAnswer, expectSafeLogs, UNTHROTTLED } from '../security/hostile-cases';

/**
 * JSON bodies under random input: the parser accepts exactly the JSON objects without duplicate
 * keys and refuses everything else with a 400; over HTTP no body, content type or encoding gives
 * a 5xx or echoes what was sent.
 */

const RUNS = 300;

function parse(raw: Buffer): Record<string, unknown> | 'refused' {
  try {
    return parseJsonObject(raw);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidRequestError);
    return 'refused';
  }
}

describe('parseJsonObject', () => {
  it('refuses, with a 400 only, any bytes that are not a JSON object', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 200 }).map((bytes) => Buffer.from(bytes)),
          fc.string().map((text) => Buffer.from(text)),
        ),
        (raw) => {
          const result = parse(raw);
          if (result !== 'refused') expect(typeof result).toBe('object');
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('accepts every JSON object, at any depth, whose objects name each key once', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.jsonValue()), (object) => {
        expect(parse(Buffer.from(JSON.stringify(object)))).toEqual(
          JSON.parse(JSON.stringify(object)),
        );
      }),
      { numRuns: RUNS },
    );
  });

  it('refuses an object that names a key twice, at any depth and however the key is escaped', () => {
    const escaped = (key: string): string =>
      `"${Array.from(key)
        .map((char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`)
        .join('')}"`;
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 8 }),
        fc.jsonValue(),
        fc.jsonValue(),
        fc.integer({ min: 0, max: 4 }),
        fc.boolean(),
        (key, first, second, depth, escape) => {
          const inner = `{${JSON.stringify(key)}: ${JSON.stringify(first)}, ${escape ? escaped(key) : JSON.stringify(key)}: ${JSON.stringify(second)}}`;
          const nested = `${'{"n": ['.repeat(depth)}${inner}${']}'.repeat(depth)}`;
          expect(parse(Buffer.from(nested))).toBe('refused');
        },
      ),
      { numRuns: RUNS },
    );
  });
});

describe('request bodies over HTTP', () => {
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await startTestGateway(UNTHROTTLED);
  });
  afterAll(async () => {
    await gateway.close();
  });

  const contentType = fc.oneof(
    fc.constantFrom(
      'application/json',
      'application/json; charset=utf-8',
      'text/plain',
      'application/json; charset=utf-16',
      'application/x-www-form-urlencoded',
      'application/json-patch+json',
    ),
    fc.stringMatching(/^[a-z]{1,10}\/[a-z+.-]{1,12}(; ?[a-z]{1,8}=[a-z0-9-]{0,8})?$/),
  );
  const body = fc.oneof(
    fc.json(),
    fc.jsonValue().map((value) => JSON.stringify({ api_key: value, api_secret: value })),
    fc
      .dictionary(
        fc.constantFrom('api_key', 'api_secret', '__proto__', 'constructor', 'public_key'),
        fc.jsonValue(),
      )
      .map((value) => JSON.stringify(value)),
    fc.uint8Array({ maxLength: 300 }).map((bytes) => Buffer.from(bytes)),
  );

  it('answers any body on the token exchange and payment status with a non-5xx, never echoing it', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('/api/v1/auth/generate-token/', '/api/v1/payment/status/'),
        contentType,
        fc.constantFrom(undefined, 'gzip', 'identity', 'br'),
        body,
        async (path, type, encoding, payload) => {
          const firstLine = gateway.logs.lines.length;
          const headers: Record<string, string> = { 'content-type': type };
          if (encoding !== undefined) headers['content-encoding'] = encoding;
          const result = await gateway.send({ method: 'POST', path, headers, body: payload });
          expect(result.status).toBeGreaterThanOrEqual(400);
          expectSafeAnswer(result, gateway.fixtures);
          expectSafeLogs(gateway, firstLine);
          const text = Buffer.isBuffer(payload) ? '' : payload;
          if (text.length > 12) expect(result.text).not.toContain(text);
        },
      ),
      { numRuns: RUNS },
    );
    expect(gateway.upstream.requests).toHaveLength(0);
  });
});
