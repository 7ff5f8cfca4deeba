import type { RedisCommandClient } from './redis-commands';

/**
 * The limiter's Redis commands, written together once per event-loop turn and each bounded by the
 * command timeout counted from its call.
 *
 * Every command called in one turn (the requests parsed in one poll phase, say) waits in a queue;
 * in the turn's check phase (`setImmediate`) the queue leaves with the client's own `call()`, the
 * client's socket corked meanwhile (Node's `Writable#cork()`): one socket write for all of them
 * instead of one each. With a Cluster the sockets of all its masters are corked, and ioredis routes
 * each command to the master that owns its key, as for any command.
 *
 * Not an ioredis `pipeline()`: a pipeline is a large object per batch (its own command table, a
 * promise and a result array on top of each command's), and under load its objects were most of
 * what reached V8's old generation and brought on full collections (figures in BENCHMARKS.md).
 * Corking writes the same bytes in the same one write.
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

/** A socket that can hold writes back and send them as one (a Node `net.Socket` or `TLSSocket`). */
export interface Corkable {
  readonly writable: boolean;
  cork(): void;
  uncork(): void;
}

/** The part of an ioredis `Redis` (single node or Sentinel) or `Cluster` client the batch uses. */
export interface BatchTarget {
  readonly status: string;
  call(command: string, ...args: string[]): Promise<unknown>;
  /** A `Redis` client's socket to its server (to its current master, with Sentinel). */
  readonly stream?: Corkable;
  /** A `Cluster`'s clients of its masters, one socket each. */
  nodes?(role: 'master'): readonly { readonly stream?: Corkable }[];
}

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
    const { commands } = batch;
    const sockets: readonly Corkable[] = commands.length > 1 ? this.sockets() : NO_SOCKETS;
    for (const socket of sockets) socket.cork();
    try {
      for (const pending of commands) this.send(batch, pending);
    } finally {
      for (const socket of sockets) socket.uncork();
    }
  };

  /** The sockets this turn's commands leave on: the client's, or each Cluster master's. */
  private sockets(): Corkable[] {
    const clients = this.client.nodes?.('master') ?? [this.client];
    const sockets: Corkable[] = [];
    for (const { stream } of clients) if (stream?.writable === true) sockets.push(stream);
    return sockets;
  }

  private send(batch: Batch, pending: Pending): void {
    try {
      this.client.call(pending.command, ...pending.args).then(
        (value) => {
          batch.settle(pending, null, value);
        },
        (error: unknown) => {
          batch.settle(pending, error);
        },
      );
    } catch (error) {
      // A client that throws instead of rejecting: the caller gets the error, never the process.
      batch.settle(pending, error);
    }
  }
}

const NO_SOCKETS: readonly Corkable[] = [];
