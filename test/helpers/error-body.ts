import type { IncomingHttpHeaders } from 'node:http';

/**
 * Assertions on the JSON error body: `Content-Type: application/json` and exactly
 * `{status, code, message, request_id}` (and `scope` on a 429), with `request_id` equal
 * to the `X-Request-Id` header.
 */

export interface HttpAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly text: string;
}

export interface ExpectedError {
  readonly status: number;
  readonly code: string;
  /** Exact text where the message is fixed, or a pattern where only its subject is. */
  readonly message?: string | RegExp;
  /** A 429's `scope`: the limit that refused. */
  readonly scope?: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The parsed error body, after checking its shape, status, code, message and request id. */
export function expectErrorBody(
  answer: HttpAnswer,
  expected: ExpectedError,
): Record<string, unknown> {
  const summary = `${answer.status} ${answer.text.slice(0, 300)}`;
  expect({ status: answer.status, summary }).toEqual({ status: expected.status, summary });
  expect(answer.headers['content-type']).toMatch(/^application\/json(;|$)/);
  const body = JSON.parse(answer.text) as Record<string, unknown>;
  // A 429 also names the limit that refused, as its `scope`.
  const limited = expected.status === 429;
  expect(Object.keys(body).sort()).toEqual(
    limited
      ? ['code', 'message', 'request_id', 'scope', 'status']
      : ['code', 'message', 'request_id', 'status'],
  );
  if (limited) expect(body.scope).toMatch(/^[a-z][a-z0-9-]*$/);
  if (expected.scope !== undefined) expect(body.scope).toBe(expected.scope);
  expect(body.status).toBe(expected.status);
  expect(body.code).toBe(expected.code);
  expect(typeof body.message).toBe('string');
  expect(body.message).not.toBe('');
  if (typeof expected.message === 'string') expect(body.message).toBe(expected.message);
  else if (expected.message !== undefined) expect(body.message).toMatch(expected.message);
  expect(body.request_id).toMatch(UUID);
  expect(body.request_id).toBe(answer.headers['x-request-id']);
  return body;
}

/** The body without its request id, to compare two answers that must be indistinguishable. */
export function withoutRequestId(answer: HttpAnswer): Record<string, unknown> {
  const { request_id: _ignored, ...rest } = JSON.parse(answer.text) as Record<string, unknown>;
  return rest;
}

/** The `Allow` header as a sorted list of methods. */
export function allowedMethods(headers: IncomingHttpHeaders): string[] {
  const allow = headers.allow;
  if (typeof allow !== 'string') return [];
  return allow
    .split(',')
    .map((method) => method.trim())
    .filter((method) => method !== '')
    .sort();
}
