import { ConfigurationError } from '../../lib';

/**
 * A database fault as one line for the key command: what went wrong, never a stack. The caller
 * names the database (its URL redacted) and the whole line is scrubbed of passwords again.
 */

interface PgFault {
  readonly code?: unknown;
  readonly message?: unknown;
  readonly errors?: unknown;
}

export function describeDatabaseFault(error: unknown): string {
  if (error instanceof ConfigurationError) {
    // The schema check's message (`… run the migrations first (tollgate-keys migrate, …)`).
    return /schema version \d+, this build needs/.test(error.message)
      ? `${error.message}; with docker compose: docker compose --profile postgres run --rm migrate`
      : error.message;
  }
  const fault = (error ?? {}) as PgFault;
  let message = typeof fault.message === 'string' ? fault.message : String(error);
  // Node's connection attempt to several addresses (localhost: ::1 and 127.0.0.1) fails as an
  // AggregateError whose own message is empty.
  if (message === '' && Array.isArray(fault.errors)) {
    message = fault.errors
      .map((inner: unknown) => (inner instanceof Error ? inner.message : String(inner)))
      .join('; ');
  }
  const code = typeof fault.code === 'string' ? fault.code : undefined;
  if (message === '') message = code ?? 'unknown error';
  return message.split('\n')[0] ?? message;
}
