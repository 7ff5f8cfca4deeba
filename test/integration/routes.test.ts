import { ROUTES } from '../../gateway/routes';
import { ROLES, type Role } from '../../lib/model/roles';
import { allowedMethods, expectErrorBody } from '../helpers/error-body';
import { allSecrets, type TestKey } from '../helpers/fixtures';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { findLeaks } from '../helpers/logs';
import {
  credentialKindOf,
  exchangeToken,
  oddlySpacedBody,
  PRESENTATIONS,
  type Presentation,
  present,
} from '../helpers/routes';

/**
 * The sample gateway's routes, one by one: which credentials each route accepts, the minimum role,
 * the trailing slash, 405 with `Allow`, 404, `/healthz` and HEAD. The route table of the gateway
 * drives the loops; the expectations come from the table below, the routes as documented.
 */

type Kind = 'secret' | 'token' | 'publishable';

interface DocumentedRoute {
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly accepts: readonly Kind[] | 'key-pair';
  /** `undefined`: any role. */
  readonly minimumRole?: Role;
}

const BEARER: readonly Kind[] = ['secret', 'token'];

/** The sample gateway's routes as documented, written out independently of `gateway/routes.ts`. */
const DOCUMENTED_ROUTES: readonly DocumentedRoute[] = [
  { method: 'POST', path: '/api/v1/auth/generate-token/', accepts: 'key-pair' },
  { method: 'GET', path: '/api/v1/wallets/', accepts: BEARER },
  { method: 'GET', path: '/api/v1/transactions/', accepts: BEARER },
  { method: 'GET', path: '/api/v1/transactions/:id/', accepts: BEARER },
  { method: 'POST', path: '/api/v1/payment/status/', accepts: ['publishable', 'secret', 'token'] },
  { method: 'POST', path: '/api/v1/checkout/', accepts: ['publishable'] },
  { method: 'GET', path: '/api/v1/checkout/:id/', accepts: ['publishable'] },
  { method: 'POST', path: '/api/v1/payouts/', accepts: BEARER, minimumRole: 'level-2' },
  { method: 'POST', path: '/api/v1/payouts/:id/approve/', accepts: BEARER, minimumRole: 'level-3' },
  { method: 'POST', path: '/api/v1/otp/confirm/', accepts: BEARER, minimumRole: 'level-3' },
  { method: 'POST', path: '/api/v1/chargebacks/', accepts: BEARER, minimumRole: 'level-2' },
];

/** How a `credential_not_allowed` message names the credentials the route needs. */
const KIND_WORDS: Record<Kind, RegExp> = {
  secret: /secret key/,
  token: /token/,
  publishable: /publishable key/,
};

const ROLE_KEYS: Record<Role, 'level1' | 'level2' | 'level3' | 'admin'> = {
  'level-1': 'level1',
  'level-2': 'level2',
  'level-3': 'level3',
  administrator: 'admin',
};

const QUERY = '?a=1&b=2';

function documentedRoute(method: string, path: string): DocumentedRoute {
  const route = DOCUMENTED_ROUTES.find(
    (candidate) => candidate.method === method && candidate.path === path,
  );
  if (route === undefined) throw new Error(`${method} ${path} is not a documented route`);
  return route;
}

/** A concrete request path for a route pattern. */
function concrete(path: string): string {
  return path.replace(':id', 'id_42');
}

function rank(role: Role): number {
  return ROLES.indexOf(role);
}

type Expectation =
  | { outcome: 'proxied' }
  | { outcome: 'refused'; status: number; code: string; message: RegExp | string };

