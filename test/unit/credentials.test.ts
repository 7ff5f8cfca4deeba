import type { IncomingHttpHeaders } from 'node:http';
import type { Request, Response } from 'express';
import {
  DEFAULT_PUBLIC_KEY_HEADER,
  type PresentedCredential,
  presentedCredential,
  refuseCredentialsInQuery,
} from '../../lib/core/credentials';
import type { RequestFacts } from '../../lib/core/facts';
import { authenticate } from '../../lib/express/authenticate';
import {
  AuthenticationError,
  TollgateError,
  InvalidRequestError,
  RateLimitedError,
} from '../../lib/errors';
import { generateKey } from '../../lib/model/key-format';
import { createAuthFailureLimiter } from '../../lib/rate-limit/auth-failures';
import { MAX_TOKEN_LENGTH, TokenService } from '../../lib/tokens/tokens';
import { createFixtures, TOKEN_SECRET } from '../helpers/fixtures';

const HEADER = DEFAULT_PUBLIC_KEY_HEADER;
const SECRET = generateKey('secret');
const PUBLISHABLE = generateKey('publishable');
const TOKEN =
  'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJrZXlfbDIiLCJpYXQiOjE3NTAwMDAwMDB9.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg';

/**
 * A minimal request as Node and Express would show it: every header in `headersDistinct` (a list per
 * name, lower-case) and the first value of each in `headers`.
 */
function fakeRequest(headers: Record<string, string | string[]> = {}, body?: unknown): Request {
  const distinct: Record<string, string[]> = {};
  const first: IncomingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    const values = Array.isArray(value) ? value : [value];
    distinct[name.toLowerCase()] = values;
    first[name.toLowerCase()] = values[0];
  }
  return { headersDistinct: distinct, headers: first, body, query: {} } as unknown as Request;
}

function refusal(req: Request, header = HEADER): TollgateError {
  try {
    presentedCredential(req, header);
  } catch (error) {
    expect(error).toBeInstanceOf(TollgateError);
    return error as TollgateError;
  }
  throw new Error('a credential was found');
}

describe('presentedCredential finds the one credential of a request', () => {
  it.each([
    [
      'Bearer <secret>',
      { authorization: `Bearer ${SECRET}` },
      undefined,
      { kind: 'secret', value: SECRET },
    ],
    [
      'bearer <secret> (scheme in lower case)',
      { authorization: `bearer ${SECRET}` },
      undefined,
      { kind: 'secret', value: SECRET },
    ],
    [
      'BEARER <secret>',
      { authorization: `BEARER ${SECRET}` },
      undefined,
      { kind: 'secret', value: SECRET },
    ],
    [
      'BeArEr <secret>',
      { authorization: `BeArEr ${SECRET}` },
      undefined,
      { kind: 'secret', value: SECRET },
    ],
    [
      'a key of another tool',
      { authorization: 'Bearer legacy.secret/0123456789+ABCDEF=' },
      undefined,
      { kind: 'secret', value: 'legacy.secret/0123456789+ABCDEF=' },
    ],
    [
      'Bearer <three base64url segments>',
      { authorization: `Bearer ${TOKEN}` },
      undefined,
      { kind: 'token', value: TOKEN },
    ],
    [
      'a token with an empty signature segment',
      { authorization: 'Bearer eyJh.eyJz.' },
      undefined,
      { kind: 'token', value: 'eyJh.eyJz.' },
    ],
    [
      'the publishable-key header',
      { [HEADER]: PUBLISHABLE },
      undefined,
      { kind: 'publishable', value: PUBLISHABLE },
    ],
    [
      'the publishable-key header in lower case',
      { [HEADER.toLowerCase()]: PUBLISHABLE },
      undefined,
      { kind: 'publishable', value: PUBLISHABLE },
    ],
    [
      'public_key in the body',
      {},
      { public_key: PUBLISHABLE, invoice_id: 'inv_1' },
      { kind: 'publishable', value: PUBLISHABLE },
    ],
    [
      'public_key in the body of a request with a Content-Type',
      { 'content-type': 'application/json' },
      { public_key: PUBLISHABLE },
      { kind: 'publishable', value: PUBLISHABLE },
    ],
  ] as [string, Record<string, string>, unknown, PresentedCredential][])(
    '%s',
    (_what, headers, body, expected) => {
      expect(presentedCredential(fakeRequest(headers, body), HEADER)).toEqual(expected);
    },
  );

  it('reads the publishable key from the header it is told to', () => {
    const req = fakeRequest({
      'x-acme-public-key': PUBLISHABLE,
      [HEADER]: 'ignored-publishable-key-0000',
    });
    expect(presentedCredential(req, 'X-Acme-Public-Key')).toEqual({
      kind: 'publishable',
      value: PUBLISHABLE,
    });
  });

  it('classifies a three-segment value with a character outside base64url as a secret, not a token', () => {
    expect(
      presentedCredential(fakeRequest({ authorization: 'Bearer abc.d+f.ghi' }), HEADER).kind,
    ).toBe('secret');
  });
});

