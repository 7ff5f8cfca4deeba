import { ERROR_CODES, type ErrorCode } from '../errors';

/**
 * An answer kept for a key's retries: the upstream's (or a handler's) status, `Content-Type` and
 * body, byte for byte; or a refusal the gateway made itself (the `504` of an upstream that did not
 * answer in time), kept as its status, code and message and rendered again with the retry's own
 * request id.
 */
export type StoredAnswer =
  | {
      readonly kind: 'answer';
      readonly status: number;
      readonly contentType: string | undefined;
      readonly body: Buffer;
    }
  | {
      readonly kind: 'error';
      readonly status: number;
      readonly code: ErrorCode;
      readonly message: string;
    };

const VERSION = 1;
const ANSWER = 0;
const ERROR = 1;
/** No `Content-Type`: a length no header value can have. */
const NO_CONTENT_TYPE = 0xffff;

/** The answer as bytes: version, kind, status, then the kind's fields. */
export function encodeAnswer(answer: StoredAnswer): Buffer {
  if (answer.kind === 'answer') {
    const type =
      answer.contentType === undefined ? undefined : Buffer.from(answer.contentType, 'latin1');
    const head = Buffer.alloc(6);
    head.writeUInt8(VERSION, 0);
    head.writeUInt8(ANSWER, 1);
    head.writeUInt16BE(answer.status, 2);
    head.writeUInt16BE(type === undefined ? NO_CONTENT_TYPE : type.length, 4);
    return Buffer.concat(type === undefined ? [head, answer.body] : [head, type, answer.body]);
  }
  const code = Buffer.from(answer.code, 'latin1');
  const head = Buffer.alloc(5);
  head.writeUInt8(VERSION, 0);
  head.writeUInt8(ERROR, 1);
  head.writeUInt16BE(answer.status, 2);
  head.writeUInt8(code.length, 4);
  return Buffer.concat([head, code, Buffer.from(answer.message, 'utf8')]);
}

/** The answer `encodeAnswer` wrote, or `undefined` for bytes it did not write. */
export function decodeAnswer(bytes: Buffer): StoredAnswer | undefined {
  if (bytes.length < 5 || bytes.readUInt8(0) !== VERSION) return undefined;
  const status = bytes.readUInt16BE(2);
  if (status < 100 || status > 599) return undefined;
  if (bytes.readUInt8(1) === ANSWER) {
    if (bytes.length < 6) return undefined;
    const typeLength = bytes.readUInt16BE(4);
    if (typeLength === NO_CONTENT_TYPE) {
      return { kind: 'answer', status, contentType: undefined, body: bytes.subarray(6) };
    }
    if (bytes.length < 6 + typeLength) return undefined;
    return {
      kind: 'answer',
      status,
      contentType: bytes.toString('latin1', 6, 6 + typeLength),
      body: bytes.subarray(6 + typeLength),
    };
  }
  if (bytes.readUInt8(1) !== ERROR) return undefined;
  const codeLength = bytes.readUInt8(4);
  const code = bytes.toString('latin1', 5, 5 + codeLength);
  if (!(ERROR_CODES as readonly string[]).includes(code)) return undefined;
  return {
    kind: 'error',
    status,
    code: code as ErrorCode,
    message: bytes.toString('utf8', 5 + codeLength),
  };
}
