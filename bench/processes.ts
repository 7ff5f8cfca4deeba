import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import type { Pause } from './gc-attribution';

/** The benchmark's child processes: each target runs in its own process on loopback. */

export interface Child {
  readonly name: string;
  readonly process: ChildProcess;
  /** The last few kilobytes the process wrote, for error reports. */
  output(): string;
  stop(): Promise<void>;
}

const KEPT_OUTPUT = 8192;

export function startChild(
  name: string,
  command: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  options: { readonly ipc?: boolean } = {},
): Child {
  const child = spawn(command, args, {
    env,
    stdio: options.ipc === true ? ['ignore', 'pipe', 'pipe', 'ipc'] : ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString('utf8')).slice(-KEPT_OUTPUT);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  return {
    name,
    process: child,
    output: () => output,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((resolve) =>
        child.once('exit', () => {
          resolve();
        }),
      );
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => {
        resolve(port);
      });
    });
  });
}

export interface HttpReply {
  readonly status: number;
  readonly body: string;
}

export function httpRequest(
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<HttpReply> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method: options.method ?? 'GET', headers: options.headers, agent: false },
      (res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, body });
        });
      },
    );
    req.on('error', reject);
    req.setTimeout(2000, () => req.destroy(new Error(`no answer from ${url}`)));
    req.end(options.body);
  });
}

/** Polls `url` until `ready(reply)` holds; fails with the child's output after `timeoutMs`. */
export async function waitUntil(
  child: Child,
  url: string,
  ready: (reply: HttpReply) => boolean,
  timeoutMs = 15_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.process.exitCode !== null) {
      throw new Error(`${child.name} exited with ${child.process.exitCode}:\n${child.output()}`);
    }
    const reply = await httpRequest(url).catch(() => undefined);
    if (reply !== undefined && ready(reply)) return;
    if (Date.now() > deadline) {
      throw new Error(`${child.name} was not ready within ${timeoutMs} ms:\n${child.output()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Resident and peak resident memory of a process in MiB (Linux `/proc`), if readable. */
let clockTicks: number | undefined;

/**
 * The CPU time a process has used so far (user and system, every thread), in seconds, from
 * `/proc/<pid>/stat`; undefined where there is no such file.
 */
export function cpuSecondsOf(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which is in parentheses and may hold spaces: state is the
    // first, utime the 12th and stime the 13th (fields 14 and 15 of proc(5)).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    clockTicks ??= Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim());
    return (Number(fields[11]) + Number(fields[12])) / clockTicks;
  } catch {
    return undefined;
  }
}

export function memoryOf(pid: number | undefined): { rssMiB: number; peakMiB: number } | undefined {
  if (pid === undefined) return undefined;
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kib = (field: string): number =>
      Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1]);
    return { rssMiB: kib('VmRSS') / 1024, peakMiB: kib('VmHWM') / 1024 };
  } catch {
    return undefined;
  }
}

/** The first line a command prints for `--version`, or `undefined` when it is not installed. */
export function versionOf(
  command: string,
  args: readonly string[] = ['--version'],
): string | undefined {
  const result = spawnSync(command, args, { encoding: 'utf8' });
  if (result.error !== undefined) return undefined;
  return `${result.stdout}${result.stderr}`.split('\n')[0]?.trim();
}

/** What `bench/keys/probe.js`, preloaded into a gateway, answers when asked `loop`. */
export interface LoopDelay {
  /** The longest event-loop delay since the last question, in ms. */
  readonly maxMs: number;
  readonly p99Ms: number;
  /**
   * The collector's pauses since the last question (kind `minor`, `major`, `incremental`, `weak`
   * or `other`).
   */
  readonly pauses: readonly Pause[];
  /** Pauses left out because there were too many to keep. */
  readonly droppedPauses: number;
  /** Bytes allocated on V8's heap since the last question (0 at the first). */
  readonly allocatedBytes: number;
  /** Bytes the young-generation collections promoted to the old one since the last question. */
  readonly promotedBytes: number;
  /** Bytes that reached the old generation (promoted, or allocated there) since the last question. */
  readonly toOldBytes: number;
}

/**
 * Asks a child started with an IPC channel and `bench/keys/probe.js` preloaded, and waits for the
 * answer of that kind (`memory` or `loop`).
 */
export function askProbe<T>(
  child: ChildProcess,
  name: string,
  kind: 'memory' | 'loop',
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.off('message', answer);
      reject(new Error(`${name}: no ${kind} answer`));
    }, 60_000);
    const answer = (message: unknown): void => {
      if ((message as { kind?: unknown }).kind !== kind) return;
      clearTimeout(timer);
      child.off('message', answer);
      resolve(message as T);
    };
    child.on('message', answer);
    child.send(kind);
  });
}
