import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

/**
 * Reads a JSON document shaped `{ "<field>": [ element, … ], … }` in chunks, handing over each
 * element of the array under `field` as soon as it is complete, so a file of a million entries
 * never sits in memory as one string or one object graph: at any moment the reader holds
 * one chunk and one element.
 *
 * It walks only the two outer levels itself (the root object, its fields, the array's commas); each
 * element, field value or key is cut out by counting brackets outside strings and given to
 * `JSON.parse`, which checks its grammar. Why by hand: on a file of a million keys this walk is
 * faster than `JSON.parse` of the whole text in a small fraction of its heap, and several times
 * faster than the streaming parsers `@streamparser/json` and `stream-json`.
 */

/** The document is not JSON. */
export class JsonSyntaxError extends Error {}

/** The root object names a field twice (JSON.parse would keep the last; the reader refuses). */
export class DuplicateFieldError extends Error {}

export interface JsonStreamSink {
  /** The `index`th element of the array under the streamed field, parsed. */
  element(value: unknown, index: number): void;
  /** Any other field of the root object, or the streamed field when its value is not an array. */
  field(name: string, value: unknown): void;
  /** The root, parsed whole, when it is not an object. */
  root(value: unknown): void;
}

const TAB = 0x09;
const LINE_FEED = 0x0a;
const CARRIAGE_RETURN = 0x0d;
const SPACE = 0x20;
const QUOTE = 0x22;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_BRACKET = 0x5b;
const BACKSLASH = 0x5c;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

function isSpace(byte: number): boolean {
  return byte === SPACE || byte === LINE_FEED || byte === CARRIAGE_RETURN || byte === TAB;
}

/** Where the reader is between values. */
type Step =
  | 'root' // before the root value
  | 'first-key' // after `{`: a key or `}`
  | 'key' // after `,` in the root: a key
  | 'colon'
  | 'value' // after `:`
  | 'first-element' // after `[`: an element or `]`
  | 'element' // after `,` in the array: an element
  | 'after-element' // `,` or `]`
  | 'after-value' // `,` or `}`
  | 'done';

/** What a value being cut out is for. */
type Purpose = 'root' | 'key' | 'field' | 'element';

/** A value being cut out of the stream, possibly across chunks. */
class Cut {
  readonly pieces: Buffer[] = [];
  depth = 0;
  inString = false;
  escaped = false;
  constructor(
    readonly purpose: Purpose,
    /** A number, `true`, `false` or `null`: it ends before the delimiter after it. */
    readonly scalar: boolean,
  ) {}

  /**
   * Scans `chunk` from `from`: the index just past the value when it ends in this chunk (a scalar
   * ends before the delimiter that follows it), or -1 when the chunk ends first.
   */
  scan(chunk: Buffer, from: number): number {
    const end = this.scanTo(chunk, from);
    this.pieces.push(end === -1 ? Buffer.from(chunk.subarray(from)) : chunk.subarray(from, end));
    return end;
  }

  private scanTo(chunk: Buffer, from: number): number {
    const length = chunk.length;
    if (this.scalar) {
      for (let i = from; i < length; i++) {
        const byte = chunk[i] ?? 0;
        if (isSpace(byte) || byte === COMMA || byte === CLOSE_BRACKET || byte === CLOSE_BRACE) {
          return i;
        }
      }
      return -1;
    }
    let { depth, inString, escaped } = this;
    for (let i = from; i < length; i++) {
      const byte = chunk[i] ?? 0;
      if (inString) {
        if (escaped) escaped = false;
        else if (byte === BACKSLASH) escaped = true;
        else if (byte === QUOTE) {
          inString = false;
          if (depth === 0) return i + 1;
        }
      } else if (byte === QUOTE) inString = true;
      else if (byte === OPEN_BRACE || byte === OPEN_BRACKET) depth++;
      else if (byte === CLOSE_BRACE || byte === CLOSE_BRACKET) {
        depth--;
        if (depth === 0) return i + 1;
      }
    }
    this.depth = depth;
    this.inString = inString;
    this.escaped = escaped;
    return -1;
  }

  parse(): unknown {
    const [only] = this.pieces;
    const bytes =
      this.pieces.length === 1 && only !== undefined ? only : Buffer.concat(this.pieces);
    try {
      return JSON.parse(bytes.toString('utf8')) as unknown;
    } catch {
      throw new JsonSyntaxError('not valid JSON');
    }
  }
}

/** The reader's state between chunks; `write()` each chunk in order, then `end()`. */
export class JsonFieldStream {
  private step: Step = 'root';
  private cut: Cut | undefined;
  private key = '';
  private readonly keys = new Set<string>();
  private elements = 0;

  constructor(
    private readonly field: string,
    private readonly sink: JsonStreamSink,
  ) {}

