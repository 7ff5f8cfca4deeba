import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../gateway/config';
import { type RunningGateway, startGateway } from '../../gateway/start';
import { recordBirths } from '../helpers/births';
import { allSecrets, createFixtures, TOKEN_SECRET } from '../helpers/fixtures';
import { captureLogs, findLeaks } from '../helpers/logs';
import { startRecordingUpstream, type RecordingUpstream } from '../helpers/upstream';
import { libraryMessagesIn } from './hostile-cases';
import { type RawRequestParts, rawRequest, sendRaw } from './raw-http';

/**
 * Requests that Node's HTTP parser refuses never reach Express. The server `startGateway` runs
 * answers them with the JSON error body (through its `clientError` handler), echoes
 * nothing of them, and keeps serving.
 */

const fixtures = createFixtures();
const secret = fixtures.keys.admin.secretKey;

interface ParserCase {
  readonly name: string;
  readonly request: RawRequestParts;
  readonly status: number;
  readonly code: string;
}

const cases: ParserCase[] = [
  {
    name: 'a NUL byte in a header value',
    request: { target: '/api/v1/wallets/', headers: [['Authorization', `Bearer ${secret}\0`]] },
    status: 400,
    code: 'invalid_request',
  },
  {
    name: 'a bare CR injecting a header',
    request: {
      target: '/api/v1/wallets/',
      headers: [['Authorization', `Bearer ${secret}\rX-Gateway-Role: administrator`]],
    },
    status: 400,
    code: 'invalid_request',
  },
  {
    name: 'headers over 16 KB',
    request: {
      target: '/api/v1/wallets/',
      headers: [['Authorization', `Bearer ${secret}${'k'.repeat(20 * 1024)}`]],
    },
    status: 431,
    code: 'headers_too_large',
  },
  {
    name: 'Transfer-Encoding with Content-Length',
    request: {
      method: 'POST',
      target: '/api/v1/auth/generate-token/',
      headers: [
        ['Transfer-Encoding', 'chunked'],
        ['Content-Length', '2'],
      ],
      body: `2\r\n{}\r\n0\r\n\r\n{"api_secret": "${secret}"}`,
    },
    status: 400,
    code: 'invalid_request',
  },
  {
    name: 'bare LF line endings',
    request: {
      target: '/api/v1/wallets/',
      headers: [['Authorization', `Bearer ${secret}`]],
      eol: '\n',
    },
    status: 400,
    code: 'invalid_request',
  },
  {
    name: 'a space inside the request target',
    request: { target: `/api/v1/transactions/${secret} x/` },
    status: 400,
    code: 'invalid_request',
  },
];

describe('requests refused by the HTTP parser, on the server startGateway runs', () => {
  let directory: string;
  let upstream: RecordingUpstream;
  let gateway: RunningGateway;
  const logs = captureLogs();

  beforeAll(async () => {
    directory = mkdtempSync(join(tmpdir(), 'tollgate-security-'));
    const keysFile = join(directory, 'keys.json');
    writeFileSync(keysFile, JSON.stringify(fixtures.document));
    upstream = await startRecordingUpstream();
    const config = loadConfig({
      PORT: '0',
      TOLLGATE_KEYS_FILE: keysFile,
      TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
      TOLLGATE_UPSTREAM_URL: upstream.url,
    });
    gateway = await startGateway(config, { logger: logs.logger, print: () => undefined });
  });
  afterAll(async () => {
    await gateway.stop(0);
    await upstream.close();
    rmSync(directory, { recursive: true, force: true });
  });

  it.each(cases.map((row) => [row.name, row] as const))(
    '%s: the JSON error body',
    async (_name, row) => {
      const port = Number(new URL(gateway.url).port);
      const result = await sendRaw({ port, bytes: rawRequest(row.request) });
      expect(result.status).toBe(row.status);
      expect(result.headers['content-type']).toMatch(/^application\/json/);
      expect(result.body).toEqual({
        status: row.status,
        code: row.code,
        message: expect.any(String) as unknown,
        request_id: expect.stringMatching(/^[0-9a-f-]{36}$/) as unknown,
      });
      expect(findLeaks(result.raw, allSecrets(fixtures))).toEqual([]);
      expect(libraryMessagesIn(result.raw)).toEqual([]);
      expect(result.raw).not.toMatch(/HPE_|Parse Error/);
      expect(upstream.requests).toHaveLength(0);
      const health = await sendRaw({ port, bytes: rawRequest({ target: '/healthz' }) });
      expect(health.status).toBe(200);
    },
  );

  it('hands the app requests and responses born with its Express prototypes', async () => {
    const births = recordBirths(gateway.server, gateway.app);
    try {
      const port = Number(new URL(gateway.url).port);
      const wallets = await sendRaw({
        port,
        bytes: rawRequest({
          target: '/api/v1/wallets/',
          headers: [['Authorization', `Bearer ${secret}`]],
        }),
      });
      expect(wallets.status).toBe(200);
      expect(upstream.requests.at(-1)?.url).toBe('/api/v1/wallets/');
      const health = await sendRaw({ port, bytes: rawRequest({ target: '/healthz' }) });
      expect(health.status).toBe(200);
    } finally {
      births.stop();
    }
    expect(births.born).toEqual([true, true]);
  });

  it('logs nothing of the refused requests', () => {
    expect(findLeaks(logs.lines.join('\n'), allSecrets(fixtures))).toEqual([]);
  });
});
