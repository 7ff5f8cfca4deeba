import type { RedisCommandClient } from './redis-commands';

/**
 * The limiter's Redis commands, written together once per event-loop turn and each bounded by the
 * command timeout counted from its call.
 *
 * Every command called in one turn (the requests parsed in one poll phase, say) waits in a queue;
 * in the turn's check phase (`setImmediate`) the queue leaves as one ioredis `pipeline()`: one
 * socket write for all of them instead of one each. With a Cluster the queue is split by the node
 * that owns each command's first key (a pipeline must not span nodes); a command whose node is
 * not known yet is sent on its own.
 *
 * One timer per batch instead of a timer and a `Promise.race` per command, armed when the first
 * command of the batch is called: no command waits longer than `timeoutMs` from its write, which
 * is the turn of its call. When it fires, unanswered commands are failed with `RedisTimeoutError`
 * in the next check phase, after the poll phase has read any reply that arrived while the process
 * was busy: a busy event loop (a long GC pause, CPU starvation) is never mistaken for a Redis
 * timeout. For the same reason a batch that could only be written late (the process was busy in
 * the turn of the call) gets its full timeout from the write.
 */

/** The client has not answered a command within the command timeout. */
export class RedisTimeoutError extends Error {
  override readonly name = 'RedisTimeoutError';
  readonly code = 'REDIS_TIMEOUT';
  constructor(timeoutMs: number) {
    super(`Redis did not answer within ${timeoutMs} ms`);
  }
}

/** The part of an ioredis `Redis` or `Cluster` client the batch uses. */
export interface BatchTarget {
  readonly status: string;
  /** A Cluster's slot table: the node keys (`host:port`) serving each slot, master first. */
  readonly slots?: readonly (readonly string[])[];
  call(command: string, ...args: string[]): Promise<unknown>;
  pipeline(commands: string[][]): { exec(): Promise<[Error | null, unknown][] | null> };
}

/** Maps a key to its cluster slot (0 to 16383). */
export type KeySlot = (key: string) => number;

interface Pending {
  readonly command: string;
  readonly args: string[];
  settled: boolean;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

class Batch {
  readonly commands: Pending[] = [];
  private unanswered = 0;
  private writtenAt: number | undefined;
  private timer: NodeJS.Timeout;

  constructor(private readonly timeoutMs: number) {
    this.timer = this.arm(timeoutMs);
  }

  /**
   * The deadline: `timeoutMs` after the write, which is the turn of the call unless this process
   * was too busy to reach the turn's check phase; then Redis gets its full timeout from the write.
   */
  private arm(delayMs: number): NodeJS.Timeout {
    return setTimeout(() => {
      const remaining =
        this.writtenAt === undefined
          ? this.timeoutMs
          : this.writtenAt + this.timeoutMs - performance.now();
      if (remaining >= 1) {
        this.timer = this.arm(remaining);
        return;
      }
      setImmediate(() => {
        this.failUnanswered(new RedisTimeoutError(this.timeoutMs));
      });
    }, delayMs);
  }

  markWritten(): void {
    this.writtenAt = performance.now();
  }

  add(pending: Pending): void {
    this.commands.push(pending);
    this.unanswered += 1;
  }

  settle(pending: Pending, error: unknown, value?: unknown): void {
    if (pending.settled) return;
    pending.settled = true;
    if (error === null || error === undefined) pending.resolve(value);
    else pending.reject(error);
    this.unanswered -= 1;
    if (this.unanswered === 0) clearTimeout(this.timer);
  }

  failUnanswered(error: unknown): void {
    for (const pending of this.commands) this.settle(pending, error);
  }
}

export class CommandBatch implements RedisCommandClient {
  private batch: Batch | undefined;

  constructor(
    private readonly client: BatchTarget,
    private readonly timeoutMs: number,
    /** Given for a Cluster: the slot of a key, to group a batch by node. */
    private readonly keySlot?: KeySlot,
  ) {}

  get status(): string {
    return this.client.status;
  }

  call(command: string, ...args: string[]): Promise<unknown> {
    return new Promise((resolve, reject) => {
      let batch = this.batch;
      if (batch === undefined) {
        batch = new Batch(this.timeoutMs);
        this.batch = batch;
        setImmediate(this.flush);
      }
      batch.add({ command, args, settled: false, resolve, reject });
    });
  }

  private readonly flush = (): void => {
    const batch = this.batch;
    this.batch = undefined;
    if (batch === undefined) return;
    batch.markWritten();
    for (const group of this.groups(batch.commands)) {
      try {
        this.send(batch, group);
      } catch (error) {
        // A client that throws instead of rejecting: the callers get the error, never the process.
        for (const pending of group) batch.settle(pending, error);
      }
    }
  };

  private groups(commands: Pending[]): Pending[][] {
    if (this.keySlot === undefined || commands.length === 1) return [commands];
    const byNode = new Map<string, Pending[]>();
    const alone: Pending[][] = [];
    for (const pending of commands) {
      const node = this.nodeOf(pending);
      if (node === undefined) {
        alone.push([pending]);
        continue;
      }
      const group = byNode.get(node);
      if (group === undefined) byNode.set(node, [pending]);
      else group.push(pending);
    }
    return [...byNode.values(), ...alone];
  }

  /** The node owning the first key of `EVALSHA`/`EVAL sha numkeys key …`, when known. */
  private nodeOf(pending: Pending): string | undefined {
    const name = pending.command.toUpperCase();
    const key = pending.args[2];
    if ((name !== 'EVALSHA' && name !== 'EVAL') || key === undefined) return undefined;
    if (Number(pending.args[1]) < 1) return undefined;
    return this.client.slots?.[this.keySlot?.(key) ?? -1]?.[0];
  }

  private send(batch: Batch, group: Pending[]): void {
    const [only] = group;
    if (group.length === 1 && only !== undefined) {
      this.client.call(only.command, ...only.args).then(
        (value) => {
          batch.settle(only, null, value);
        },
        (error: unknown) => {
          batch.settle(only, error);
        },
      );
      return;
    }
    // ioredis reads `[name, ...args]` as a call of the pipeline's method `name`: `call` sends any
    // command by its name, as `client.call()` does.
    const pipeline = this.client.pipeline(
      group.map((pending) => ['call', pending.command, ...pending.args]),
    );
    pipeline.exec().then(
      (results) => {
        group.forEach((pending, index) => {
          const [error, value] = results?.[index] ?? [new Error('Redis gave no reply'), undefined];
          batch.settle(pending, error, value);
        });
      },
      (error: unknown) => {
        for (const pending of group) batch.settle(pending, error);
      },
    );
  }
}
