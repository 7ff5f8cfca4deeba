import { existsSync } from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { ConfigurationError } from '../errors';
import type { BuiltRing, RingJob } from './ring-sources';

export type { BuiltRing, RingJob } from './ring-sources';

/**
 * Builds a ring in a worker thread (ring-worker.js, next to this file in the build): the file is
 * read and parsed, or the database read, and the packed table made there; it arrives here as
 * transferred buffers, so the request thread only wraps them. One worker per build, ended after.
 */
export function buildRing(job: RingJob): Promise<BuiltRing> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(workerScript(), { workerData: job });
    let settled = false;
    worker.once('message', (message: WorkerAnswer) => {
      settled = true;
      void worker.terminate();
      if (message.ok) resolve(message.built);
      else reject(answerError(message));
    });
    worker.once('error', (error) => {
      if (settled) return;
      settled = true;
      reject(error);
    });
    worker.once('exit', (code) => {
      if (!settled) reject(new Error(`the key ring worker stopped (exit code ${code})`));
    });
  });
}

type WorkerAnswer =
  | { readonly ok: true; readonly built: BuiltRing }
  | {
      readonly ok: false;
      readonly configuration: boolean;
      readonly message: string;
      readonly code?: unknown;
    };

function answerError(answer: Extract<WorkerAnswer, { ok: false }>): Error {
  if (answer.configuration) return new ConfigurationError(answer.message);
  return Object.assign(
    new Error(answer.message),
    typeof answer.code === 'string' ? { code: answer.code } : {},
  );
}

/**
 * The compiled worker: beside this file in `dist/lib/keys/`; when this file runs from its
 * TypeScript source (the tests), the build's copy, which `npm test` makes first.
 */
function workerScript(): string {
  const beside = path.join(__dirname, 'ring-worker.js');
  if (existsSync(beside)) return beside;
  const built = path.join(__dirname, '..', '..', 'dist', 'lib', 'keys', 'ring-worker.js');
  if (existsSync(built)) return built;
  throw new Error(
    `the key ring worker was not found (looked for ${beside} and ${built}): run npm run build`,
  );
}
