import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { loadConfig } from '../../gateway/config';
import { type RunningGateway, startGateway } from '../../gateway/start';
import { ConfigurationError } from '../../lib/errors';
import { generateKey } from '../../lib/model/key-format';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import { migrate } from '../../lib/keys/pg-schema';
import { GATEWAY_LIMIT_SCOPES } from '../../gateway/keys-cli/limit-scopes';
import { expectErrorBody } from '../helpers/error-body';
import { TOKEN_SECRET } from '../helpers/fixtures';
import { expectOneLineError, runKeys } from '../helpers/keys-cli';
import { captureLogs, type CapturedLogs } from '../helpers/logs';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';
import { type HttpResult, httpRequest } from '../helpers/process';

/**
 * Every field of the admin API through the edges of what JSON, `Date`, the columns and the API
 * description can hold, on a real PostgreSQL behind the gateway as `npm start` runs it (its
 * answers checked against the description). Each edge is either stored exactly as given or
 * refused with a 400 naming the field, leaving the database as it was; after every request the
 * listing still matches the description; no request is answered 503 or 500 while the database is
 * up; and the database then goes through `tollgate-keys export` and `import` unchanged. The same
 * deadlines in a keys file are refused by the gateway's loader, by the key command on the file,
 * and by `import` into the database.
 */

const ADMIN_TOKEN = 'edge-admin-token-0123456789abcdefghijklmnop';
/** The last deadline a key may have, and its text. */
const LAST_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const LAST_TEXT = '9999-12-31T23:59:59.999Z';
const EXPIRY_RANGE = /from 1970-01-01T00:00:00\.000Z to 9999-12-31T23:59:59\.999Z/;

interface Edge {
  readonly label: string;
  readonly method: string;
  readonly path: string;
  /** The body as sent, byte for byte (`-0`, `1e400` and `9e18` stay as written). */
  readonly body: string;
  /** The message, naming the field. */
  readonly message: RegExp;
  readonly status?: number;
  readonly code?: string;
}

const big = (length: number): string => 'x'.repeat(length);

