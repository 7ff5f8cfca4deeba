import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import ts from 'typescript';
import { KeyRing } from '../../lib';
import {
  allDocBlocks,
  type DocBlock,
  docBlock,
  expectedAnswerFields,
  keysCommand,
  REAP_BACKGROUND,
  runBash,
  workDirectory,
} from '../helpers/doc-blocks';
import { childEnv, distScript, ROOT } from '../helpers/process';
import { freePort } from '../helpers/redis';

/**
 * Every fenced block of the README and docs/ runs in a test or is marked as a fragment. This file
 * holds the rule and runs most blocks itself: TypeScript blocks are type-checked against the kit,
 * JSON blocks parsed (keys documents loaded), and shell blocks executed under `bash -euo pipefail`
 * against the built gateway, their output comments checked loosely.
 */

const where = (block: DocBlock): string => `${block.file}:${block.line}`;

/** The names a test that calls `docBlock()` quotes: the blocks that test runs. */
function namesRunByTests(declared: ReadonlySet<string>): Set<string> {
  const names = new Set<string>();
  const walk = (directory: string): void => {
    for (const entry of readdirSync(directory, { withFileTypes: true })) {
      const full = path.join(directory, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith('.test.ts')) {
        const text = readFileSync(full, 'utf8');
        if (!text.includes('docBlock(')) continue;
        for (const match of text.matchAll(/'([a-z0-9-]+)'/g)) {
          if (declared.has(match[1] ?? '')) names.add(match[1] ?? '');
        }
      }
    }
  };
  walk(path.join(ROOT, 'test'));
  return names;
}

describe('the blocks of the README and docs/', () => {
  const blocks = allDocBlocks();

  it('finds the blocks of every guide', () => {
    expect(blocks.length).toBeGreaterThan(40);
    expect(new Set(blocks.map((block) => block.file)).size).toBeGreaterThan(8);
  });

  it('marks every block that no test runs as a fragment, with a reason', () => {
    const checkedHere = (block: DocBlock): boolean => block.lang === 'ts' || block.lang === 'json';
    const unmarked = blocks
      .filter((block) => block.marker === undefined && !checkedHere(block))
      .map(where);
    expect(unmarked).toEqual([]);
    const withoutReason = blocks
      .filter((block) => block.marker?.kind === 'fragment' && block.marker.reason.trim() === '')
      .map(where);
    expect(withoutReason).toEqual([]);
  });

  it('names each block run by a test once, and some test runs each name', () => {
    const named = blocks.flatMap((block) =>
      block.marker?.kind === 'test' ? [block.marker.name] : [],
    );
    expect(named.filter((name, index) => named.indexOf(name) !== index)).toEqual([]);
    const run = namesRunByTests(new Set(named));
    expect(named.filter((name) => !run.has(name))).toEqual([]);
  });

  it('parses every JSON block; a keys document loads once its placeholders are filled', () => {
    for (const block of blocks.filter((b) => b.lang === 'json')) {
      const parsed = parseJsonOrLines(block);
      if (typeof parsed === 'object' && parsed !== null && 'accounts' in parsed) {
        const filled = fillKeyPlaceholders(block.code);
        expect(() =>
          KeyRing.fromDocument(JSON.parse(filled), where(block), {
            limitScopes: { payments: 'account', authenticated: 'account' },
          }),
        ).not.toThrow();
      }
    }
  });

  it('type-checks every TypeScript block against the kit', () => {
    const diagnostics = typeCheck(blocks.filter((block) => block.lang === 'ts'));
    expect(diagnostics).toEqual([]);
  }, 120_000);
});

/** A JSON document, or JSON Lines (a log); throws naming the block when neither parses. */
function parseJsonOrLines(block: DocBlock): unknown {
  try {
    return JSON.parse(block.code) as unknown;
  } catch {
    try {
      return block.code
        .split('\n')
        .filter((line) => line.trim() !== '')
        .map((line) => JSON.parse(line) as unknown);
    } catch (error) {
      throw new Error(`${where(block)}: not JSON`, { cause: error });
    }
  }
}

/** `…` in a keys document stands for a value the reader makes: fill each with a valid one. */
function fillKeyPlaceholders(text: string): string {
  let serial = 0;
  const next = (): string => (serial += 1).toString().padStart(4, '0');
  return text
    .replace(
      /"pk_(test|live)_…"/g,
      (_m, env: string) => `"pk_${env}_placeholder${next()}abcdefghijkl"`,
    )
    .replace(/"secretKeySha256": "[^"]*"/g, () => `"secretKeySha256": "${next().repeat(16)}"`);
}

