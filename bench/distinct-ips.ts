import { Pool } from 'undici';

/**
 * Sends one request from each of `count` distinct client addresses, given to the gateway in
 * `X-Forwarded-For` from loopback (the gateway trusts 127.0.0.1): `10.0.0.0/8`, address number
 * `first + i`. Many keep-alive connections with pipelined requests, so that a million requests
 * take minutes, not hours. Answers are counted by status.
 */

export interface DistinctIpOptions {
  readonly url: string;
  readonly method: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body?: string;
  readonly first: number;
  readonly count: number;
  readonly connections?: number;
  readonly pipelining?: number;
  /** Called every `progressEvery` answers. */
  readonly onProgress?: (answered: number) => void;
  readonly progressEvery?: number;
}

export interface DistinctIpResult {
  readonly answered: number;
  readonly statuses: Readonly<Record<number, number>>;
  readonly errors: number;
  readonly seconds: number;
}

const ADDRESSES = 2 ** 24;

export function addressNumber(n: number): string {
  if (!Number.isInteger(n) || n < 0 || n >= ADDRESSES) throw new Error(`no address ${n} in 10/8`);
  return `10.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

export async function sendFromDistinctIps(options: DistinctIpOptions): Promise<DistinctIpResult> {
  const connections = options.connections ?? 48;
  const pipelining = options.pipelining ?? 8;
  const pool = new Pool(options.url, { connections, pipelining });
  const statuses: Record<number, number> = {};
  let errors = 0;
  let next = 0;
  let answered = 0;
  const progressEvery = options.progressEvery ?? 100_000;
  const started = Date.now();
  const worker = async (): Promise<void> => {
    while (next < options.count) {
      const address = addressNumber(options.first + next);
      next++;
      try {
        const reply = await pool.request({
          method: options.method,
          path: options.path,
          headers: { ...options.headers, 'x-forwarded-for': address },
          ...(options.body === undefined ? {} : { body: options.body }),
        });
        await reply.body.dump();
        statuses[reply.statusCode] = (statuses[reply.statusCode] ?? 0) + 1;
      } catch {
        errors++;
      }
      answered++;
      if (answered % progressEvery === 0) options.onProgress?.(answered);
    }
  };
  try {
    await Promise.all(Array.from({ length: connections * pipelining }, worker));
  } finally {
    await pool.close();
  }
  return { answered, statuses, errors, seconds: (Date.now() - started) / 1000 };
}
