import {
  type BatchTarget,
  CommandBatch,
  RedisTimeoutError,
} from '../../../lib/rate-limit/command-batch';

/**
 * The batching logic over a scripted client (the real Redis, Sentinel and Cluster paths run in
 * test/integration/redis-limiter.test.ts and test/multiprocess/): what leaves in which write, how
 * replies and failures reach each caller, and when the deadline fails a command.
 */

type Reply = [Error | null, unknown];

/** A client that records every write and answers as `answer` says (never, if it returns undefined). */
class ScriptedClient implements BatchTarget {
  status = 'ready';
  readonly writes: { via: 'call' | 'pipeline'; commands: string[][] }[] = [];
  slots?: string[][];
  answer: (command: string[]) => Promise<Reply> | undefined = (command) =>
    Promise.resolve([null, `reply:${command.join(' ')}`]);

  call(command: string, ...args: string[]): Promise<unknown> {
    this.writes.push({ via: 'call', commands: [[command, ...args]] });
    const reply = this.answer([command, ...args]);
    if (reply === undefined) return new Promise(() => undefined);
    return reply.then(([error, value]) => (error === null ? value : Promise.reject(error)));
  }

  /** As ioredis reads it: `['call', name, ...args]` calls the pipeline's `call(name, ...args)`. */
  pipeline(batch: string[][]): { exec(): Promise<Reply[] | null> } {
    const commands = batch.map(([method, ...command]) => {
      expect(method).toBe('call');
      return command;
    });
    this.writes.push({ via: 'pipeline', commands });
    return {
      exec: () => {
        const replies = commands.map((command) => this.answer(command));
        if (replies.some((reply) => reply === undefined)) return new Promise(() => undefined);
        return Promise.all(replies as Promise<Reply>[]);
      },
    };
  }
}

