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
 *
 * With `latency`, a script runs some milliseconds after it was sent, as over a network: Redis's
 * clock for it is the send time plus `latency.next()` (never before the previous script's), and
 * `latency.reach()` is given that time before the answer reaches the caller, so that the test
 * moves its clock there: no answer arrives before Redis decided it.
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

export interface RedisLatency {
  /** Milliseconds from the send to when Redis runs the next script. */
  next(): number;
  /** Redis's clock when it ran the script whose answer is about to be delivered. */
  reach(decidedAt: number): void;
}

export function withRedisClock(
  connection: LimiterRedis,
  now: () => number,
  latency?: RedisLatency,
): ClockedRedis {
  const scripts = new Map<string, string>(
    [ADMIT_SCRIPT, READ_SCRIPT, DECREMENT_SCRIPT].map((script) => [
      scriptSha1(script),
      clocked(script),
    ]),
  );
  const client = connection.client;
  const inFlight = new Set<Promise<unknown>>();
  let lastDecided = 0;
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
          const ms = latency === undefined ? now() : Math.max(lastDecided, now() + latency.next());
          lastDecided = ms;
          const seconds = Math.floor(ms / 1000);
          const micros = (ms - seconds * 1000) * 1000;
          const sent = client.call('EVAL', script, ...rest, String(seconds), String(micros));
          if (latency === undefined) return track(sent);
          const reach = (): void => {
            latency.reach(ms);
          };
          return track(
            sent.then(
              (reply) => {
                reach();
                return reply;
              },
              (error: unknown) => {
                reach();
                throw error;
              },
            ),
          );
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
