import type { Response } from 'express';
import type { IdempotencyClaim } from '../core/idempotency';
import { requestNeverSent, TollgateError } from '../errors';
import type { StoredAnswer } from '../idempotency/answer';
import { REPLAYED_HEADER } from '../idempotency/key';

/**
 * The Express side of idempotent requests: the answer a first use gets is kept for its retries as
 * it is written (status, `Content-Type`, body), whoever writes it (a handler, the gateway's proxy,
 * the error handler); a retry is answered from what was kept.
 *
 * The answer's last bytes leave once the store has it, so a client that retries after reading the
 * whole answer is always replayed, never told the key is still in use.
 */

const RECORDER = Symbol('tollgate.idempotencyRecorder');

interface Recorder {
  readonly claim: IdempotencyClaim;
  /** The answer has ended and waits for the store: what is written later is not sent. */
  ending: boolean;
  /** Set by the error handler: the answer is the kit's own error body. */
  error?: TollgateError;
}

type Recorded = Response & { [RECORDER]?: Recorder };

type WriteArguments = [chunk?: unknown, encoding?: unknown, callback?: unknown];

/**
 * Keeps the answer `res` is about to get for `claim`'s retries. The answer is kept even when its
 * client has gone (a client that timed out retries, and is replayed the answer it missed): writes
 * to a closed connection are counted as written.
 */
export function recordAnswer(res: Response, claim: IdempotencyClaim): void {
  const recorder: Recorder = { claim, ending: false };
  (res as Recorded)[RECORDER] = recorder;
  const chunks: Buffer[] = [];
  let size = 0;
  const keep = (chunk: unknown, encoding: unknown): void => {
    if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
    const bytes = toBuffer(chunk, encoding);
    size += bytes.length;
    // Past the bound only the size is counted: the answer will not be kept.
    if (size <= claim.maxAnswerBytes) chunks.push(bytes);
  };
  const write = res.write.bind(res) as (...args: WriteArguments) => boolean;
  const end = res.end.bind(res) as (...args: WriteArguments) => Response;
  res.write = function recordedWrite(...args: WriteArguments): boolean {
    // Written after the end: neither kept nor sent (the client and the retries get one answer).
    if (recorder.ending) return true;
    keep(args[0], args[1]);
    // Nobody reads a closed connection: never ask the writer to wait for it.
    return res.destroyed || write(...args);
  } as Response['write'];
  res.end = function recordedEnd(...args: WriteArguments): Response {
    // A second end while the first waits for the store changes nothing.
    if (recorder.ending) return res;
    recorder.ending = true;
    keep(args[0], args[1]);
    const settled = requestNeverSent(recorder.error)
      ? claim.release()
      : size > claim.maxAnswerBytes
        ? claim.tooLarge(res.statusCode)
        : claim.complete(answerOf(res, recorder.error, chunks));
    const finish = (): void => {
      res.end = end as Response['end'];
      res.write = write as Response['write'];
      end(...args);
    };
    void settled.then(finish, finish);
    return res;
  } as Response['end'];
}

/**
 * The answer has ended and waits to be kept before its last bytes leave: for the error handler,
 * it is as good as sent.
 */
export function answerEnding(res: Response): boolean {
  return (res as Recorded)[RECORDER]?.ending === true;
}

/** Whether the answer `res` gets is kept for an `Idempotency-Key`'s retries. */
export function keepsAnswer(res: Response): boolean {
  return (res as Recorded)[RECORDER] !== undefined;
}

/**
 * The request of `res` was never sent on (its client left before it was): its key's claim is
 * released, so a retry is forwarded. Nothing is kept for it.
 */
export function releaseAnswer(res: Response): void {
  const recorder = (res as Recorded)[RECORDER];
  if (recorder !== undefined) void recorder.claim.release();
}

/**
 * The error handler tells a recorded answer that it is the kit's own error body: kept as its
 * status, code and message, and rendered again with each retry's own request id.
 */
export function noteErrorAnswer(res: Response, error: TollgateError): void {
  const recorder = (res as Recorded)[RECORDER];
  if (recorder !== undefined) recorder.error = error;
}

/** Answers a retry from its stored answer, marked `Idempotent-Replayed: true`. */
export function replayAnswer(
  res: Response,
  answer: StoredAnswer,
  next: (error?: unknown) => void,
): void {
  res.setHeader(REPLAYED_HEADER, 'true');
  if (answer.kind === 'error') {
    next(new TollgateError(answer.status, answer.code, answer.message));
    return;
  }
  res.status(answer.status);
  if (answer.contentType !== undefined) res.setHeader('Content-Type', answer.contentType);
  res.setHeader('Content-Length', answer.body.length);
  res.end(answer.body);
}

function answerOf(res: Response, error: TollgateError | undefined, chunks: Buffer[]): StoredAnswer {
  if (error !== undefined) {
    return { kind: 'error', status: error.status, code: error.code, message: error.message };
  }
  const type = res.getHeader('content-type');
  return {
    kind: 'answer',
    status: res.statusCode,
    contentType: type === undefined ? undefined : String(type),
    body: Buffer.concat(chunks),
  };
}

function toBuffer(chunk: unknown, encoding: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length);
  return Buffer.from(
    String(chunk),
    typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8',
  );
}
