import {
  type BatchTarget,
  CommandBatch,
  type Corkable,
  RedisTimeoutError,
} from '../../../lib/rate-limit/command-batch';

/**
 * The batching logic over a scripted client (the real Redis, Sentinel and Cluster paths run in
 * test/integration/redis-limiter.test.ts and test/multiprocess/): what leaves in which write, how
 * replies and failures reach each caller, and when the deadline fails a command.
 */

type Reply = [Error | null, unknown];

/** A socket that counts corks, as Node's `Writable` does: writes leave once every cork is undone. */
class CountingSocket implements Corkable {
  writable = true;
  corked = 0;
  uncorks = 0;
  cork(): void {
    this.corked += 1;
  }
  uncork(): void {
    this.corked -= 1;
    this.uncorks += 1;
  }
}

/**
 * A client that records every command with the sockets' state when it was written, and answers as
 * `answer` says (never, if it returns undefined). With `masters`, it is shaped as a Cluster.
 */
class ScriptedClient implements BatchTarget {
  status = 'ready';
  readonly stream?: CountingSocket;
  readonly masters?: { stream: CountingSocket }[];
  readonly writes: { command: string[]; corked: boolean }[] = [];
  answer: (command: string[]) => Promise<Reply> | undefined = (command) =>
    Promise.resolve([null, `reply:${command.join(' ')}`]);

  constructor(masters?: number) {
    if (masters === undefined) this.stream = new CountingSocket();
    else this.masters = Array.from({ length: masters }, () => ({ stream: new CountingSocket() }));
  }

  get sockets(): CountingSocket[] {
    return this.masters?.map((master) => master.stream) ?? (this.stream ? [this.stream] : []);
  }

  nodes?(role: 'master'): readonly { stream: CountingSocket }[];

  call(command: string, ...args: string[]): Promise<unknown> {
    const corked = this.sockets.every((socket) => socket.corked > 0);
    this.writes.push({ command: [command, ...args], corked });
    const reply = this.answer([command, ...args]);
    if (reply === undefined) return new Promise(() => undefined);
    return reply.then(([error, value]) => (error === null ? value : Promise.reject(error)));
  }
}

/** `ScriptedClient` shaped as an ioredis `Cluster`: `nodes('master')` gives its masters. */
function scriptedCluster(masters: number): ScriptedClient {
  const client = new ScriptedClient(masters);
  client.nodes = (role) => {
    expect(role).toBe('master');
    return client.masters ?? [];
  };
  return client;
}

const settle = (promise: Promise<unknown>): Promise<{ value?: unknown; error?: unknown }> =>
  promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('CommandBatch', () => {
  it('writes the commands called in one turn with the socket corked, each caller getting its own reply', async () => {
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
      { command: ['EVALSHA', 'sha', '1', 'a'], corked: true },
      { command: ['EVALSHA', 'sha', '1', 'b'], corked: true },
      { command: ['GET', 'c'], corked: true },
    ]);
    expect(client.stream).toMatchObject({ corked: 0, uncorks: 1 });
  });

  it('writes a lone command without corking, and commands of later turns in later writes', async () => {
    const client = new ScriptedClient();
    const batch = new CommandBatch(client, 1000);
    expect(await batch.call('GET', 'a')).toBe('reply:GET a');
    const second = batch.call('GET', 'b');
    await nextTurn();
    const third = batch.call('GET', 'c');
    expect(await Promise.all([second, third])).toEqual(['reply:GET b', 'reply:GET c']);
    expect(client.writes.map((write) => write.corked)).toEqual([false, false, false]);
    expect(client.stream).toMatchObject({ corked: 0, uncorks: 0 });
  });

  it('does not cork a socket that cannot be written, nor a client without one', async () => {
    const closed = new ScriptedClient();
    if (closed.stream) closed.stream.writable = false;
    const bare: BatchTarget = {
      status: 'ready',
      call: (command, ...args) => Promise.resolve([command, ...args].join(' ')),
    };
    const [closedBatch, bareBatch] = [new CommandBatch(closed, 1000), new CommandBatch(bare, 1000)];
    expect(
      await Promise.all([
        closedBatch.call('GET', 'a'),
        closedBatch.call('GET', 'b'),
        bareBatch.call('GET', 'c'),
        bareBatch.call('GET', 'd'),
      ]),
    ).toEqual(['reply:GET a', 'reply:GET b', 'GET c', 'GET d']);
    expect(closed.stream).toMatchObject({ corked: 0, uncorks: 0 });
  });

  it('fails only the command whose reply is an error or whose write fails', async () => {
    const client = new ScriptedClient();
    const batch = new CommandBatch(client, 1000);
    const noScript = new Error('NOSCRIPT No matching script');
    const closed = new Error('Connection is closed.');
    client.answer = (command) => {
      if (command[3] === 'b') return Promise.resolve([noScript, undefined]);
      if (command[3] === 'c') return Promise.reject(closed);
      return Promise.resolve([null, command[3]]);
    };
    const results = await Promise.all([
      settle(batch.call('EVALSHA', 'sha', '1', 'a')),
      settle(batch.call('EVALSHA', 'sha', '1', 'b')),
      settle(batch.call('EVALSHA', 'sha', '1', 'c')),
    ]);
    expect(results).toEqual([{ value: 'a' }, { error: noScript }, { error: closed }]);
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

  it('gives a caller the error of a client that throws instead of rejecting, writes the rest and uncorks', async () => {
    const client = new ScriptedClient();
    const broken = new TypeError('not a command');
    const call = client.call.bind(client);
    client.call = (command, ...args) => {
      if (command === 'BAD') throw broken;
      return call(command, ...args);
    };
    const batch = new CommandBatch(client, 1000);
    expect(
      await Promise.all([
        settle(batch.call('BAD', 'a')),
        settle(batch.call('GET', 'b')),
        settle(batch.call('BAD', 'c')),
      ]),
    ).toEqual([{ error: broken }, { value: 'reply:GET b' }, { error: broken }]);
    expect(client.stream).toMatchObject({ corked: 0, uncorks: 1 });
  });

  it('with a Cluster, corks every master while the turn is written and leaves the routing to the client', async () => {
    const client = scriptedCluster(3);
    const batch = new CommandBatch(client, 1000);
    const replies = await Promise.all([
      batch.call('EVALSHA', 'sha', '1', 'a'),
      batch.call('EVALSHA', 'sha', '1', 'b'),
      batch.call('PING'),
    ]);
    expect(replies).toEqual(['reply:EVALSHA sha 1 a', 'reply:EVALSHA sha 1 b', 'reply:PING']);
    expect(client.writes.map((write) => write.corked)).toEqual([true, true, true]);
    for (const socket of client.sockets) expect(socket).toMatchObject({ corked: 0, uncorks: 1 });
  });
});
