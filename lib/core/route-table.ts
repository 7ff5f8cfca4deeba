import { ConfigurationError } from '../errors';

/**
 * A route table matched without a framework, for doors that receive a method and a path rather
 * than a routed request (forward authentication). Paths are matched as they were
 * sent, never decoded: a segment is literal or `:name`, a parameter matches `parameter` whole,
 * and a trailing slash is optional, as in the gateway's Express router (`strict: false`). Anything
 * else (`//`, `..`, percent-escapes in a literal segment) matches no route: a refusal, never a
 * route the upstream might read another way.
 */

export type RouteLookup<T> =
  | { readonly kind: 'found'; readonly value: T }
  | { readonly kind: 'method_not_allowed'; readonly allowed: readonly string[] }
  | { readonly kind: 'not_found' };

export interface RouteTableEntry<T> {
  readonly method: string;
  /** `/api/v1/transactions/:id/`: literal segments and `:name` parameters. */
  readonly path: string;
  readonly value: T;
}

/** The id pattern of the gateway's routes (`/transactions/:id/`): opaque ids of 1 to 64 chars. */
export const DEFAULT_PARAMETER_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Whether a path segment is a parameter's value. It may throw to refuse the request (a malformed
 * escape, say): only for a path whose literal segments all match, and `match()` lets it through.
 */
export type ParameterMatcher = (segment: string) => boolean;

interface CompiledPath<T> {
  readonly segments: readonly (string | null)[];
  readonly byMethod: Map<string, T>;
  readonly allowed: string[];
}

export class RouteTable<T> {
  private readonly paths: CompiledPath<T>[] = [];
  private readonly parameter: ParameterMatcher;

  /** `parameter`: a pattern the segment must match as sent, or a matcher of its own. */
  constructor(
    entries: readonly RouteTableEntry<T>[],
    parameter: RegExp | ParameterMatcher = DEFAULT_PARAMETER_PATTERN,
  ) {
    this.parameter =
      typeof parameter === 'function' ? parameter : (segment) => parameter.test(segment);
    for (const entry of entries) {
      if (!/^[A-Z]+$/.test(entry.method)) {
        throw new ConfigurationError(
          `route ${entry.path}: method must be upper case, got ${JSON.stringify(entry.method)}`,
        );
      }
      const segments = splitPath(entry.path);
      if (segments === undefined || segments.some((segment) => segment === '')) {
        throw new ConfigurationError(`route ${JSON.stringify(entry.path)}: not a path`);
      }
      const pattern = segments.map((segment) => (segment.startsWith(':') ? null : segment));
      let compiled = this.paths.find((path) => samePattern(path.segments, pattern));
      if (compiled === undefined) {
        compiled = { segments: pattern, byMethod: new Map(), allowed: [] };
        this.paths.push(compiled);
      }
      if (compiled.byMethod.has(entry.method)) {
        throw new ConfigurationError(`route ${entry.method} ${entry.path}: listed twice`);
      }
      compiled.byMethod.set(entry.method, entry.value);
      compiled.allowed.push(entry.method);
      // HEAD is answered like GET, as Express does.
      if (entry.method === 'GET' && !compiled.byMethod.has('HEAD')) compiled.allowed.push('HEAD');
    }
  }

  /** The route of `method` and `path` (no query); `HEAD` finds a `GET` route. */
  match(method: string, path: string): RouteLookup<T> {
    const segments = splitPath(path);
    if (segments === undefined) return { kind: 'not_found' };
    const found = this.paths.find((compiled) => this.matches(compiled.segments, segments));
    if (found === undefined) return { kind: 'not_found' };
    const value =
      found.byMethod.get(method) ?? (method === 'HEAD' ? found.byMethod.get('GET') : undefined);
    if (value === undefined) return { kind: 'method_not_allowed', allowed: found.allowed };
    return { kind: 'found', value };
  }

  /** Literal segments first: a parameter is only looked at on a path that is otherwise this one. */
  private matches(pattern: readonly (string | null)[], segments: readonly string[]): boolean {
    if (pattern.length !== segments.length) return false;
    for (let index = 0; index < pattern.length; index++) {
      const literal = pattern[index];
      if (literal !== null && literal !== segments[index]) return false;
    }
    for (let index = 0; index < pattern.length; index++) {
      if (pattern[index] === null && !this.parameter(segments[index] ?? '')) return false;
    }
    return true;
  }
}

/** `/a/b/` and `/a/b` as `['a', 'b']`; `undefined` for what is not an absolute path. */
function splitPath(path: string): string[] | undefined {
  if (!path.startsWith('/')) return undefined;
  const trimmed = path.length > 1 && path.endsWith('/') ? path.slice(1, -1) : path.slice(1);
  return trimmed === '' ? [] : trimmed.split('/');
}

function samePattern(a: readonly (string | null)[], b: readonly (string | null)[]): boolean {
  return a.length === b.length && a.every((segment, index) => segment === b[index]);
}
