import { type Sent, startStream } from './traffic';

/**
 * The keys bench's traffic, in a process of its own (see `startStreamProcess`): the bench's own
 * process holds the generated population (a million keys and their secrets), and its garbage
 * collections would otherwise delay sending and reading and be charged to the gateway.
 *
 * Messages: `{ url, headerSets, rate }` starts the stream; `'stop'` ends it and answers with
 * every request as `[dueAt, doneAt, status]`, times in ms since the epoch (performance.timeOrigin
 * + performance.now()), which the parent turns back into its own clock.
 */

interface Start {
  readonly url: string;
  readonly headerSets: readonly Readonly<Record<string, string>>[];
  readonly rate: number;
}

let stream: ReturnType<typeof startStream> | undefined;

process.on('message', (message: Start | 'stop') => {
  if (message === 'stop') {
    void stream?.stop().then((sent: Sent[]) => {
      const origin = performance.timeOrigin;
      process.send?.(
        sent.map((s) => [origin + s.dueAt, origin + s.doneAt, s.status]),
        () => {
          process.exit(0);
        },
      );
    });
    return;
  }
  stream = startStream(message.url, message.headerSets, message.rate);
  process.send?.('started');
});
