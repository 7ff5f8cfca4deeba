import {
  ADMIT_SCRIPT,
  DECREMENT_SCRIPT,
  READ_SCRIPT,
} from '../../lib/rate-limit/admission-scripts';
import { scriptSha1 } from '../../lib/rate-limit/redis-commands';
import type { LimiterRedis } from '../../lib/rate-limit/window';

/**
 * A limiter's Redis connection whose limit scripts read the test's clock instead of Redis's own:
 * the real scripts run in the real Redis, except that `redis.call('TIME')` becomes two arguments
 * appended after the script's own (which it never reads, since it finds its arguments by the
 * number of keys). Windows of a minute can then be crossed without waiting, with the instances and
 * Redis on one clock. Redis still expires keys by its own clock, later than the test's moves.
 *
 * `settled()` resolves once every command sent through it has been answered and the code waiting
 * on the answers has run.
 */
export interface ClockedRedis {
  readonly redis: LimiterRedis;
  settled(): Promise<void>;
}

const TIME_CALL = "redis.call('TIME')";
const CLOCKED_TIME = '{ARGV[#ARGV - 1], ARGV[#ARGV]}';

function clocked(script: string): string {
  if (!script.includes(TIME_CALL)) throw new Error('the limit script no longer reads TIME');
  return script.replace(TIME_CALL, CLOCKED_TIME);
}

export function withRedisClock(connection: LimiterRedis, now: () => number): ClockedRedis {
  const scripts = new Map<string, string>(
    [ADMIT_SCRIPT, READ_SCRIPT, DECREMENT_SCRIPT].map((script) => [
      scriptSha1(script),
      clocked(script),
    ]),
  );
  const client = connection.client;
  const inFlight = new Set<Promise<unknown>>();
  const track = (sent: Promise<unknown>): Promise<unknown> => {
    inFlight.add(sent);
    const done = (): void => {
      inFlight.delete(sent);
    };
    sent.then(done, done);
    return sent;
  };
  return {
    redis: {
      health: connection.health,
      client: {
        get status() {
          return client.status;
        },
        call: (command: string, ...args: string[]) => {
          const [sha = '', ...rest] = args;
          const script = command.toUpperCase() === 'EVALSHA' ? scripts.get(sha) : undefined;
          if (script === undefined) return track(client.call(command, ...args));
          const ms = now();
          const seconds = Math.floor(ms / 1000);
          const micros = (ms - seconds * 1000) * 1000;
          return track(client.call('EVAL', script, ...rest, String(seconds), String(micros)));
        },
      },
    },
    settled: async () => {
      while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
      // Let what waits on the answers (counts remembered, queued attempts released) run.
      await new Promise((resolve) => setImmediate(resolve));
    },
  };
}
