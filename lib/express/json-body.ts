import { check, checkOptions, type OptionChecks } from '../options';
import bytes from 'bytes';
import express, { type RequestHandler } from 'express';
import {
  ConfigurationError,
  InvalidRequestError,
  PayloadTooLargeError,
  UnsupportedMediaTypeError,
} from '../errors';

/**
 * Reads a JSON object body: `application/json` only (415 otherwise, compressed bodies too), at
 * most `limit` bytes (413), a JSON object (400 for malformed JSON or any other value). Sets
 * `req.body` to the parsed object and `req.rawBody` to the bytes received, so a proxy forwards the
 * body exactly as it came. A request without a body passes with `req.body` undefined.
 */

export interface JsonBodyOptions {
  /** Largest body accepted, in bytes or a string like `'64kb'`. Defaults to `'64kb'`. */
  limit?: number | string;
}

export const DEFAULT_BODY_LIMIT = '64kb';

/** The refusal of a JSON body declared in another charset: it says which one is read. */
const NOT_UTF8 = 'JSON bodies must be UTF-8 (Content-Type: application/json; charset=utf-8)';

const JSON_BODY_OPTION_CHECKS: OptionChecks<JsonBodyOptions> = {
  limit: check(
    "a size in bytes: a number, or a string such as '64kb'",
    (value) => typeof value === 'number' || typeof value === 'string',
  ),
};

export function jsonBody(options: JsonBodyOptions = {}): RequestHandler {
  checkOptions('jsonBody()', options, JSON_BODY_OPTION_CHECKS);
  const limit = bytes.parse(options.limit ?? DEFAULT_BODY_LIMIT);
  if (limit === null || !Number.isSafeInteger(limit) || limit < 0) {
    throw new ConfigurationError(`jsonBody(): invalid limit ${JSON.stringify(options.limit)}`);
  }
  const readRaw = express.raw({ type: () => true, limit, inflate: false });
  return function jsonBodyMiddleware(req, res, next) {
    if (!hasBody(req.headers)) {
      req.body = undefined;
      next();
      return;
    }
    // A declared length over the limit is refused at once, from the header:
    // reading, or waiting for, a body that will be refused anyway would hold the connection.
    if (Number(req.headers['content-length'] ?? 0) > limit) {
      next(new PayloadTooLargeError());
      return;
    }
    if (req.is('application/json') === false) {
      next(new UnsupportedMediaTypeError());
      return;
    }
    if (!isUtf8Charset(req.headers['content-type'])) {
      next(new UnsupportedMediaTypeError(NOT_UTF8));
      return;
    }
    // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment -- req is the IncomingMessage Node created
    readRaw(req, res, (error?: unknown) => {
      if (error !== undefined) {
        next(error);
        return;
      }
      const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      req.rawBody = raw;
      try {
        req.body = parseJsonObject(raw);
      } catch (parseError) {
        next(parseError);
        return;
      }
      next();
    });
  };
}

function hasBody(headers: { 'transfer-encoding'?: string; 'content-length'?: string }): boolean {
  if (headers['transfer-encoding'] !== undefined) return true;
  const length = headers['content-length'];
  return length !== undefined && length !== '0';
}

function isUtf8Charset(contentType: string | undefined): boolean {
  const charset = /;\s*charset=("?)([^";\s]+)\1/i.exec(contentType ?? '')?.[2];
  return charset === undefined || /^utf-?8$/i.test(charset);
}

/** Parses UTF-8 JSON that must be an object; throws `InvalidRequestError` otherwise. */
export function parseJsonObject(raw: Buffer): Record<string, unknown> {
  const text = raw.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new InvalidRequestError('The body is not valid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidRequestError('The body must be a JSON object');
  }
  if (hasDuplicateKey(text)) {
    throw new InvalidRequestError('The body names a field twice');
  }
  return value as Record<string, unknown>;
}

/**
 * True when an object of `text` (valid JSON) names a key twice. `JSON.parse` keeps the last value,
 * other parsers the first: `{"public_key": a, "public_key": b}` would authenticate one key here
 * and show another upstream. Keys are compared decoded, so `"api\u005fkey"` is `"api_key"`.
 */
function hasDuplicateKey(text: string): boolean {
  const objects: (Set<string> | undefined)[] = [];
  let expectingKey = false;
  for (let i = 0; i < text.length; i++) {
    const char = text[i];
    if (char === '"') {
      let end = i + 1;
      while (text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      const keys = objects.at(-1);
      if (expectingKey && keys !== undefined) {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        if (keys.has(key)) return true;
        keys.add(key);
      }
      expectingKey = false;
      i = end;
    } else if (char === '{' || char === '[') {
      objects.push(char === '{' ? new Set() : undefined);
      expectingKey = char === '{';
    } else if (char === '}' || char === ']') {
      objects.pop();
      expectingKey = false;
    } else if (char === ',') {
      expectingKey = objects.at(-1) !== undefined;
    }
  }
  return false;
}