describeWithPostgres('the admin API at the edges of every field, on PostgreSQL', () => {
  let server: TestPostgres;
  let url: string;
  let gateway: RunningGateway;
  let logs: CapturedLogs;
  let directory: string;

  const admin = (method: string, route: string, body?: string): Promise<HttpResult> =>
    httpRequest({
      port: Number(new URL(gateway.adminUrl ?? 'http://x:1').port),
      method,
      path: route,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      ...(body === undefined ? {} : { jsonText: body }),
    });
  /** The listing, after checking that it answers 200 (a mismatch with the description is a 500). */
  const listing = async (): Promise<unknown> => {
    const listed = await admin('GET', '/admin/v1/accounts');
    expect({ status: listed.status, text: listed.text.slice(0, 300) }).toMatchObject({
      status: 200,
    });
    return listed.body;
  };
  const created = async (route: string, body: string): Promise<Record<string, unknown>> => {
    const answer = await admin('POST', route, body);
    expect({ status: answer.status, text: answer.text.slice(0, 300) }).toMatchObject({
      status: 201,
    });
    return answer.body ?? {};
  };

  beforeAll(async () => {
    server = await startTestPostgres();
    url = await server.createDatabase('edges');
    const pool = new Pool({ connectionString: url });
    await migrate(pool);
    await pool.end();
    logs = captureLogs();
    gateway = await startGateway(
      loadConfig({
        PORT: '0',
        TOLLGATE_DATABASE_URL: url,
        TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
        TOLLGATE_ADMIN_PORT: '0',
        TOLLGATE_ADMIN_TOKEN_SHA256: sha256(ADMIN_TOKEN).toString('hex'),
      }),
      { logger: logs.logger, print: () => undefined },
    );
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-edges-'));
    await created('/admin/v1/accounts', '{"id":"acct_edge"}');
    await created('/admin/v1/accounts/acct_edge/keys', '{"id":"key_edge"}');
  }, 60_000);
  afterAll(async () => {
    await gateway.stop(500);
    server.destroy();
    rmSync(directory, { recursive: true, force: true });
  });

  const refusals: Edge[] = [
    // The account's id.
    ...[
      '""',
      '"-x"',
      JSON.stringify(big(65)),
      JSON.stringify(big(15_000)),
      '42',
      'null',
      '"a\\u0000b"',
      '"é"',
    ].map((id): Edge => ({
      label: `account id ${id.slice(0, 20)}`,
      method: 'POST',
      path: '/admin/v1/accounts',
      body: `{"id":${id}}`,
      message: /^id: /,
    })),
    // Its whitelist.
    ...[
      '[]',
      '["999.1.1.1"]',
      '["10.0.0.0/33"]',
      '"10.0.0.1"',
      '[1]',
      `[${JSON.stringify(big(15_000))}]`,
    ].map((entries): Edge => ({
      label: `ip_whitelist ${entries.slice(0, 20)}`,
      method: 'PUT',
      path: '/admin/v1/accounts/acct_edge/ip-whitelist',
      body: `{"entries":${entries}}`,
      message: /^entries/,
    })),
    // Its limits: JSON's numbers at their edges.
    ...[
      '0',
      '-1',
      '-0',
      '1.5',
      '1000001',
      String(Number.MAX_SAFE_INTEGER),
      '9e18',
      '8640000000000001',
      '1e400',
      '"NaN"',
      '"100"',
      'null',
    ].map((limit): Edge => ({
      label: `limits.payments ${limit}`,
      method: 'PUT',
      path: '/admin/v1/accounts/acct_edge/limits',
      body: `{"limits":{"payments":${limit}}}`,
      message: /^limits\.payments/,
    })),
    {
      label: 'limits of an unknown scope',
      method: 'PUT',
      path: '/admin/v1/accounts/acct_edge/limits',
      body: `{"limits":{${JSON.stringify(big(10_000))}:5}}`,
      message: /^limits\.x{1,64}: account "acct_edge": unknown scope "x{64}"; /,
    },
    // A key's role.
    ...['"root"', JSON.stringify(big(15_000)), '42', 'null'].map((role): Edge => ({
      label: `role ${role.slice(0, 20)}`,
      method: 'POST',
      path: '/admin/v1/accounts/acct_edge/keys',
      body: `{"role":${role}}`,
      message: /^role: /,
    })),
    // Its permissions: the message names what was sent, never an id made for the key.
    ...[
      ['[]', /^permissions: an empty list would allow nothing/],
      ['["x"]', /^permissions\[0\]: unknown permission "x"; expected one of /],
      [`[${JSON.stringify(big(15_000))}]`, /^permissions\[0\]: unknown permission "x{64}"; /],
      [
        '["wallets:read","wallets:read"]',
        /^permissions\[1\]: permission "wallets:read" is listed twice$/,
      ],
      ['[1]', /^permissions\[0\]: /],
      ['"wallets:read"', /^permissions: /],
    ].map(([permissions, message]): Edge => ({
      label: `permissions ${String(permissions).slice(0, 20)}`,
      method: 'POST',
      path: '/admin/v1/accounts/acct_edge/keys',
      body: `{"permissions":${String(permissions)}}`,
      message: message as RegExp,
    })),
    {
      label: 'permissions of an existing key',
      method: 'PATCH',
      path: '/admin/v1/keys/key_edge',
      body: '{"permissions":["x"]}',
      message: /^permissions\[0\]: key "key_edge": unknown permission "x"; /,
    },
    // A key's deadline: past what Date, the description and the keys file hold, or not a time.
    ...[
      ['8640000000000000', EXPIRY_RANGE],
      ['8640000000000001', EXPIRY_RANGE],
      [String(Number.MAX_SAFE_INTEGER), EXPIRY_RANGE],
      ['9e18', EXPIRY_RANGE],
      ['1e400', /^expires_at: /],
      [String(LAST_MS + 1), EXPIRY_RANGE],
      ['-1', EXPIRY_RANGE],
      ['-8640000000000000', EXPIRY_RANGE],
      ['-0', /^expires_at: must be in the future$/],
      ['0', /^expires_at: must be in the future$/],
      ['1.5', /^expires_at: /],
      ['"NaN"', /^expires_at: must be an RFC 3339 time/],
      ['"Infinity"', /^expires_at: must be an RFC 3339 time/],
      ['"+275760-09-13T00:00:00.000Z"', /^expires_at: must be an RFC 3339 time/],
      ['"10000-01-01T00:00:00Z"', /^expires_at: must be an RFC 3339 time/],
      ['"9999-12-31T23:59:59-00:01"', EXPIRY_RANGE],
      ['"0000-01-01T00:00:00Z"', EXPIRY_RANGE],
      ['"1969-12-31T23:59:59.999Z"', EXPIRY_RANGE],
      ['"2020-01-01T00:00:00Z"', /^expires_at: must be in the future$/],
      ['"2999-02-29T00:00:00Z"', /^expires_at: must be an RFC 3339 time/],
      [
        JSON.stringify(`2999-01-01T00:00:00.${'1'.repeat(15_000)}Z`),
        /^expires_at: must be an RFC 3339 time/,
      ],
      ['true', /^expires_at: /],
    ].map(([expiry, message]): Edge => ({
      label: `expires_at ${String(expiry).slice(0, 30)}`,
      method: 'POST',
      path: '/admin/v1/accounts/acct_edge/keys',
      body: `{"expires_at":${String(expiry)}}`,
      message:
        message === EXPIRY_RANGE
          ? new RegExp(`^expires_at: .*${EXPIRY_RANGE.source}`)
          : (message as RegExp),
    })),
    // A roll's grace.
    ...[
      '-1',
      '604801',
      String(Number.MAX_SAFE_INTEGER),
      '9e18',
      '1e400',
      '1.5',
      '"60"',
      'null',
    ].map((grace): Edge => ({
      label: `grace_seconds ${grace}`,
      method: 'POST',
      path: '/admin/v1/keys/key_edge/roll',
      body: `{"grace_seconds":${grace}}`,
      message: /^grace_seconds: /,
    })),
    // Ids in the path that no account or key can have.
    ...[
      ['PUT', `/admin/v1/accounts/${big(5000)}/limits`, '{"limits":null}'],
      ['PUT', '/admin/v1/accounts/a%00b/ip-whitelist', '{"entries":null}'],
      ['POST', '/admin/v1/accounts/%C3%A9/keys', '{}'],
      ['PATCH', '/admin/v1/keys/a%00b', '{"role":"level-1"}'],
      ['POST', '/admin/v1/keys/%F0%9F%94%91/roll', '{"grace_seconds":0}'],
      ['POST', '/admin/v1/keys/a%00b/revoke', undefined],
    ].map(([method, route, body]): Edge => ({
      label: `${String(method)} ${String(route).slice(0, 40)}`,
      method: String(method),
      path: String(route),
      body: body ?? '',
      message: /^No (account|key) with id /,
      status: 404,
      code: 'not_found',
    })),
  ];

  it.each(refusals.map((edge) => [edge.label, edge]))(
    '%s: refused, naming what was sent, and nothing is stored',
    async (_label, edge) => {
      const before = await listing();
      const answer = await admin(edge.method, edge.path, edge.body === '' ? undefined : edge.body);
      const body = expectErrorBody(answer, {
        status: edge.status ?? 400,
        code: edge.code ?? 'invalid_request',
        message: edge.message,
      });
      // Never an id the sender did not choose, and never the whole of a huge value.
      expect(String(body.message)).not.toMatch(/key_[0-9a-f]{12}/);
      expect(String(body.message).length).toBeLessThan(600);
      expect(await listing()).toEqual(before);
    },
  );

  it('stores the edges it takes exactly as they were given', async () => {
    const last = await created(
      '/admin/v1/accounts/acct_edge/keys',
      `{"expires_at":"${LAST_TEXT}"}`,
    );
    expect(last.expires_at).toBe(LAST_TEXT);
    const lastMs = await created('/admin/v1/accounts/acct_edge/keys', `{"expires_at":${LAST_MS}}`);
    expect(lastMs.expires_at).toBe(LAST_TEXT);
    const offset = await created(
      '/admin/v1/accounts/acct_edge/keys',
      '{"expires_at":"9999-12-31T23:59:59.999+00:00"}',
    );
    expect(offset.expires_at).toBe(LAST_TEXT);
    const limits = await admin(
      'PUT',
      '/admin/v1/accounts/acct_edge/limits',
      '{"limits":{"payments":1000000,"authenticated":1}}',
    );
    expect(limits.body).toMatchObject({ limits: { authenticated: 1, payments: 1000000 } });
    const longest = await created('/admin/v1/accounts', `{"id":"${'a'.repeat(64)}"}`);
    expect(longest.id).toBe('a'.repeat(64));
    // A keys file holds accounts with keys only: give it one, so the backup below holds it.
    await created(`/admin/v1/accounts/${'a'.repeat(64)}/keys`, `{"id":"${'k'.repeat(64)}"}`);
    // -0 seconds of grace is none: the old key stops now.
    const rolled = await created(
      `/admin/v1/keys/${String(lastMs.id)}/roll`,
      '{"grace_seconds":-0}',
    );
    const previous = rolled.previous as { expires_at: string };
    expect(Date.parse(previous.expires_at)).toBeLessThanOrEqual(Date.now());
    const listed = (await listing()) as {
      accounts: {
        id: string;
        limits: unknown;
        keys: { id: string; expires_at: string | null }[];
      }[];
    };
    const edge = listed.accounts.find((account) => account.id === 'acct_edge');
    expect(edge?.limits).toEqual({ authenticated: 1, payments: 1000000 });
    expect(edge?.keys.find((key) => key.id === last.id)?.expires_at).toBe(LAST_TEXT);
    expect(edge?.keys.find((key) => key.id === offset.id)?.expires_at).toBe(LAST_TEXT);
  });

  it('answered no request 5xx, and logged no unexpected error', () => {
    const faults = logs
      .entries()
      .filter(
        (entry) =>
          (typeof entry.status === 'number' && entry.status >= 500) ||
          entry.msg === 'unexpected error' ||
          entry.event === 'admin.database_unavailable',
      );
    expect(faults).toEqual([]);
  });

  it('goes through tollgate-keys export and import unchanged, into a file the gateway loads', async () => {
    const backup = path.join(directory, 'backup.json');
    const exported = await runKeys(['export', '--database-url', url, '--out', backup]);
    expect({ code: exported.code, stderr: exported.stderr }).toEqual({ code: 0, stderr: '' });
    const document = JSON.parse(readFileSync(backup, 'utf8')) as unknown;
    expect(() =>
      KeyRing.fromDocument(document, backup, { limitScopes: GATEWAY_LIMIT_SCOPES }),
    ).not.toThrow();
    expect(JSON.stringify(document)).toContain(`"expiresAt":"${LAST_TEXT}"`);
    const copy = await server.createDatabase('edges_copy');
    const pool = new Pool({ connectionString: copy });
    await migrate(pool);
    await pool.end();
    const imported = await runKeys(['import', '--file', backup, '--database-url', copy]);
    expect({ code: imported.code, stderr: imported.stderr }).toEqual({ code: 0, stderr: '' });
    const again = path.join(directory, 'again.json');
    const reexported = await runKeys(['export', '--database-url', copy, '--out', again]);
    expect(reexported.code).toBe(0);
    expect(JSON.parse(readFileSync(again, 'utf8'))).toEqual(document);
  });

  it.each([
    ['22003', 400, 'invalid_request', undefined],
    ['23505', 409, 'conflict', undefined],
    ['08006', 503, 'upstream_unavailable', 'admin.database_unavailable'],
    ['53300', 503, 'upstream_unavailable', 'admin.database_unavailable'],
    ['57P01', 503, 'upstream_unavailable', 'admin.database_unavailable'],
    ['XX001', 500, 'internal_error', undefined],
    ['42501', 500, 'internal_error', undefined],
  ] as const)(
    'a database failure %s is answered %i %s, and every 5xx is logged with its code',
    async (sqlState, status, code, event) => {
      // A real failure of the database, of the class asked for, on the account's next write.
      const pool = new Pool({ connectionString: url });
      await pool.query(
        `CREATE OR REPLACE FUNCTION edge_fault() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'edge fault' USING ERRCODE = '${sqlState}'; END $$;
         CREATE OR REPLACE TRIGGER edge_fault BEFORE UPDATE ON accounts
           FOR EACH ROW EXECUTE FUNCTION edge_fault()`,
      );
      logs.clear();
      try {
        const answer = await admin(
          'PUT',
          '/admin/v1/accounts/acct_edge/limits',
          '{"limits":{"payments":7}}',
        );
        expectErrorBody(answer, { status, code });
        const logged = logs
          .entries()
          .filter((entry) => entry.level === 50 || entry.level === 'error');
        if (status >= 500) {
          expect(logged).toEqual([
            expect.objectContaining({
              error: expect.objectContaining({ code: sqlState }) as unknown,
              ...(event === undefined ? {} : { event }),
            }),
          ]);
        } else {
          expect(logged).toEqual([]);
        }
        expect(logs.lines.join('\n')).not.toContain('edge fault');
      } finally {
        await pool.query('DROP TRIGGER edge_fault ON accounts');
        await pool.end();
      }
    },
  );

  describe('the same deadlines in a keys file', () => {
    const keysFile = (expiresAt: unknown): unknown => ({
      accounts: [
        {
          id: 'acct_file',
          keys: [
            {
              id: 'key_file',
              publishableKey: generateKey('publishable', 'test'),
              secretKeySha256: sha256(generateKey('secret', 'test')).toString('hex'),
              expiresAt,
            },
          ],
        },
      ],
    });
    const WHERE = 'accounts\\[0\\]\\.keys\\[0\\]\\.expiresAt: ';
    const fileEdges: [unknown, RegExp][] = [
      ['+275760-09-13T00:00:00.000Z', /must be an RFC 3339 time/],
      ['10000-01-01T00:00:00Z', /must be an RFC 3339 time/],
      ['0000-01-01T00:00:00Z', EXPIRY_RANGE],
      ['1969-12-31T23:59:59.999Z', EXPIRY_RANGE],
      ['9999-12-31T23:59:59-00:01', EXPIRY_RANGE],
      [8640000000000000, /must be an RFC 3339 time/],
      [Number.MAX_SAFE_INTEGER, /must be an RFC 3339 time/],
    ];

    it.each(fileEdges.map(([value, message]) => [String(value), value, message]))(
      '%s: refused by the loader, the key command on the file, and import into the database',
      async (_label, value, message) => {
        const document = keysFile(value);
        const file = path.join(directory, 'edge.json');
        writeFileSync(file, JSON.stringify(document), { mode: 0o600 });
        const pattern = new RegExp(`${WHERE}.*${message.source}`);
        let thrown: unknown;
        try {
          KeyRing.fromDocument(document, file, { limitScopes: GATEWAY_LIMIT_SCOPES });
        } catch (error) {
          thrown = error;
        }
        expect(thrown).toBeInstanceOf(ConfigurationError);
        expect((thrown as Error).message).toMatch(pattern);
        expectOneLineError(await runKeys(['list', '--file', file]), pattern);
        expectOneLineError(
          await runKeys(['roll', '--key', 'key_file', '--grace', '0', '--file', file]),
          pattern,
        );
        expectOneLineError(
          await runKeys(['import', '--file', file, '--database-url', url]),
          pattern,
        );
        // The file is as it was: the refusing command wrote nothing.
        expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(document);
      },
    );

    it('takes the last deadline, and the first', async () => {
      const file = path.join(directory, 'last.json');
      for (const value of [LAST_TEXT, '1970-01-01T00:00:00Z']) {
        writeFileSync(file, JSON.stringify(keysFile(value)), { mode: 0o600 });
        const listed = await runKeys(['list', '--file', file]);
        expect({ code: listed.code, stderr: listed.stderr }).toEqual({ code: 0, stderr: '' });
      }
    });
  });
});
