import express, { type RequestHandler } from 'express';
import { InvalidRequestError, UnsupportedMediaTypeError } from './errors';

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

export function jsonBody(options: JsonBodyOptions = {}): RequestHandler {
  const readRaw = express.raw({ type: () => true, limit: options.limit ?? DEFAULT_BODY_LIMIT, inflate: false });
  return function jsonBodyMiddleware(req, res, next) {
    if (!hasBody(req.headers)) {
      req.body = undefined;
      next();
      return;
    }
    if (req.is('application/json') === false || !isUtf8Charset(req.headers['content-type'])) {
      next(new UnsupportedMediaTypeError());
      return;
    }
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
  let value: unknown;
  try {
    value = JSON.parse(raw.toString('utf8'));
  } catch {
    throw new InvalidRequestError('The body is not valid JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidRequestError('The body must be a JSON object');
  }
  return value as Record<string, unknown>;
}