function expectationFor(route: DocumentedRoute, kind: Kind, role: Role): Expectation {
  if (route.accepts === 'key-pair') throw new Error('the token exchange has its own cases');
  if (!route.accepts.includes(kind)) {
    const words = route.accepts.map((accepted) => KIND_WORDS[accepted]);
    return {
      outcome: 'refused',
      status: 401,
      code: 'credential_not_allowed',
      message: new RegExp(words.map((w) => `(?=.*${w.source})`).join('')),
    };
  }
  if (route.minimumRole !== undefined && rank(role) < rank(route.minimumRole)) {
    return {
      outcome: 'refused',
      status: 403,
      code: 'insufficient_role',
      message: new RegExp(route.minimumRole),
    };
  }
  return { outcome: 'proxied' };
}

describe('the routes of the sample gateway', () => {
  let gateway: TestGateway;
  const tokens = new Map<Role, string>();

  const keyOf = (role: Role): TestKey => gateway.fixtures.keys[ROLE_KEYS[role]];

  beforeAll(async () => {
    // Limits are not under test here: make them unreachable.
    gateway = await startTestGateway({
      limits: {
        payments: 100_000,
        authenticated: 100_000,
        checkoutCreate: 100_000,
        checkoutRead: 100_000,
        authFailures: 100_000,
      },
    });
    for (const role of ROLES) tokens.set(role, await exchangeToken(gateway, keyOf(role)));
  });
  afterAll(async () => {
    await gateway.close();
  });
  afterEach(() => {
    expect(
      findLeaks(gateway.logs.lines.join('\n'), [
        ...allSecrets(gateway.fixtures),
        ...tokens.values(),
      ]),
    ).toEqual([]);
  });

  it('the gateway serves exactly the documented routes', () => {
    const served = ROUTES.map((route) => `${route.method} ${route.path}`).sort();
    const listed = DOCUMENTED_ROUTES.map((route) => `${route.method} ${route.path}`).sort();
    expect(served).toEqual(listed);
  });

  const proxiedRoutes = ROUTES.filter((route) => route.accept !== 'key-pair');
  const matrix = proxiedRoutes.flatMap((route) =>
    PRESENTATIONS.flatMap((presentation) =>
      ROLES.map((role) => ({ method: route.method, path: route.path, presentation, role })),
    ),
  );

  describe.each(proxiedRoutes.map((route) => [`${route.method} ${route.path}`, route] as const))(
    '%s',
    (_name, route) => {
      const cases = matrix.filter(
        (entry) => entry.method === route.method && entry.path === route.path,
      );
      it.each(cases.map((entry) => [entry.presentation, entry.role] as const))(
        'with a %s credential of a key of role %s answers as documented',
        async (presentation: Presentation, role: Role) => {
          const documented = documentedRoute(route.method, route.path);
          const expected = expectationFor(documented, credentialKindOf(presentation), role);
          const key = keyOf(role);
          const presented = present(presentation, key, tokens.get(role) ?? '');
          const body = oddlySpacedBody(presented.bodyField, route.method === 'POST');
          const path = concrete(route.path) + QUERY;
          const before = gateway.upstream.requests.length;

          const result = await gateway.send({
            method: route.method,
            path,
            headers: {
              ...presented.headers,
              ...(body === undefined ? {} : { 'content-type': 'application/json' }),
            },
            ...(body === undefined ? {} : { body }),
          });

          if (expected.outcome === 'refused') {
            expectErrorBody(result, expected);
            expect(gateway.upstream.requests.length).toBe(before);
            return;
          }
          expect(result.status).toBe(200);
          expect(result.body).toEqual({ ok: true, method: route.method, path });
          expect(gateway.upstream.requests.length).toBe(before + 1);
          const forwarded = gateway.upstream.requests.at(-1);
          expect(forwarded?.method).toBe(route.method);
          expect(forwarded?.url).toBe(path);
          expect(forwarded?.body.toString('utf8')).toBe(body ?? '');
          expect(forwarded?.headers['x-gateway-credential']).toBe(credentialKindOf(presentation));
          expect(forwarded?.headers['x-gateway-role']).toBe(role);
          expect(forwarded?.headers['x-gateway-key-id']).toBe(key.id);
          expect(forwarded?.headers['x-gateway-account-id']).toBe(key.accountId);
        },
      );
    },
  );

  describe('POST /api/v1/auth/generate-token/ (key pair in the body)', () => {
    it.each(ROLES.map((role) => [role]))(
      'exchanges the key pair of a %s key and never calls the upstream',
      async (role) => {
        const key = keyOf(role);
        const before = gateway.upstream.requests.length;
        const result = await gateway.send({
          method: 'POST',
          path: '/api/v1/auth/generate-token/',
          body: `{ "api_key" : ${JSON.stringify(key.publishableKey)},\n "api_secret":${JSON.stringify(key.secretKey)} }`,
          headers: { 'content-type': 'application/json' },
        });
        expect(result.status).toBe(200);
        expect(Object.keys(result.body ?? {}).sort()).toEqual([
          'expires_in',
          'token',
          'token_type',
        ]);
        expect(result.body).toMatchObject({ token_type: 'Bearer', expires_in: 1800 });
        expect(typeof result.body?.token).toBe('string');
        expect(gateway.upstream.requests.length).toBe(before);
      },
    );

    it.each(PRESENTATIONS.map((presentation) => [presentation]))(
      'refuses a %s credential without the key pair: 400 invalid_request, upstream not called',
      async (presentation) => {
        const presented = present(
          presentation,
          gateway.fixtures.keys.admin,
          tokens.get('administrator') ?? '',
        );
        const body = oddlySpacedBody(presented.bodyField, false);
        const before = gateway.upstream.requests.length;
        const result = await gateway.send({
          method: 'POST',
          path: '/api/v1/auth/generate-token/',
          headers: {
            ...presented.headers,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          ...(body === undefined ? {} : { body }),
        });
        expectErrorBody(result, {
          status: 400,
          code: 'invalid_request',
          message: /api_key|api_secret|key pair/,
        });
        expect(gateway.upstream.requests.length).toBe(before);
      },
    );
  });

  describe('trailing slash', () => {
    const withAndWithout = ROUTES.flatMap((route) =>
      [concrete(route.path), concrete(route.path).replace(/\/$/, '')].map(
        (path) => [route.method, path, route.path] as const,
      ),
    );

    it.each(withAndWithout)('%s %s matches its route', async (method, path, pattern) => {
      const documented = documentedRoute(method, pattern);
      const admin = gateway.fixtures.keys.admin;
      const before = gateway.upstream.requests.length;
      if (documented.accepts === 'key-pair') {
        const result = await gateway.send({
          method,
          path,
          body: { api_key: admin.publishableKey, api_secret: admin.secretKey },
        });
        expect(result.status).toBe(200);
        expect(typeof result.body?.token).toBe('string');
        expect(gateway.upstream.requests.length).toBe(before);
        return;
      }
      const presentation: Presentation = documented.accepts.includes('secret')
        ? 'secret'
        : 'publishable-header';
      const presented = present(presentation, admin, '');
      const result = await gateway.send({ method, path: path + QUERY, headers: presented.headers });
      expect(result.status).toBe(200);
      expect(gateway.upstream.requests.at(-1)?.url).toBe(path + QUERY);
      expect(gateway.upstream.requests.length).toBe(before + 1);
    });
  });

  describe('405 for a known path with another method', () => {
    const paths = [...new Set(DOCUMENTED_ROUTES.map((route) => route.path))];
    const cases = paths.flatMap((pattern) => {
      const allowed = DOCUMENTED_ROUTES.filter((route) => route.path === pattern).map(
        (route) => route.method,
      );
      const expectedAllow = (allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed).sort();
      const others = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'].filter(
        (method) => !expectedAllow.includes(method),
      );
      return others.flatMap((method) =>
        [concrete(pattern), concrete(pattern).replace(/\/$/, '')].map(
          (path) => [method, path, expectedAllow] as const,
        ),
      );
    });

    it.each(cases)('%s %s answers 405 with Allow: %j', async (method, path, expectedAllow) => {
      const before = gateway.upstream.requests.length;
      const result = await gateway.send({
        method,
        path,
        headers: { authorization: `Bearer ${gateway.fixtures.keys.admin.secretKey}` },
      });
      if (method === 'HEAD') expect(result.status).toBe(405);
      else expectErrorBody(result, { status: 405, code: 'method_not_allowed' });
      expect(allowedMethods(result.headers)).toEqual(expectedAllow);
      expect(gateway.upstream.requests.length).toBe(before);
    });
  });

  describe('404 for an unknown path', () => {
    const unknown = [
      ['GET', '/'],
      ['GET', '/api/v1/'],
      ['GET', '/api/v1/wallet/'],
      ['GET', '/api/v2/wallets/'],
      ['GET', '/API/V1/WALLETS/'],
      ['GET', '/api/v1/wallets/extra/'],
      ['GET', '/api/v1/transactions/a%2Fb/'],
      ['GET', '/api/v1/transactions/a.b/'],
      ['POST', '/api/v1/payouts/id_42/approve/extra/'],
      ['POST', '/api/v1/payouts/id_42/reject/'],
      ['DELETE', '/api/v1/keys/'],
      ['GET', '/healthz/extra'],
    ] as const;

    it.each(unknown)(
      '%s %s answers 404 not_found even with valid credentials',
      async (method, path) => {
        const before = gateway.upstream.requests.length;
        const result = await gateway.send({
          method,
          path,
          headers: { authorization: `Bearer ${gateway.fixtures.keys.admin.secretKey}` },
        });
        expectErrorBody(result, { status: 404, code: 'not_found' });
        expect(gateway.upstream.requests.length).toBe(before);
      },
    );
  });

  describe('/healthz', () => {
    it.each([['/healthz'], ['/healthz/']])(
      'GET %s answers 200 without credentials and never calls the upstream',
      async (path) => {
        const before = gateway.upstream.requests.length;
        const result = await gateway.send({ path });
        expect(result.status).toBe(200);
        expect(result.headers['content-type']).toMatch(/^application\/json/);
        expect(result.body).toEqual({ status: 'ok', rate_limits: 'memory' });
        expect(gateway.upstream.requests.length).toBe(before);
      },
    );

    it('HEAD /healthz answers 200 with no body', async () => {
      const result = await gateway.send({ method: 'HEAD', path: '/healthz' });
      expect(result.status).toBe(200);
      expect(result.text).toBe('');
    });
  });

  describe('HEAD on GET routes', () => {
    const getRoutes = ROUTES.filter((route) => route.method === 'GET');

    it.each(getRoutes.map((route) => [route.path]))(
      'HEAD %s is proxied as HEAD with the path unchanged',
      async (pattern) => {
        const documented = documentedRoute('GET', pattern);
        if (documented.accepts === 'key-pair') throw new Error('no GET route takes a key pair');
        const presentation: Presentation = documented.accepts.includes('secret')
          ? 'secret'
          : 'publishable-header';
        const path = concrete(pattern) + QUERY;
        const before = gateway.upstream.requests.length;
        const result = await gateway.send({
          method: 'HEAD',
          path,
          headers: present(presentation, gateway.fixtures.keys.level1, '').headers,
        });
        expect(result.status).toBe(200);
        expect(result.text).toBe('');
        expect(gateway.upstream.requests.length).toBe(before + 1);
        expect(gateway.upstream.requests.at(-1)).toMatchObject({ method: 'HEAD', url: path });
      },
    );

    it.each(getRoutes.map((route) => [route.path]))(
      'HEAD %s without credentials answers 401 and never calls the upstream',
      async (pattern) => {
        const before = gateway.upstream.requests.length;
        const result = await gateway.send({ method: 'HEAD', path: concrete(pattern) });
        expect(result.status).toBe(401);
        expect(result.headers['x-request-id']).toEqual(expect.any(String));
        expect(gateway.upstream.requests.length).toBe(before);
      },
    );
  });
});
