import { readFileSync } from 'node:fs';
import path from 'node:path';
import Ajv2020, { type ErrorObject, type ValidateFunction } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';

/**
 * The OpenAPI 3.1 description of the admin API, the forward-auth door and the error body
 * (`openapi/tollgate-admin.json`, the one source: the build copies it to `dist/openapi/`, where
 * the built gateway finds it beside `dist/gateway/`). Its schemas are JSON Schema 2020-12, so Ajv's
 * 2020 dialect compiles them as they are: the admin listener checks requests with them, and the
 * answer checks compare answers with them.
 */

/** Where the description is read from: two folders up from this file, in the source and in dist/. */
export const DOCUMENT_PATH = path.join(__dirname, '..', '..', 'openapi', 'tollgate-admin.json');

/** The id Ajv knows the document by; every schema is compiled as a reference into it. */
const DOCUMENT_ID = 'tollgate-admin.json';

/** The parts of the description this gateway reads. */
export interface OpenApiDocument {
  readonly openapi: string;
  readonly paths: Readonly<Record<string, Readonly<Record<string, OperationObject>>>>;
}

export interface OperationObject {
  readonly operationId: string;
  readonly requestBody?: { readonly required?: boolean };
  readonly responses: Readonly<
    Record<string, { readonly content?: Readonly<Record<string, unknown>> } | { $ref: string }>
  >;
}

/** The description and its schemas compiled, once per process. */
export class ApiDescription {
  /** The document's text as served at `GET /admin/v1/openapi.json`. */
  readonly text: string;
  readonly document: OpenApiDocument;
  private readonly ajv: Ajv2020;
  private readonly compiled = new Map<string, ValidateFunction>();

  constructor(text: string) {
    this.text = text;
    this.document = JSON.parse(text) as OpenApiDocument;
    // Strict, so a keyword Ajv does not know is an error rather than a rule silently unchecked;
    // `verbose` gives each error the schema that failed, whose description words the 400.
    this.ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true, verbose: true });
    addFormats(this.ajv, ['date-time']);
    // The document's own keywords (paths, info, …) are not JSON Schema: Ajv is told they are
    // annotations, and only the parts referenced below are compiled as schemas.
    this.ajv.addVocabulary([
      'openapi',
      'info',
      'servers',
      'tags',
      'paths',
      'components',
      'security',
      'webhooks',
      'jsonSchemaDialect',
      'externalDocs',
    ]);
    this.ajv.addSchema({ ...this.document, $id: DOCUMENT_ID });
  }

  /** The operation of a method and a path template of the document (`/admin/v1/keys/{id}`). */
  operation(method: string, template: string): OperationObject {
    const operation = this.document.paths[template]?.[method.toLowerCase()];
    if (operation === undefined) {
      throw new Error(`the API description has no ${method} ${template}`);
    }
    return operation;
  }

  /** The value at a pointer of the document (`#/a/b`); `follow`: through a `$ref` found there. */
  at(pointer: string, follow = false): unknown {
    let value: unknown = this.document;
    for (const segment of pointer.slice(2).split('/')) {
      const key = segment.replaceAll('~1', '/').replaceAll('~0', '~');
      value =
        typeof value === 'object' && value !== null
          ? (value as Record<string, unknown>)[key]
          : undefined;
    }
    const ref = (value as { $ref?: unknown } | undefined)?.$ref;
    return follow && typeof ref === 'string' ? this.at(ref, true) : value;
  }

  /** The validator of the schema at `pointer` (a JSON pointer into the document, `#/…`). */
  validator(pointer: string): ValidateFunction {
    let validate = this.compiled.get(pointer);
    if (validate === undefined) {
      validate = this.ajv.compile({ $ref: `${DOCUMENT_ID}${pointer}` });
      this.compiled.set(pointer, validate);
    }
    return validate;
  }
}

/** A JSON pointer's segment: `/` and `~` escaped. */
export function pointerSegment(text: string): string {
  return text.replaceAll('~', '~0').replaceAll('/', '~1');
}

/** Ajv's errors as one line: where each is, and what it says. */
export function describeErrors(errors: readonly ErrorObject[] | null | undefined): string {
  return (errors ?? [])
    .map((error) => `${error.instancePath || '(body)'} ${error.message ?? error.keyword}`)
    .join('; ');
}

let loaded: ApiDescription | undefined;

/** The description of `DOCUMENT_PATH`, read and compiled the first time it is asked for. */
export function apiDescription(): ApiDescription {
  loaded ??= new ApiDescription(readFileSync(DOCUMENT_PATH, 'utf8'));
  return loaded;
}