describe('presentedCredential refuses', () => {
  it.each([
    ['no credential at all', 'missing_credentials', {}, undefined],
    ['a body without public_key', 'missing_credentials', {}, { invoice_id: 'inv_1' }],
    ['a body that is an array', 'missing_credentials', {}, [PUBLISHABLE]],
    [
      'public_key only inherited from the prototype',
      'missing_credentials',
      {},
      Object.create({ public_key: PUBLISHABLE }) as unknown,
    ],
    ['"Bearer " with nothing after it', 'invalid_api_key', { authorization: 'Bearer ' }, undefined],
    ['"Bearer" alone', 'invalid_api_key', { authorization: 'Bearer' }, undefined],
    ['"Bearer\\t<secret>"', 'invalid_api_key', { authorization: `Bearer\t${SECRET}` }, undefined],
    [
      '"Bearer  <secret>" (two spaces)',
      'invalid_api_key',
      { authorization: `Bearer  ${SECRET}` },
      undefined,
    ],
    [
      '"Basic …"',
      'invalid_api_key',
      { authorization: `Basic ${Buffer.from(`${PUBLISHABLE}:${SECRET}`).toString('base64')}` },
      undefined,
    ],
    ['"Token <secret>"', 'invalid_api_key', { authorization: `Token ${SECRET}` }, undefined],
    ['a bare secret with no scheme', 'invalid_api_key', { authorization: SECRET }, undefined],
    [
      'a secret with a space inside',
      'invalid_api_key',
      { authorization: `Bearer ${SECRET} x` },
      undefined,
    ],
    ['a non-ASCII secret', 'invalid_api_key', { authorization: `Bearer ${SECRET}é` }, undefined],
  ] as [string, string, Record<string, string>, unknown][])(
    '%s: 401 %s',
    (_what, code, headers, body) => {
      const error = refusal(fakeRequest(headers, body));
      expect(error).toBeInstanceOf(AuthenticationError);
      expect(error).toMatchObject({ status: 401, code });
    },
  );

  it.each([
    [
      'two Authorization headers',
      { authorization: [`Bearer ${SECRET}`, `Bearer ${SECRET}`] },
      undefined,
    ],
    ['two publishable-key headers', { [HEADER]: [PUBLISHABLE, PUBLISHABLE] }, undefined],
    [
      'the publishable-key header and public_key in the body',
      { [HEADER]: PUBLISHABLE },
      { public_key: PUBLISHABLE },
    ],
    [
      'Bearer and the publishable-key header',
      { authorization: `Bearer ${SECRET}`, [HEADER]: PUBLISHABLE },
      undefined,
    ],
    [
      'Bearer and public_key in the body',
      { authorization: `Bearer ${TOKEN}` },
      { public_key: PUBLISHABLE },
    ],
    ['public_key that is a number', {}, { public_key: 42 }],
    ['public_key that is null', {}, { public_key: null }],
    ['public_key that is a list', {}, { public_key: [PUBLISHABLE] }],
    ['public_key that is an object', {}, { public_key: { value: PUBLISHABLE } }],
  ] as [string, Record<string, string | string[]>, unknown][])(
    '%s: 400 invalid_request',
    (_what, headers, body) => {
      const error = refusal(fakeRequest(headers, body));
      expect(error).toBeInstanceOf(InvalidRequestError);
      expect(error).toMatchObject({ status: 400, code: 'invalid_request' });
    },
  );

  it('names the header sent twice, without echoing its values', () => {
    const error = refusal(
      fakeRequest({ authorization: [`Bearer ${SECRET}`, 'Bearer other-secret-000000000000'] }),
    );
    expect(error.message).toBe('Send the authorization header once');
    expect(error.message).not.toContain(SECRET);
  });

  describe(`an Authorization value longer than ${MAX_TOKEN_LENGTH} characters`, () => {
    const atLimit = `Bearer ${'a'.repeat(MAX_TOKEN_LENGTH - 'Bearer '.length)}`;
    const overLimit = `${atLimit}a`;

    it(`is read when it is exactly ${MAX_TOKEN_LENGTH} characters`, () => {
      expect(atLimit).toHaveLength(MAX_TOKEN_LENGTH);
      expect(presentedCredential(fakeRequest({ authorization: atLimit }), HEADER).kind).toBe(
        'secret',
      );
    });

    it.each([
      ['a long secret', overLimit],
      ['a long token', `Bearer ${TOKEN}${'A'.repeat(MAX_TOKEN_LENGTH)}`],
      ['a 10 KB value', `Bearer ${'x'.repeat(10 * 1024)}`],
      ['a long value without a scheme', 'x'.repeat(MAX_TOKEN_LENGTH + 1)],
    ])('%s: 401 invalid_api_key, and the value is not in the error', (_what, authorization) => {
      const error = refusal(fakeRequest({ authorization }));
      expect(error).toMatchObject({
        status: 401,
        code: 'invalid_api_key',
        message: 'Invalid API key',
      });
      expect(error.message).not.toContain(authorization.slice(7, 40));
    });
  });

  it('never reads credentials from the query string', () => {
    const req = fakeRequest();
    (req as unknown as { query: Record<string, string> }).query = {
      api_key: PUBLISHABLE,
      public_key: PUBLISHABLE,
      access_token: TOKEN,
      authorization: `Bearer ${SECRET}`,
    };
    expect(refusal(req)).toMatchObject({ status: 401, code: 'missing_credentials' });
  });
});

