import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { childEnv, distScript, ROOT } from './process';

/**
 * The fenced blocks of the README and the guides in docs/. A block is either run by a test, which
 * reads it by the name in the `<!-- doc-test: name -->` comment right above it, or marked
 * `<!-- fragment: why -->` because it cannot run here (docker, a remote host, output).
 */

export type BlockMarker =
  | { readonly kind: 'test'; readonly name: string }
  | { readonly kind: 'fragment'; readonly reason: string };

export interface DocBlock {
  /** Repository-relative path of the Markdown file. */
  readonly file: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly lang: string;
  readonly code: string;
  readonly marker: BlockMarker | undefined;
}

const MARKER = /^<!-- (?:doc-test: ([a-z0-9-]+)|fragment(?:: ([^>]*?))?) -->$/;

/** README.md and every docs/*.md, in a fixed order. */
export function docFiles(): string[] {
  const guides = readdirSync(path.join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', ...guides];
}

export function blocksOf(file: string): DocBlock[] {
  const lines = readFileSync(path.join(ROOT, file), 'utf8').split('\n');
  const blocks: DocBlock[] = [];
  for (let i = 0; i < lines.length; i += 1) {
    const open = /^(`{3,})(\S*)\s*$/.exec(lines[i] ?? '');
    if (open === null) continue;
    const fence = open[1] ?? '```';
    let end = i + 1;
    while (end < lines.length && !(lines[end] ?? '').startsWith(fence)) end += 1;
    let previous = i - 1;
    while (previous >= 0 && (lines[previous] ?? '').trim() === '') previous -= 1;
    const found = MARKER.exec((lines[previous] ?? '').trim());
    const marker: BlockMarker | undefined =
      found === null
        ? undefined
        : found[1] !== undefined
          ? { kind: 'test', name: found[1] }
          : { kind: 'fragment', reason: found[2] ?? '' };
    blocks.push({
      file,
      line: i + 1,
      lang: open[2] ?? '',
      code: lines.slice(i + 1, end).join('\n'),
      marker,
    });
    i = end;
  }
  return blocks;
}

export function allDocBlocks(): DocBlock[] {
  return docFiles().flatMap(blocksOf);
}

/** The one block marked `<!-- doc-test: name -->`; throws when there is none or more than one. */
export function docBlock(name: string): DocBlock {
  const found = allDocBlocks().filter(
    (block) => block.marker?.kind === 'test' && block.marker.name === name,
  );
  if (found.length !== 1) {
    throw new Error(`expected one block marked doc-test: ${name}, found ${found.length}`);
  }
  return found[0]!;
}

export interface BashResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a script under `bash -euo pipefail` in `cwd`, with a minimal environment. */
export function runBash(
  script: string,
  cwd: string,
  env: Record<string, string> = {},
  timeoutMs = 60_000,
): Promise<BashResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-euo', 'pipefail', '-c', script], {
      cwd,
      env: childEnv({ HOME: cwd, ...env }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * The fields of the JSON answers a block's output comments (`# {...}`) show that do not change
 * from run to run (`status`, `code`, `message`, `token_type`, `expires_in`, `scope`), each as
 * it appears in the answer's text. Ids, tokens and counts are left out: the comments are loose.
 */
export function expectedAnswerFields(code: string): string[] {
  const fields: string[] = [];
  for (const line of code.split('\n')) {
    const comment = /^#\s*(\{.*)$/.exec(line.trim());
    if (comment === null) continue;
    const pattern = /"(status|code|message|token_type|expires_in|scope)":(\d+|"[^"…]*")(?=[,}])/g;
    for (const match of (comment[1] ?? '').matchAll(pattern)) {
      fields.push(`"${match[1]}":${match[2]}`);
    }
  }
  return fields;
}

/** `tollgate-keys` as the guides have the reader name it, on the built command. */
export function keysCommand(): string {
  return `tollgate-keys() { node ${JSON.stringify(distScript('gateway/keys-cli.js'))} "$@"; }`;
}

/** Stops whatever a block left in the background (`… &`) when the script ends. */
export const REAP_BACKGROUND = `trap 'kill $(jobs -p) 2>/dev/null || true' EXIT`;

/** A fresh directory for a block's files, with the build at `dist/` as in a checkout. */
export function workDirectory(): string {
  const directory = mkdtempSync(path.join(tmpdir(), 'tollgate-docs-'));
  symlinkSync(path.join(ROOT, 'dist'), path.join(directory, 'dist'));
  return directory;
}
