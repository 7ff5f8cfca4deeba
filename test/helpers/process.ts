import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { ANSWER_CHECKS_VARIABLE } from '../../gateway/openapi/answer-check';

/**
 * The built programs (`dist/`, made by `npm run build`, which `npm test` runs first) as child
 * processes: run one to completion, or keep one running and watch its output; and a plain HTTP
 * client without keep-alive for talking to them.
 */

export const ROOT = path.resolve(__dirname, '../..');

/** The path of a built script; fails with a hint when `dist/` has not been built. */
export function distScript(relative: string): string {
  const file = path.join(ROOT, 'dist', relative);
  if (!existsSync(file))
    throw new Error(`${file} is missing: run \`npm run build\` (npm test does it first)`);
  return file;
}

/**
 * A minimal environment: nothing of the test runner's own leaks into the child, except the answer
 * checks against the API description, which every gateway the tests start runs with.
 */
export function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
    [ANSWER_CHECKS_VARIABLE]: '1',
    ...extra,
  };
}

export interface Finished {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `node script ...args` to completion (killed after `timeoutMs`). */
export function runNode(
  script: string,
  args: readonly string[],
  env: Record<string, string>,
  timeoutMs = 15_000,
): Promise<Finished> {
  const child = new NodeProcess(script, args, env);
  const timer = setTimeout(() => {
    child.kill('SIGKILL');
  }, timeoutMs);
  return child.exited.then((exit) => {
    clearTimeout(timer);
    return { ...exit, stdout: child.stdout, stderr: child.stderr };
  });
}

/** A running `node` child whose output is kept. */
export class NodeProcess {
  stdout = '';
  stderr = '';
  readonly child: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(script: string, args: readonly string[], env: Record<string, string>) {
    this.child = spawn(process.execPath, [script, ...args], {
      env: childEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child.stdout?.on('data', (chunk: Buffer) => {
      this.stdout += chunk.toString('utf8');
    });
    this.child.stderr?.on('data', (chunk: Buffer) => {
      this.stderr += chunk.toString('utf8');
    });
    this.exited = new Promise((resolve) => {
      this.child.once('close', (code, signal) => {
        resolve({ code, signal });
      });
    });
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  kill(signal: NodeJS.Signals): void {
    if (this.running) this.child.kill(signal);
  }

  /** The JSON log lines printed on stdout (other lines, like the demo credentials, are skipped). */
  entries(): Record<string, unknown>[] {
    return this.stdout
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .flatMap((line) => {
        try {
          return [JSON.parse(line) as Record<string, unknown>];
        } catch {
          return [];
        }
      });
  }

  /** Resolves with the first log entry, from index `from` on, that matches; rejects on exit or timeout. */
  async waitForEntry(
    matches: (entry: Record<string, unknown>) => boolean,
    from = 0,
    timeoutMs = 10_000,
  ): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.entries().slice(from).find(matches);
      if (found !== undefined) return found;
      if (!this.running) {
        // Its output may still be in the pipes: read it all before deciding.
        await this.exited;
        const late = this.entries().slice(from).find(matches);
        if (late !== undefined) return late;
        throw new Error(
          `process exited before the expected log line\nstdout: ${this.stdout}\nstderr: ${this.stderr}`,
        );
      }
      if (Date.now() > deadline)
        throw new Error(
          `no matching log line within ${timeoutMs} ms\nstdout: ${this.stdout}\nstderr: ${this.stderr}`,
        );
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** Kills the child if it is still running and waits for it to end. */
  async stop(): Promise<void> {
    this.kill('SIGKILL');
    await this.exited;
  }
}

export interface HttpResult {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly text: string;
  readonly body: Record<string, unknown> | undefined;
}

export interface HttpRequest {
  readonly port: number;
  readonly method?: string;
  readonly path: string;
  readonly headers?: Record<string, string>;
  /** Sent as JSON. */
  readonly json?: unknown;
  /** Sent as it is, as `application/json` (for bodies that are not valid JSON). */
  readonly jsonText?: string;
  /** Sent as `application/x-www-form-urlencoded`, as a browser posts a form. */
  readonly form?: Record<string, string>;
  /** Source address of the connection (any of 127.0.0.0/8), so client addresses are real. */
  readonly from?: string;
}

/** One request on its own connection (no keep-alive) to 127.0.0.1:`port`. */
export function httpRequest(options: HttpRequest): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    const form = options.form === undefined ? undefined : new URLSearchParams(options.form);
    const payload =
      form !== undefined
        ? Buffer.from(form.toString())
        : options.jsonText !== undefined
          ? Buffer.from(options.jsonText)
          : options.json === undefined
            ? undefined
            : Buffer.from(JSON.stringify(options.json));
    const req = http.request(
      {
        host: '127.0.0.1',
        port: options.port,
        method: options.method ?? 'GET',
        path: options.path,
        agent: false,
        ...(options.from === undefined ? {} : { localAddress: options.from }),
        headers: {
          ...options.headers,
          ...(payload === undefined
            ? {}
            : {
                'content-type':
                  form === undefined ? 'application/json' : 'application/x-www-form-urlencoded',
                'content-length': String(payload.length),
              }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: Record<string, unknown> | undefined;
          try {
            body = JSON.parse(text) as Record<string, unknown>;
          } catch {
            body = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** How many times `needle` occurs in `haystack`. */
export function occurrences(haystack: string, needle: string): number {
  return needle === '' ? 0 : haystack.split(needle).length - 1;
}