describe('authenticate() on a route that takes secret keys only', () => {
  const { keys, ring } = createFixtures();
  const tokens = new TokenService({ secret: TOKEN_SECRET, ttlSeconds: 600 });

  /** Runs the middleware on a request with `Authorization: Bearer <value>`; the error it passes on. */
  function run(
    middleware: ReturnType<typeof authenticate>,
    value: string,
  ): { error: unknown; req: Request } {
    const req = fakeRequest({ authorization: `Bearer ${value}` });
    Object.assign(req, { clientIp: '203.0.113.9' });
    let passed: unknown = 'next was not called';
    middleware(req, {} as unknown as Response, (error?: unknown) => {
      passed = error;
    });
    return { error: passed, req };
  }

  it('counts an unknown value of the token shape as a wrong key, a real token is refused as not allowed', () => {
    const authFailures = createAuthFailureLimiter({ limit: 2 });
    const middleware = authenticate({ keyStore: ring, accept: ['secret'], tokens, authFailures });
    const real = tokens.issue({
      id: keys.level2.id,
      accountId: 'acct_open',
      role: 'level-2',
    }).token;

    const refusedToken = run(middleware, real).error as AuthenticationError;
    const guesses = [
      'aaaa.bbbb.cccc-0123456789',
      'eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.sig-xyz',
    ].map((guess) => run(middleware, guess).error as TollgateError);
    const right = run(middleware, keys.level2.secretKey);

    expect(refusedToken.code).toBe('credential_not_allowed');
    expect(guesses.map((error) => error.status)).toEqual([401, 401]);
    expect(right.error).toBeInstanceOf(RateLimitedError);
    expect(right.req.auth).toBeUndefined();
  });
});

describe('refuseCredentialsInQuery', () => {
  /** Counts the query strings parsed while `run` runs. */
  function parsesDuring(run: () => void): number {
    const Original = globalThis.URLSearchParams;
    let parsed = 0;
    globalThis.URLSearchParams = class extends Original {
      constructor(...init: ConstructorParameters<typeof URLSearchParams>) {
        super(...init);
        parsed++;
      }
    };
    try {
      run();
    } finally {
      globalThis.URLSearchParams = Original;
    }
    return parsed;
  }

  it('scans a request URL once, however many checks the request meets', () => {
    const facts = { originalUrl: '/orders?page=2' } as RequestFacts;
    const parsed = parsesDuring(() => {
      refuseCredentialsInQuery(facts, undefined, undefined);
      refuseCredentialsInQuery(facts, undefined, undefined);
    });
    expect(parsed).toBe(1);
  });

  it('scans again when the URL is another, and refuses a credential there', () => {
    const facts = { originalUrl: '/orders?page=2' } as { originalUrl: string } & RequestFacts;
    refuseCredentialsInQuery(facts, undefined, undefined);
    facts.originalUrl = `/orders?api_key=${SECRET}`;
    expect(() => {
      refuseCredentialsInQuery(facts, undefined, undefined);
    }).toThrow(InvalidRequestError);
  });
});
