import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { docBlock, workDirectory } from '../helpers/doc-blocks';
import { createFixtures } from '../helpers/fixtures';
import { childEnv, distScript, httpRequest, type HttpResult } from '../helpers/process';
import { freePort } from '../helpers/redis';

/**
 * docs/core.md's door on `node:http`, run as written against the built package: its block,
 * compiled to CommonJS with `tollgate` and `tollgate/core` pointed at dist/, serves `GET /orders`
 * behind a Redis-less gate that reads the keys document of its directory.
 */

const { keys, document } = createFixtures();
let directory = '';
let door: ChildProcess | undefined;
let port = 0;

/** The block as a CommonJS script importing the built entries. */
function doorScript(): string {
  const { code } = docBlock('core-node-http-door');
  const entries: Record<string, string> = {
    tollgate: distScript('lib/index.js'),
    'tollgate/core': distScript('lib/entry/core.js'),
  };
  const withEntries = code.replace(
    /from '(tollgate(?:\/core)?)'/g,
    (_line, entry: string) => `from ${JSON.stringify(entries[entry])}`,
  );
  expect(withEntries).not.toMatch(/from 'tollgate/);
  return ts.transpileModule(withEntries, {
    compilerOptions: {
      module: ts.ModuleKind.CommonJS,
      target: ts.ScriptTarget.ES2022,
      esModuleInterop: true,
    },
  }).outputText;
}

beforeAll(async () => {
  directory = workDirectory();
  writeFileSync(path.join(directory, 'keys.json'), JSON.stringify(document));
  writeFileSync(path.join(directory, 'door.cjs'), doorScript());
  port = await freePort();
  const child = spawn(process.execPath, ['door.cjs'], {
    cwd: directory,
    env: childEnv({ PORT: String(port) }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  door = child;
  await new Promise<void>((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => {
      reject(new Error(`the door did not start: ${output}`));
    }, 20_000);
    const read = (chunk: Buffer): void => {
      output += chunk.toString();
      if (output.includes(`listening on ${port}`)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the door exited (${String(code)}): ${output}`));
    });
  });
}, 30_000);

afterAll(() => {
  door?.kill('SIGKILL');
  if (directory !== '') rmSync(directory, { recursive: true, force: true });
});

const orders = (headers: Record<string, string> = {}): Promise<HttpResult> =>
  httpRequest({ port, path: '/orders', headers });

describe("docs/core.md's door on node:http", () => {
  it('refuses a request without a key with the kit error body', async () => {
    const answer = await orders();
    expect(answer.status).toBe(401);
    expect(answer.body).toEqual({
      status: 401,
      code: 'missing_credentials',
      message: expect.any(String) as string,
      request_id: answer.headers['x-request-id'],
    });
  });

  it('refuses a key that is not in the keys document', async () => {
    const answer = await orders({ authorization: `Bearer ${keys.level2.secretKey}x` });
    expect(answer.status).toBe(401);
    expect(answer.body?.code).toBe('invalid_api_key');
  });

  it('lets a key of the document through with its account and the RateLimit headers, then limits the account', async () => {
    const first = await orders({ authorization: `Bearer ${keys.level2.secretKey}` });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ account: 'acct_open', orders: [] });
    expect(first.headers['ratelimit-policy']).toMatch(/"orders"; q=2; w=60/);
    expect(first.headers.ratelimit).toMatch(/"orders"; r=1; t=\d+/);
    // The account's second key shares its budget.
    expect((await orders({ authorization: `Bearer ${keys.level1.secretKey}` })).status).toBe(200);
    const third = await orders({ authorization: `Bearer ${keys.level2.secretKey}` });
    expect(third.status).toBe(429);
    expect(third.body?.code).toBe('rate_limited');
    expect(third.body?.scope).toBe('orders');
    expect(Number(third.headers['retry-after'])).toBeGreaterThan(0);
  });

  it("refuses an account's key from outside the account's IP whitelist", async () => {
    const answer = await orders({ authorization: `Bearer ${keys.walled.secretKey}` });
    expect(answer.status).toBe(403);
    expect(answer.body?.code).toBe('ip_not_whitelisted');
  });

  it('answers a path with no route with the kit error body', async () => {
    const answer = await httpRequest({ port, path: '/payments' });
    expect(answer.status).toBe(404);
    expect(answer.body?.code).toBe('not_found');
  });

  it('refuses a credential in the query string, on a route or not', async () => {
    for (const path of [`/orders?api_key=${keys.level2.secretKey}`, '/payments?token=x']) {
      const answer = await httpRequest({ port, path });
      expect({ path, status: answer.status, code: answer.body?.code }).toEqual({
        path,
        status: 400,
        code: 'invalid_request',
      });
    }
  });
});