  write(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.cut !== undefined) {
        const end = this.cut.scan(chunk, i);
        if (end === -1) return;
        this.finish(this.cut);
        i = end;
        continue;
      }
      const byte = chunk[i] ?? 0;
      if (isSpace(byte) || this.take(byte)) i++;
    }
  }

  end(): void {
    if (this.cut?.scalar === true) this.finish(this.cut);
    if (this.step !== 'done') throw new JsonSyntaxError('not valid JSON');
  }

  /**
   * One byte between values, not white space: true when it moved the reader on, false when a value
   * starts at it (the cut then scans from this byte).
   */
  private take(byte: number): boolean {
    switch (this.step) {
      case 'root':
        if (byte !== OPEN_BRACE) return this.start('root', byte);
        this.step = 'first-key';
        return true;
      case 'first-key':
        if (byte !== CLOSE_BRACE) return this.startKey(byte);
        this.step = 'done';
        return true;
      case 'key':
        return this.startKey(byte);
      case 'colon':
        this.expect(byte === COLON);
        this.step = 'value';
        return true;
      case 'value':
        if (byte !== OPEN_BRACKET || this.key !== this.field) return this.start('field', byte);
        this.step = 'first-element';
        return true;
      case 'first-element':
        if (byte !== CLOSE_BRACKET) return this.start('element', byte);
        this.step = 'after-value';
        return true;
      case 'element':
        return this.start('element', byte);
      case 'after-element':
        this.expect(byte === COMMA || byte === CLOSE_BRACKET);
        this.step = byte === COMMA ? 'element' : 'after-value';
        return true;
      case 'after-value':
        this.expect(byte === COMMA || byte === CLOSE_BRACE);
        this.step = byte === COMMA ? 'key' : 'done';
        return true;
      case 'done':
        return this.expect(false);
    }
  }

  private startKey(byte: number): false {
    this.expect(byte === QUOTE);
    return this.start('key', byte);
  }

  /** Starts cutting a value at its first byte (the next `write()` step scans from there). */
  private start(purpose: Purpose, byte: number): false {
    this.expect(byte !== COMMA && byte !== CLOSE_BRACE && byte !== CLOSE_BRACKET && byte !== COLON);
    this.cut = new Cut(purpose, byte !== OPEN_BRACE && byte !== OPEN_BRACKET && byte !== QUOTE);
    return false;
  }

  private finish(cut: Cut): void {
    this.cut = undefined;
    const value = cut.parse();
    switch (cut.purpose) {
      case 'root':
        this.sink.root(value);
        this.step = 'done';
        return;
      case 'key':
        this.key = value as string;
        if (this.keys.has(this.key)) {
          throw new DuplicateFieldError(`duplicate field ${JSON.stringify(this.key)}`);
        }
        this.keys.add(this.key);
        this.step = 'colon';
        return;
      case 'field':
        this.sink.field(this.key, value);
        this.step = 'after-value';
        return;
      case 'element':
        this.sink.element(value, this.elements++);
        this.step = 'after-element';
    }
  }

  private expect(valid: boolean): true {
    if (!valid) throw new JsonSyntaxError('not valid JSON');
    return true;
  }
}

/** The size of the chunks `readJsonFile` reads. */
const CHUNK_BYTES = 1 << 20;

/**
 * Reads the file at `path` through a `JsonFieldStream`. `opened(bytes)` is called with its size
 * before the first chunk. File errors are thrown as `ReadError`s (their `code` kept); the sink's
 * own errors and `JsonSyntaxError` pass through as thrown.
 */
export function readJsonFile(
  path: string,
  field: string,
  sink: JsonStreamSink,
  opened: (bytes: number) => void = () => undefined,
): void {
  const fd = fileCall(() => openSync(path, 'r'));
  try {
    opened(fileCall(() => fstatSync(fd)).size);
    const stream = new JsonFieldStream(field, sink);
    const chunk = Buffer.allocUnsafe(CHUNK_BYTES);
    for (;;) {
      const read = fileCall(() => readSync(fd, chunk, 0, CHUNK_BYTES, null));
      if (read === 0) break;
      stream.write(read === CHUNK_BYTES ? chunk : chunk.subarray(0, read));
    }
    stream.end();
  } finally {
    closeSync(fd);
  }
}

/** A file could not be opened or read; `code` is the system's (`ENOENT`, `EISDIR`, …). */
export class ReadError extends Error {
  constructor(readonly code: string) {
    super(`cannot be read (${code})`);
  }
}

function fileCall<T>(call: () => T): T {
  try {
    return call();
  } catch (error) {
    throw new ReadError((error as NodeJS.ErrnoException).code ?? 'read error');
  }
}
