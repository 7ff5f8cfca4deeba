import type { ErrorObject } from 'ajv/dist/2020';
import type { RequestHandler } from 'express';
import { InvalidRequestError } from '../../lib/internal';
import { type ApiDescription, pointerSegment } from './document';

/**
 * The admin API's requests checked against the API description before any handler runs: the path
 * parameters, the query parameters and the JSON body each against the operation's schemas. A
 * request the description refuses is a `400 invalid_request` whose message names the field and
 * what it must be, in the words of the description: an unknown field is never silently ignored, a
 * missing one is named, a value of the wrong kind names what it should be. Rules the description
 * cannot state (a scope the gateway counts per account, a whitelist entry's syntax, a permission's
 * name) stay with the key store, which names the account, key or scope in its own 400.
 */

interface Parameter {
  readonly name: string;
  readonly in: 'path' | 'query' | 'header' | 'cookie';
  readonly required?: boolean;
  readonly description?: string;
}

interface Operation {
  readonly parameters?: readonly (Parameter | { readonly $ref: string })[];
  readonly requestBody?: { readonly content: Readonly<Record<string, unknown>> };
}

/** A checked place of the request: where its value comes from and its schema's pointer. */
interface Check {
  readonly name: string;
  readonly in: 'path' | 'query';
  readonly required: boolean;
  readonly description: string;
  readonly pointer: string;
}

/** The check of one operation of the description (`POST /admin/v1/accounts/{id}/keys`). */
export function requestCheck(
  description: ApiDescription,
  method: string,
  template: string,
): RequestHandler {
  const base = `#/paths/${pointerSegment(template)}/${method.toLowerCase()}`;
  const operation = description.at(base) as Operation;
  const checks: Check[] = (operation.parameters ?? []).flatMap((entry, index) => {
    const pointer = '$ref' in entry ? entry.$ref : `${base}/parameters/${index}`;
    const parameter = description.at(pointer) as Parameter;
    if (parameter.in !== 'path' && parameter.in !== 'query') return [];
    return [
      {
        name: parameter.name,
        in: parameter.in,
        required: parameter.required === true,
        description: parameter.description ?? '',
        pointer: `${pointer}/schema`,
      },
    ];
  });
  // Compiled now, so a schema Ajv refuses stops the listener from starting, not a request.
  for (const check of checks) description.validator(check.pointer);
  const bodyPointer =
    operation.requestBody === undefined
      ? undefined
      : `${base}/requestBody/content/application~1json/schema`;
  const validateBody = bodyPointer === undefined ? undefined : description.validator(bodyPointer);

  return function requestCheckMiddleware(req, _res, next) {
    for (const check of checks) {
      const source = check.in === 'path' ? req.params : req.query;
      const value: unknown = (source as Record<string, unknown>)[check.name];
      if (value === undefined) {
        if (check.required) {
          next(new InvalidRequestError(`${check.name}: ${check.description}`));
          return;
        }
        continue;
      }
      const validate = description.validator(check.pointer);
      if (!validate(value)) {
        next(new InvalidRequestError(`${check.name}: ${check.description}`));
        return;
      }
    }
    // No body is an empty object: the fields the operation requires are then named as missing.
    const body: unknown = req.body ?? {};
    if (validateBody === undefined) {
      if (typeof body === 'object' && body !== null && Object.keys(body).length > 0) {
        next(new InvalidRequestError('This route takes no body fields'));
        return;
      }
    } else if (!validateBody(body)) {
      next(new InvalidRequestError(bodyFault(description, validateBody.errors ?? [])));
      return;
    }
    next();
  };
}

/**
 * One message for a refused body, the first of: an unknown field (with the fields expected), a
 * missing field, a body that needs a field, then the deepest value at fault.
 */
export function bodyFault(description: ApiDescription, errors: readonly ErrorObject[]): string {
  const unknown = errors.find((error) => error.keyword === 'additionalProperties');
  if (unknown !== undefined) {
    const field = String(unknown.params.additionalProperty);
    const allowed = Object.keys(
      (unknown.parentSchema as { properties?: Record<string, unknown> }).properties ?? {},
    );
    const where = unknown.instancePath === '' ? '' : `${fieldPath(unknown.instancePath)}: `;
    return allowed.length === 0
      ? `${where}This route takes no body fields`
      : `${where}unknown field ${echoed(field)}; expected ${allowed.join(', ')}`;
  }
  const missing = errors.find((error) => error.keyword === 'required');
  if (missing !== undefined) {
    const field = String(missing.params.missingProperty);
    const property = (missing.parentSchema as { properties?: Record<string, unknown> })
      .properties?.[field];
    return `${joinPath(missing.instancePath, field)}: ${describedBy(description, property)}`;
  }
  const root = errors.find((error) => error.instancePath === '');
  if (root !== undefined) {
    return root.keyword === 'type'
      ? 'The body must be a JSON object'
      : describedBy(description, root.parentSchema);
  }
  const deepest = [...errors].sort(
    (a, b) => b.instancePath.split('/').length - a.instancePath.split('/').length,
  )[0];
  if (deepest === undefined) return 'The body does not match the API description';
  const where = fieldPath(deepest.instancePath);
  if (deepest.keyword === 'enum') {
    const allowed = (deepest.params.allowedValues as unknown[]).map(String).join(', ');
    const name =
      where
        .replace(/\[\d+\]$/, '')
        .split('.')
        .pop() ?? where;
    return `${where}: unknown ${name} ${echoed(deepest.data)}; expected one of ${allowed}`;
  }
  return `${where}: ${describedBy(description, deepest.parentSchema)}`;
}

/**
 * What was sent, quoted, when it is a short name (`"level-9"`, `"ipWhitelist"`); anything longer
 * or of other characters (a key pasted in the wrong field) is not sent back.
 */
function echoed(value: unknown): string {
  return typeof value === 'string' && /^[A-Za-z0-9_.:-]{1,24}$/.test(value)
    ? JSON.stringify(value)
    : 'value';
}

/** `/limits/payments` as `limits.payments`, `/permissions/1` as `permissions[1]`. */
function fieldPath(instancePath: string): string {
  return instancePath
    .split('/')
    .slice(1)
    .map((segment) => segment.replaceAll('~1', '/').replaceAll('~0', '~'))
    .reduce(
      (path, segment) =>
        /^\d+$/.test(segment)
          ? `${path}[${segment}]`
          : path === ''
            ? segment
            : `${path}.${segment}`,
      '',
    );
}

function joinPath(instancePath: string, field: string): string {
  const parent = fieldPath(instancePath);
  return parent === '' ? field : `${parent}.${field}`;
}

/** A schema's description, following its `$ref`; Ajv's own words where it has none. */
function describedBy(description: ApiDescription, schema: unknown): string {
  const resolved = resolveSchema(description, schema) as { description?: unknown } | undefined;
  return typeof resolved?.description === 'string'
    ? resolved.description
    : 'does not match the API description';
}

function resolveSchema(description: ApiDescription, schema: unknown): unknown {
  const ref = (schema as { $ref?: unknown } | undefined)?.$ref;
  const own = (schema as { description?: unknown } | undefined)?.description;
  return typeof ref === 'string' && own === undefined ? description.at(ref) : schema;
}