/** The TypeScript blocks as in-memory modules next to the tests, `tollgate` mapped to lib/. */
function typeCheck(blocks: readonly DocBlock[]): string[] {
  const files = new Map<string, DocBlock>();
  blocks.forEach((block, index) => {
    files.set(path.join(ROOT, 'test', 'docs', `__doc_block_${index}.ts`), block);
  });
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ES2022,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    esModuleInterop: true,
    strict: true,
    noUncheckedIndexedAccess: true,
    skipLibCheck: true,
    noEmit: true,
    types: ['node'],
    paths: {
      tollgate: [path.join(ROOT, 'lib', 'index.ts')],
      'tollgate/*': [path.join(ROOT, 'lib', 'entry', '*.ts')],
    },
  };
  const base = ts.createCompilerHost(options);
  const host: ts.CompilerHost = {
    ...base,
    fileExists: (name) => files.has(name) || base.fileExists(name),
    readFile: (name) => files.get(name)?.code ?? base.readFile(name),
    getSourceFile: (name, language, ...rest) => {
      const block = files.get(name);
      return block === undefined
        ? base.getSourceFile(name, language, ...rest)
        : ts.createSourceFile(name, block.code, language);
    },
  };
  const program = ts.createProgram([...files.keys()], options, host);
  const checked = program.getSourceFiles().filter((file) => files.has(file.fileName));
  if (checked.length !== files.size) throw new Error('a TypeScript block was not compiled');
  return ts.getPreEmitDiagnostics(program).flatMap((diagnostic) => {
    const file = diagnostic.file;
    const block = file === undefined ? undefined : files.get(file.fileName);
    if (file === undefined || block === undefined) return [];
    const { line } = file.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
    return `${block.file}:${block.line + 1 + line}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`;
  });
}

const KEYS_COMMAND = keysCommand();
const REAP = REAP_BACKGROUND;

function expectAnswers(block: DocBlock, stdout: string): void {
  for (const field of expectedAnswerFields(block.code)) {
    expect({ block: where(block), found: stdout.includes(field) }).toEqual({
      block: where(block),
      found: field.length > 0,
    });
  }
}

async function runBlocks(
  names: readonly string[],
  prelude: string,
  cwd: string,
  env: Record<string, string> = {},
): Promise<string> {
  const blocks = names.map((name) => docBlock(name));
  const script = [REAP, KEYS_COMMAND, prelude, ...blocks.map((block) => block.code)].join('\n');
  const result = await runBash(script, cwd, env, 90_000);
  if (result.code !== 0) {
    throw new Error(`exit ${result.code}\n${result.stdout}\n${result.stderr}`);
  }
  for (const block of blocks) expectAnswers(block, result.stdout);
  return result.stdout;
}