const settle = (promise: Promise<unknown>): Promise<{ value?: unknown; error?: unknown }> =>
  promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('CommandBatch', () => {
  it('writes the commands called in one turn as one pipeline, each caller getting its own reply', async () => {
    const client = new ScriptedClient();
    const batch = new CommandBatch(client, 1000);
    const replies = Promise.all([
      batch.call('EVALSHA', 'sha', '1', 'a'),
      batch.call('EVALSHA', 'sha', '1', 'b'),
      batch.call('GET', 'c'),
    ]);
    expect(client.writes).toEqual([]);
    expect(await replies).toEqual([
      'reply:EVALSHA sha 1 a',
      'reply:EVALSHA sha 1 b',
      'reply:GET c',
    ]);
    expect(client.writes).toEqual([
      {
        via: 'pipeline',
        commands: [
          ['EVALSHA', 'sha', '1', 'a'],
          ['EVALSHA', 'sha', '1', 'b'],
          ['GET', 'c'],
        ],
      },
    ]);
  });

  it('sends a lone command with call(), and commands of later turns in later writes', async () => {
    const client = new ScriptedClient();
    const batch = new CommandBatch(client, 1000);
    expect(await batch.call('GET', 'a')).toBe('reply:GET a');
    const second = batch.call('GET', 'b');
    await nextTurn();
    const third = batch.call('GET', 'c');
    expect(await Promise.all([second, third])).toEqual(['reply:GET b', 'reply:GET c']);
    expect(client.writes.map((write) => write.via)).toEqual(['call', 'call', 'call']);
  });

  it('fails only the command whose reply is an error, and every command when the write fails', async () => {
    const client = new ScriptedClient();
    const batch = new CommandBatch(client, 1000);
    const noScript = new Error('NOSCRIPT No matching script');
    client.answer = (command) =>
      Promise.resolve(command[3] === 'b' ? [noScript, undefined] : [null, command[3]]);
    const [a, b] = await Promise.all([
      settle(batch.call('EVALSHA', 'sha', '1', 'a')),
      settle(batch.call('EVALSHA', 'sha', '1', 'b')),
    ]);
    expect([a, b]).toEqual([{ value: 'a' }, { error: noScript }]);

    const closed = new Error('Connection is closed.');
    client.pipeline = (commands) => {
      client.writes.push({
        via: 'pipeline',
        commands: commands.map((command) => command.slice(1)),
      });
      return { exec: () => Promise.reject(closed) };
    };
    const failed = await Promise.all([
      settle(batch.call('GET', 'x')),
      settle(batch.call('GET', 'y')),
    ]);
    expect(failed).toEqual([{ error: closed }, { error: closed }]);
  });

  it('fails unanswered commands with RedisTimeoutError once the deadline from the first call has passed', async () => {
    const client = new ScriptedClient();
    client.answer = () => undefined;
    const batch = new CommandBatch(client, 30);
    const started = Date.now();
    const results = await Promise.all([
      settle(batch.call('GET', 'a')),
      settle(batch.call('GET', 'b')),
    ]);
    expect(results.map((result) => result.error)).toEqual([
      expect.any(RedisTimeoutError),
      expect.any(RedisTimeoutError),
    ]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(29);
  });

  it('does not take a busy event loop for a timeout: a reply that arrived in time is delivered', async () => {
    const client = new ScriptedClient();
    client.answer = (command) =>
      new Promise((resolve) =>
        setTimeout(() => {
          resolve([null, command[1]]);
        }, 5),
      );
    const batch = new CommandBatch(client, 20);
    const pending = batch.call('GET', 'a');
    await nextTurn();
    const busyUntil = Date.now() + 60;
    while (Date.now() < busyUntil) {
      // Both the reply (5 ms) and the deadline (20 ms) fall due while the process is busy.
    }
    expect(await settle(pending)).toEqual({ value: 'a' });
  });

  it('gives a command the full timeout from its write when the process was busy past the deadline before writing it', async () => {
    const client = new ScriptedClient();
    client.answer = (command) =>
      new Promise((resolve) =>
        setTimeout(() => {
          resolve([null, command[1]]);
        }, 5),
      );
    const batch = new CommandBatch(client, 20);
    const pending = batch.call('GET', 'a');
    const busyUntil = Date.now() + 60;
    while (Date.now() < busyUntil) {
      // The deadline falls due before the batch leaves in this turn's check phase.
    }
    expect(await settle(pending)).toEqual({ value: 'a' });
  });

  it('gives the callers the error of a client that throws instead of rejecting', async () => {
    const client = new ScriptedClient();
    const broken = new TypeError('not a command');
    client.pipeline = () => {
      throw broken;
    };
    const batch = new CommandBatch(client, 1000);
    expect(
      await Promise.all([settle(batch.call('GET', 'a')), settle(batch.call('GET', 'b'))]),
    ).toEqual([{ error: broken }, { error: broken }]);
  });

  it('with a Cluster slot table, writes one pipeline per node and a command of no known node alone', async () => {
    const client = new ScriptedClient();
    client.slots = [['n1:1', 'r1:1'], ['n2:1'], ['n1:1']];
    const slotOf: Record<string, number> = { a: 0, b: 1, c: 2, d: 7 };
    const batch = new CommandBatch(client, 1000, (key) => slotOf[key] ?? 0);
    const replies = await Promise.all([
      batch.call('EVALSHA', 'sha', '1', 'a'),
      batch.call('EVALSHA', 'sha', '1', 'b'),
      batch.call('EVALSHA', 'sha', '1', 'c'),
      batch.call('EVALSHA', 'sha', '1', 'd'),
      batch.call('PING'),
    ]);
    expect(replies).toEqual([
      'reply:EVALSHA sha 1 a',
      'reply:EVALSHA sha 1 b',
      'reply:EVALSHA sha 1 c',
      'reply:EVALSHA sha 1 d',
      'reply:PING',
    ]);
    expect(client.writes).toEqual([
      {
        via: 'pipeline',
        commands: [
          ['EVALSHA', 'sha', '1', 'a'],
          ['EVALSHA', 'sha', '1', 'c'],
        ],
      },
      { via: 'call', commands: [['EVALSHA', 'sha', '1', 'b']] },
      { via: 'call', commands: [['EVALSHA', 'sha', '1', 'd']] },
      { via: 'call', commands: [['PING']] },
    ]);
  });
});
