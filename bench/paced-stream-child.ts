import { type Sent, startStream } from './paced-stream';

/**
 * A paced stream in a process of its own (see `startStreamProcess`): nothing the bench's own
 * process does (the keys bench holds a million generated keys and their secrets) delays sending or
 * reading, so none of its garbage collections is charged to the gateway.
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

// The bench that started this stream is gone (stopped, killed or crashed): stop sending. Left
// running, a stream to a closed port goes on loading the machine under every later measurement.
process.on('disconnect', () => {
  process.exit(0);
});