/** The demo gateway `npm start` runs, on a free port; its printed keys, by role. */
async function startDemoGateway(
  port: number,
): Promise<{ child: ChildProcess; keys: Map<string, { pk: string; sk: string }> }> {
  const child = spawn(process.execPath, [distScript('gateway/server.js')], {
    env: childEnv({ PORT: String(port), LOG_LEVEL: 'warn' }),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const deadline = Date.now() + 20_000;
  const pattern = /^ {2}(\S+) +key id \S+\n {6}publishable (pk_\S+)\n {6}secret {6}(sk_\S+)$/gm;
  while (Date.now() < deadline && [...stderr.matchAll(pattern)].length < 4) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const keys = new Map<string, { pk: string; sk: string }>();
  for (const match of stderr.matchAll(pattern)) {
    keys.set(match[1] ?? '', { pk: match[2] ?? '', sk: match[3] ?? '' });
  }
  if (keys.size < 4) throw new Error(`the demo gateway printed no keys:\n${stderr}`);
  await runBash(
    `until curl -sf http://127.0.0.1:${port}/readyz >/dev/null; do sleep 0.1; done`,
    tmpdir(),
    {},
    20_000,
  );
  return { child, keys };
}

describe('the shell blocks, run against the built gateway', () => {
  const directories: string[] = [];
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const child of children) child.kill('SIGTERM');
    for (const directory of directories) rmSync(directory, { recursive: true, force: true });
  });
  const work = (): string => {
    const directory = workDirectory();
    directories.push(directory);
    return directory;
  };

  it('the walk-through with curl, steps 1 to 5, and the readiness check, on the demo gateway', async () => {
    const port = await freePort();
    const demo = await startDemoGateway(port);
    children.push(demo.child);
    const admin = demo.keys.get('administrator');
    const level1 = demo.keys.get('level-1');
    const prelude = [
      `BASE=http://127.0.0.1:${port}`,
      `PK=${admin?.pk ?? ''}`,
      `SK=${admin?.sk ?? ''}`,
      `L1_SK=${level1?.sk ?? ''}`,
    ].join('\n');
    const readyz = docBlock('readyz').code.replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`);
    const stdout = await runBlocks(
      ['walkthrough-1', 'walkthrough-2', 'walkthrough-3', 'walkthrough-4', 'walkthrough-5'],
      `${prelude}\n${readyz}`,
      work(),
    );
    expect(stdout).toMatch(/HTTP\/1\.1 200 OK/);
    expect(stdout).toContain('201 201 201');
    expect(stdout).toMatch(/ 429 ?\n/);
    expect(stdout).toMatch(/^HTTP\/1\.1 429 Too Many Requests/m);
    expect(stdout).toContain('"status":"ready"');
  }, 60_000);

  it('the walk-through, step 6: a keys file, a whitelist, a reload', async () => {
    const port = await freePort();
    const directory = work();
    const created = await runBlocks(['walkthrough-create'], '', directory);
    const pk = /publishable key: (pk_\S+)/.exec(created)?.[1] ?? '';
    const sk = /secret key: +(sk_\S+)/.exec(created)?.[1] ?? '';
    expect(created).toContain('Created key key_owner (administrator) for account acct_shop');
    const prelude = [
      `export PORT=${port}`,
      `BASE=http://127.0.0.1:${port}`,
      `SHOP_PK=${pk}`,
      `SHOP_SK=${sk}`,
    ].join('\n');
    const stdout = await runBlocks(
      ['walkthrough-whitelist', 'walkthrough-reload'],
      prelude,
      directory,
    );
    expect(stdout).toContain('"code":"ip_not_whitelisted"');
    expect(stdout).toMatch(/"token":"eyJ[^"]+","token_type":"Bearer","expires_in":1800/);
  }, 60_000);

  it('operating keys with a keys file: create, start, change the role, reload', async () => {
    const port = await freePort();
    const directory = work();
    const block = docBlock('operating-keys-file');
    const script = block.code.replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`);
    const result = await runBash(
      [
        REAP,
        KEYS_COMMAND,
        `export PORT=${port} LOG_LEVEL=warn`,
        script,
        'sleep 1',
        'tollgate-keys list',
      ].join('\n'),
      directory,
      {},
      60_000,
    );
    if (result.code !== 0)
      throw new Error(`exit ${result.code}\n${result.stdout}\n${result.stderr}`);
    expect(result.stdout).toContain('Created key key_shop (level-2) for account acct_shop');
    expect(result.stdout).toMatch(/^ {2}key_shop {2}level-3 {2}pk_test_\S+ {2}active$/m);
  }, 60_000);

  it('the admin listener: a token, its digest, the gateway, the accounts', async () => {
    const [port, adminPort] = [await freePort(), await freePort()];
    const block = docBlock('admin-listener');
    const script = block.code.replaceAll('9090', String(adminPort));
    const result = await runBash(
      [REAP, `export PORT=${port} LOG_LEVEL=warn`, script].join('\n'),
      work(),
      {},
      60_000,
    );
    if (result.code !== 0)
      throw new Error(`exit ${result.code}\n${result.stdout}\n${result.stderr}`);
    expect(result.stdout).toMatch(/^\{"accounts":\[\{"id":"acct_demo","ip_whitelist":null,/m);
    expect(result.stdout).toContain('"id":"key_demo_level1","role":"level-1"');
  }, 60_000);

  it('the token secret command prints 32 random bytes, base64url', async () => {
    for (const name of ['token-secret', 'token-secret-kit']) {
      const result = await runBash(docBlock(name).code, work());
      expect(result.code).toBe(0);
      const secret = result.stdout.trim();
      expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(Buffer.from(secret, 'base64url')).toHaveLength(32);
    }
  });
});
