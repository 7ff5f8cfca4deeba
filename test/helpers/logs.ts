import { Writable } from 'node:stream';
import type { Logger } from 'pino';
import { createLogger } from '../../gateway/logger';

/** A real pino logger (the gateway's own configuration) whose lines are kept for assertions. */
export interface CapturedLogs {
  readonly logger: Logger;
  readonly lines: string[];
  /** Parsed lines. */
  entries(): Record<string, unknown>[];
  clear(): void;
}

export function captureLogs(level = 'info'): CapturedLogs {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push(line);
      callback();
    },
  });
  const logger = createLogger(level, stream);
  return {
    logger,
    lines,
    entries: () => lines.map((line) => JSON.parse(line) as Record<string, unknown>),
    clear: () => {
      lines.length = 0;
    },
  };
}

/** Text that must never be shown: any of `secrets`, a stack frame, a JWT. */
export function findLeaks(text: string, secrets: readonly string[]): string[] {
  const leaks = secrets.filter((secret) => text.includes(secret));
  if (/\n\s+at .+\(.+:\d+:\d+\)/.test(text) || text.includes('"stack"')) leaks.push('stack trace');
  if (/eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+/.test(text)) leaks.push('a JWT');
  return leaks;
}
