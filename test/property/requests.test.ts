import fc from 'fast-check';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { expectSafeAnswer, expectSafeLogs, UNTHROTTLED } from '../security/hostile-cases';
import { rawRequest, sendRaw } from '../security/raw-http';

/**
 * Whole requests under random input, sent as raw bytes: any target, method and forwarding header
 * ends in a deterministic answer below 500 (from the gateway, or from Node's parser for bytes it
 * refuses), and protected routes are never reached without credentials.
 */

const RUNS = 300;
const ROUTE_WORDS = [
  'api',
  'v1',
  'API',
  'wallets',
  'transactions',
  'payouts',
  'approve',
  'checkout',
  'auth',
  'generate-token',
  'healthz',
  '..',
  '.',
  '',
  'id_1',
];

const segment = fc.oneof(
  fc.constantFrom(...ROUTE_WORDS),
  fc.stringMatching(/^[A-Za-z0-9._~!$&'()*+,;=:@-]{0,12}$/),
  fc.stringMatching(/^(%[0-9A-Fa-f]{2}|%[G-Zg-z%]{1,2}|[a-z]){1,6}$/),
);
const target = fc.oneof(
  fc.array(segment, { maxLength: 7 }).map((parts) => `/${parts.join('/')}`),
  fc
    .tuple(fc.array(segment, { maxLength: 6 }), fc.stringMatching(/^[a-z0-9=&;%_.-]{0,30}$/))
    .map(([parts, query]) => `/${parts.join('/')}?${query}`),
  fc
    .tuple(
      fc.stringMatching(/^[a-z0-9-]{1,12}(\.[a-z0-9-]{1,12}){0,2}$/),
      fc.array(segment, { maxLength: 5 }),
    )
    .map(([host, parts]) => `http://${host}/${parts.join('/')}`),
  fc.constantFrom(
    '*',
    '//api/v1/wallets/',
    '/api/v1/wallets/..%2f',
    '/%',
    '/api/v1/transactions/%E0%A4%A/',
  ),
);
const method = fc.constantFrom(
  'GET',
  'POST',
  'HEAD',
  'OPTIONS',
  'PUT',
  'DELETE',
  'PATCH',
  'TRACE',
  'PROPFIND',
  'MKCOL',
);
const forwarded = fc.oneof(
  fc.ipV4(),
  fc.ipV6(),
  fc.ipV4Extended(),
  fc.stringMatching(/^[0-9a-f:.%, [\]a-z-]{0,40}$/),
  fc
    .array(fc.oneof(fc.ipV4(), fc.ipV6()), { minLength: 2, maxLength: 4 })
    .map((list) => list.join(', ')),
);

describe.each([
  ['no trusted proxy', false],
  ['a proxy trusted by address', ['127.0.0.1']],
] as const)('random requests, %s', (_name, trustProxy) => {
  let gateway: TestGateway;
  beforeAll(async () => {
    gateway = await startTestGateway({
      ...UNTHROTTLED,
      trustProxy: trustProxy === false ? false : [...trustProxy],
    });
  });
  afterAll(async () => {
    await gateway.close();
  });

  it('answers any target, method and forwarded address below 500, never reaching the upstream unauthenticated', async () => {
    await fc.assert(
      fc.asyncProperty(
        method,
        target,
        forwarded,
        fc.option(method, { nil: undefined }),
        async (verb, path, xff, override) => {
          const headers: [string, string][] = [['X-Forwarded-For', xff]];
          if (override !== undefined) headers.push(['X-HTTP-Method-Override', override]);
          const firstLine = gateway.logs.lines.length;
          const result = await sendRaw({
            port: gateway.port,
            bytes: rawRequest({ method: verb, target: path, headers }),
          });
          expectSafeAnswer(result, gateway.fixtures);
          expectSafeLogs(gateway, firstLine);
          expect(result.status === 200 && !path.includes('healthz')).toBe(false);
        },
      ),
      { numRuns: RUNS },
    );
    expect(gateway.upstream.requests).toHaveLength(0);
    expect((await gateway.send({ path: '/healthz' })).status).toBe(200);
  });
});
