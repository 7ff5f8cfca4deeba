import { spawn } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { childEnv, ROOT } from '../helpers/process';

/**
 * The npm scripts that run a built program (`npm run keys`, `npm run migrate`, `npm run example`)
 * go through scripts/run-built.sh: it builds only when a source is newer than the last build, and
 * replaces itself with node, so a signal sent to `npm run example` stops the example.
 */

interface Ran {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly pid: number | undefined;
}

function run(command: string, args: readonly string[], cwd: string): Promise<Ran> {
  const child = spawn(command, args, {
    cwd,
    env: childEnv({ HOME: process.env.HOME ?? tmpdir() }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  return new Promise((resolve) => {
    child.once('close', (code) => {
      resolve({ code, stdout, stderr, pid: child.pid });
    });
  });
}

describe('scripts/run-built.sh', () => {
  // A project of its own whose build leaves a mark, so each test sees whether it built.
  let project: string;
  const builds = (result: Ran): number =>
    result.stdout.split('\n').filter((l) => l === 'built').length;
  const launch = (...args: string[]): Promise<Ran> =>
    run('sh', [path.join(project, 'scripts', 'run-built.sh'), ...args], project);
  const age = (file: string, seconds: number): void => {
    const when = new Date(Date.now() - seconds * 1000);
    utimesSync(path.join(project, file), when, when);
  };

  beforeEach(() => {
    project = mkdtempSync(path.join(tmpdir(), 'tollgate-run-built-'));
    mkdirSync(path.join(project, 'scripts'));
    mkdirSync(path.join(project, 'lib'));
    mkdirSync(path.join(project, 'dist'));
    copyFileSync(
      path.join(ROOT, 'scripts', 'run-built.sh'),
      path.join(project, 'scripts', 'run-built.sh'),
    );
    chmodSync(path.join(project, 'scripts', 'run-built.sh'), 0o755);
    writeFileSync(
      path.join(project, 'package.json'),
      JSON.stringify({
        name: 'run-built-fixture',
        private: true,
        scripts: { build: 'echo built && touch dist/.build-stamp' },
      }),
    );
    writeFileSync(path.join(project, 'lib', 'index.ts'), 'export {};\n');
    writeFileSync(path.join(project, 'dist', 'main.js'), 'console.log(`pid ${process.pid}`);\n');
  });
  afterEach(() => {
    rmSync(project, { recursive: true, force: true });
  });

  it('builds when dist/ was never built, then not again while no source changed', async () => {
    const first = await launch('dist/main.js');
    expect(first.code).toBe(0);
    expect(builds(first)).toBe(1);
    const second = await launch('dist/main.js');
    expect(second.code).toBe(0);
    expect(builds(second)).toBe(0);
  });

  it('builds again after a source is edited, added or removed, or package.json changes', async () => {
    await launch();
    const changes: Record<string, () => void> = {
      edited: () => {
        writeFileSync(path.join(project, 'lib', 'index.ts'), 'export const a = 1;\n');
      },
      added: () => {
        writeFileSync(path.join(project, 'lib', 'added.ts'), 'export {};\n');
      },
      removed: () => {
        unlinkSync(path.join(project, 'lib', 'added.ts'));
      },
      'package.json': () => {
        age('package.json', 0);
      },
    };
    for (const [name, change] of Object.entries(changes)) {
      // The last build a minute ago, the sources older still: only the change is newer.
      const sources = readdirSync(path.join(project, 'lib')).map((file) => `lib/${file}`);
      for (const file of [...sources, 'lib', 'package.json']) age(file, 120);
      age('dist/.build-stamp', 60);
      expect({ name, builds: builds(await launch()) }).toEqual({ name, builds: 0 });
      change();
      expect({ name, builds: builds(await launch()) }).toEqual({ name, builds: 1 });
    }
  });

  it('runs nothing when the build fails, and exits non-zero', async () => {
    writeFileSync(
      path.join(project, 'package.json'),
      JSON.stringify({ name: 'run-built-fixture', private: true, scripts: { build: 'exit 3' } }),
    );
    const result = await launch('dist/main.js');
    expect(result.code).not.toBe(0);
    expect(result.stdout).not.toMatch(/^pid /m);
  });

  it('replaces itself with node: the program runs as the process started, with its arguments', async () => {
    writeFileSync(
      path.join(project, 'dist', 'main.js'),
      'console.log(`pid ${process.pid} args ${process.argv.slice(2).join(",")}`);\n',
    );
    await launch();
    const result = await launch('dist/main.js', 'list', '--file', 'a b.json');
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe(`pid ${String(result.pid)} args list,--file,a b.json`);
  });
});

describe('npm run example', () => {
  it('stops on SIGTERM sent to npm: the signal reaches the example, which closes its port', async () => {
    const npm = spawn('npm', ['run', '--silent', 'example'], {
      cwd: ROOT,
      env: childEnv({ HOME: process.env.HOME ?? tmpdir(), PORT: '0', HOST: '127.0.0.1' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    npm.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    npm.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    // 'exit', not 'close': a child left running would hold the pipes open.
    const exited = new Promise<void>((resolve) =>
      npm.once('exit', () => {
        resolve();
      }),
    );
    try {
      const deadline = Date.now() + 60_000;
      let port: number | undefined;
      while (port === undefined) {
        port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(output)?.[1]) || undefined;
        if (Date.now() > deadline || npm.exitCode !== null) {
          throw new Error(`the example did not start:\n${output}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(await accepts(port)).toBe(true);
      npm.kill('SIGTERM');
      await exited;
      // The example itself, not only npm, is gone: nothing listens on its port any more.
      const until = Date.now() + 5000;
      while ((await accepts(port)) && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(await accepts(port)).toBe(false);
    } finally {
      npm.kill('SIGKILL');
    }
  }, 90_000);
});

/** Whether a TCP connection to 127.0.0.1:`port` is accepted. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => {
      resolve(false);
    });
  });
}
