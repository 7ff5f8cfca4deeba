import { createHash } from 'node:crypto';

/**
 * The command function the limit engine sends its scripts through. It survives what a bare
 * script call does not (see docs/limits.md):
 *
 * - `SCRIPT LOAD` is answered locally with the script's SHA-1 (what Redis itself would answer),
 *   so a store created while Redis is down never caches a failed load;
 * - `EVALSHA` answered with `NOSCRIPT` (after `SCRIPT FLUSH`, a restart, or on another cluster
 *   master) is retried once as `EVAL` with the script text: NOSCRIPT means nothing ran;
 * - no command is sent while the client is not ready, and no other failure is ever replayed,
 *   since the increment may have happened.
 */

type RedisData = boolean | number | string;
export type RedisReply = RedisData | RedisData[];
export type RedisCommandFn = (...args: string[]) => Promise<RedisReply>;

/** The part of an ioredis `Redis` or `Cluster` client the limiter uses. */
export interface RedisCommandClient {
  readonly status: string;
  call(command: string, ...args: string[]): Promise<unknown>;
}

/** The client is connecting or disconnected: the command was not sent. */
export class RedisUnavailableError extends Error {
  override readonly name = 'RedisUnavailableError';
  readonly code = 'REDIS_NOT_READY';
  constructor() {
    super('Redis is not connected');
  }
}

export function scriptSha1(script: string): string {
  return createHash('sha1').update(script, 'utf8').digest('hex');
}

export function isNoScriptError(error: unknown): boolean {
  return error instanceof Error && /^NOSCRIPT\b/.test(error.message);
}

export function redisCommandFn(client: RedisCommandClient): RedisCommandFn {
  const scripts = new Map<string, string>();
  const send = async (command: string, args: string[]): Promise<RedisReply> => {
    if (client.status !== 'ready') throw new RedisUnavailableError();
    return (await client.call(command, ...args)) as RedisReply;
  };
  return async function sendCommand(command, ...args) {
    const name = command.toUpperCase();
    if (name === 'SCRIPT' && args[0]?.toUpperCase() === 'LOAD' && args[1] !== undefined) {
      const sha = scriptSha1(args[1]);
      scripts.set(sha, args[1]);
      return sha;
    }
    try {
      return await send(command, args);
    } catch (error) {
      const [sha = '', ...rest] = args;
      const script = scripts.get(sha);
      if (name !== 'EVALSHA' || script === undefined || !isNoScriptError(error)) throw error;
      return send('EVAL', [script, ...rest]);
    }
  };
}
