import { InvalidRequestError } from '../../lib/internal';

/** What a write route acts on: the id of its path and its body's checked fields. */
export interface AdminRequest {
  readonly id: string;
  readonly body: Record<string, unknown>;
}

/**
 * The body as an object with only `allowed` fields; no body is an empty object. A misspelt field
 * is a 400, never silently ignored.
 */
export function fieldsOf(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (body === undefined) return {};
  const object = body as Record<string, unknown>;
  for (const field of Object.keys(object)) {
    if (!allowed.includes(field)) {
      throw new InvalidRequestError(
        allowed.length === 0
          ? 'This route takes no body fields'
          : `unknown field ${JSON.stringify(field.slice(0, 64))}; expected ${allowed.join(', ')}`,
      );
    }
  }
  return object;
}

/** A field the route needs present (`null` may be its value): a 400 with `expected` otherwise. */
export function requireField(body: Record<string, unknown>, field: string, expected: string): void {
  if (!Object.hasOwn(body, field)) throw new InvalidRequestError(`${field}: ${expected}`);
}

/** The route's `:id`, or `''` where the path has none. */
export function pathId(params: Record<string, unknown>): string {
  return typeof params.id === 'string' ? params.id : '';
}
