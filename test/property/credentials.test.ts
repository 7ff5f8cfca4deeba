import fc from 'fast-check';
import type { Request } from 'express';
import { presentedCredential } from '../../lib/core/credentials';
import { TollgateError, InvalidRequestError } from '../../lib/errors';
import { ROUTES } from '../../gateway/routes';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { expectSafeAnswer, expectSafeLogs, UNTHROTTLED } from '../security/hostile-cases';

/**
 * Credential parsing under random input: whatever the Authorization header, publishable-key header
 * or `public_key` field holds, the answer is a 4xx with the JSON error body (never a 5xx, never an
 * authentication), and the pure parser only ever throws the kit's own errors.
 */

const RUNS = 300;
const PK_HEADER = 'x-service-public-api-key';

/** Characters node:http lets through in a header value. */
const headerChar = fc
  .oneof(
    fc.integer({ min: 0x20, max: 0x7e }),
    fc.integer({ min: 0x80, max: 0xff }),
    fc.constant(0x09),
  )
  .map((code) => String.fromCharCode(code));
const headerValue = fc.string({ unit: headerChar, maxLength: 300 });
const tokenish = fc
  .array(fc.stringMatching(/^[A-Za-z0-9_=+/-]{0,60}$/), { minLength: 1, maxLength: 5 })
  .map((parts) => parts.join('.'));
const scheme = fc.constantFrom(
  'Bearer ',
  'bearer ',
  'BEARER ',
  'Bearer',
  'Basic ',
  'Token ',
  '',
  'Bearer  ',
  'Bearer\t',
);

const authorization = fc.oneof(
  headerValue,
  fc.tuple(scheme, headerValue).map(([prefix, value]) => prefix + value),
  fc.tuple(scheme, tokenish).map(([prefix, value]) => prefix + value),
  fc
    .tuple(scheme, fc.stringMatching(/^(sk|pk)_(live|test)_[0-9A-Za-z]{32}_[0-9A-Za-z]{6}$/))
    .map(([prefix, value]) => prefix + value),
);
const route = fc.constantFrom(
  ...ROUTES.map((spec) => ({ method: spec.method, path: spec.path.replace(':id', 'id_1') })),
);

describe('credential parsing over HTTP', () => {
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await startTestGateway(UNTHROTTLED);
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('answers any Authorization value on any route with a 4xx and the JSON error body', async () => {
    await fc.assert(
      fc.asyncProperty(route, authorization, async ({ method, path }, value) => {
        const firstLine = gateway.logs.lines.length;
        const result = await gateway.send({ method, path, headers: { authorization: value } });
        expect(result.status).toBeGreaterThanOrEqual(400);
        expectSafeAnswer(result, gateway.fixtures);
        expectSafeLogs(gateway, firstLine);
      }),
      { numRuns: RUNS },
    );
    expect(gateway.upstream.requests).toHaveLength(0);
  });

  it('answers any publishable-key header or public_key field with a 4xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('/api/v1/checkout/', '/api/v1/payment/status/'),
        fc.oneof(
          headerValue.map((value) => ({ headers: { [PK_HEADER]: value } })),
          fc.jsonValue().map((value) => ({ body: { public_key: value, invoice_id: 'inv_1' } })),
          fc.tuple(headerValue, fc.string()).map(([header, field]) => ({
            headers: { [PK_HEADER]: header },
            body: { public_key: field },
          })),
        ),
        async (path, parts) => {
          const result = await gateway.send({ method: 'POST', path, ...parts });
          expect(result.status).toBeGreaterThanOrEqual(400);
          expectSafeAnswer(result, gateway.fixtures);
        },
      ),
      { numRuns: RUNS },
    );
    expect(gateway.upstream.requests).toHaveLength(0);
  });

  it('still serves after the barrage', async () => {
    expect((await gateway.send({ path: '/healthz' })).status).toBe(200);
  });
});

/** Just what `presentedCredential` reads from a request. */
function fakeRequest(headers: Record<string, string[]>, body: unknown): Request {
  return { headersDistinct: headers, body } as unknown as Request;
}

describe('presentedCredential', () => {
  const headerValues = fc.array(headerValue, { minLength: 1, maxLength: 3 });

  it('returns a credential or throws a TollgateError, never anything else', () => {
    fc.assert(
      fc.property(
        fc.option(headerValues, { nil: undefined }),
        fc.option(headerValues, { nil: undefined }),
        fc.oneof(
          fc.constant(undefined),
          fc.jsonValue(),
          fc.dictionary(fc.constantFrom('public_key', '__proto__', 'constructor'), fc.jsonValue()),
        ),
        (auth, publishable, body) => {
          const headers: Record<string, string[]> = {};
          if (auth !== undefined) headers.authorization = auth;
          if (publishable !== undefined) headers[PK_HEADER] = publishable;
          try {
            const credential = presentedCredential(
              fakeRequest(headers, body),
              'X-Service-Public-API-Key',
            );
            expect(['secret', 'token', 'publishable']).toContain(credential.kind);
          } catch (error) {
            expect(error).toBeInstanceOf(TollgateError);
            expect((error as TollgateError).status).toBeGreaterThanOrEqual(400);
            expect((error as TollgateError).status).toBeLessThan(500);
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  it('reads a Bearer value only when it is one run of visible ASCII after exactly "Bearer "', () => {
    fc.assert(
      fc.property(fc.mixedCase(fc.constant('bearer')), headerValue, (word, value) => {
        const header = `${word} ${value}`;
        let found: string | undefined;
        try {
          found = presentedCredential(
            fakeRequest({ authorization: [header] }, undefined),
            'X-Service-Public-API-Key',
          ).value;
        } catch (error) {
          expect(error).toBeInstanceOf(TollgateError);
        }
        const readable = /^[\x21-\x7e]+$/.test(value) && header.length <= 2048;
        expect(found).toBe(readable ? value : undefined);
      }),
      { numRuns: 500 },
    );
  });

  it('refuses any two Authorization values, whatever they are', () => {
    fc.assert(
      fc.property(headerValue, headerValue, (first, second) => {
        expect(() =>
          presentedCredential(
            fakeRequest({ authorization: [first, second] }, undefined),
            'X-Service-Public-API-Key',
          ),
        ).toThrow(InvalidRequestError);
      }),
    );
  });
});
