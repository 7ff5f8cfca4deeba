import { apiDescription, pointerSegment } from '../../gateway/openapi/document';

/**
 * An answer received over HTTP, held to the API description (`openapi/tollgate-admin.json`) on
 * its own terms, without the gateway's answer checks: the operation is found by the method and
 * the path, the status must be declared under it (nothing falls back to `default`), every header
 * it requires must be there and every header it declares must match its schema, and the body must
 * match the schema of its media type (a `HEAD` answer must have none).
 */

export interface ReceivedAnswer {
  readonly status: number;
  /** Header names in lower case, as Node and fetch give them. */
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly text: string;
}

interface ResponseObject {
  readonly $ref?: string;
  readonly content?: Readonly<Record<string, unknown>>;
  readonly headers?: Readonly<Record<string, { readonly required?: boolean }>>;
}

const description = apiDescription();

/**
 * The path template of the description a request path falls under: a `{parameter}` is one
 * segment; failing that, a parameter ending a template takes the rest of the path, slashes
 * included (the ext-authz door's original path).
 */
export function templateOf(path: string): string | undefined {
  const bare = path.replace(/[?#].*$/s, '');
  const templates = Object.keys(description.document.paths);
  return (
    templates.find((template) => templatePattern(template, false).test(bare)) ??
    templates.find((template) => templatePattern(template, true).test(bare))
  );
}

function templatePattern(template: string, rest: boolean): RegExp {
  const segments = template.split('/');
  const source = segments
    .map((segment, index) => {
      if (!/^\{[^}]+\}$/.test(segment)) return segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      return rest && index === segments.length - 1 ? '.+' : '[^/]+';
    })
    .join('/');
  return new RegExp(`^${source}$`);
}

/** What about `answer` to `method path` does not match the description: `[]` when it all does. */
export function answerFaults(method: string, path: string, answer: ReceivedAnswer): string[] {
  const template = templateOf(path);
  if (template === undefined) return [`no path of the description matches ${path}`];
  const base = `#/paths/${pointerSegment(template)}/${method.toLowerCase()}`;
  const operation = description.at(base) as
    { responses: Readonly<Record<string, ResponseObject>> } | undefined;
  if (operation === undefined) return [`the description has no ${method} ${template}`];
  const entry = operation.responses[String(answer.status)];
  if (entry === undefined) {
    return [`status ${answer.status} is not declared for ${method} ${template}`];
  }
  const pointer = entry.$ref ?? `${base}/responses/${answer.status}`;
  return responseFaults(pointer, answer, method !== 'HEAD');
}

/** What about `answer` does not match the response object at `pointer`. */
export function responseFaults(pointer: string, answer: ReceivedAnswer, withBody = true): string[] {
  const response = description.at(pointer, true) as ResponseObject;
  const faults: string[] = [];
  for (const [name, header] of Object.entries(response.headers ?? {})) {
    const sent = answer.headers[name.toLowerCase()];
    if (sent === undefined) {
      if (header.required === true) faults.push(`no ${name} header, which is required`);
      continue;
    }
    const value = Array.isArray(sent) ? sent.join(', ') : sent;
    const validate = description.validator(`${pointer}/headers/${pointerSegment(name)}/schema`);
    if (!validate(value)) faults.push(`header ${name} ${JSON.stringify(value)} does not match`);
  }
  if (!withBody || response.content === undefined) {
    if (answer.text !== '') faults.push('a body where none is described');
    return faults;
  }
  const type = answer.headers['content-type'];
  if (typeof type !== 'string' || !/^application\/json(;|$)/.test(type)) {
    faults.push(`Content-Type ${String(type)} where application/json is described`);
    return faults;
  }
  let body: unknown;
  try {
    body = JSON.parse(answer.text);
  } catch {
    faults.push('a body that is not JSON');
    return faults;
  }
  const validate = description.validator(`${pointer}/content/application~1json/schema`);
  if (!validate(body)) {
    for (const error of validate.errors ?? []) {
      faults.push(`body ${error.instancePath || '(root)'} ${error.message ?? error.keyword}`);
    }
  }
  return faults;
}

/** Fails the test, naming the request, status and faults, unless the answer is as described. */
export function expectDescribed(method: string, path: string, answer: ReceivedAnswer): void {
  expect({
    request: `${method} ${path}`,
    status: answer.status,
    faults: answerFaults(method, path, answer),
  }).toEqual({ request: `${method} ${path}`, status: answer.status, faults: [] });
}

/** The statuses the description declares for `method template`, in order. */
export function declaredStatuses(method: string, template: string): number[] {
  const operation = description.operation(method, template);
  return Object.keys(operation.responses)
    .map(Number)
    .sort((a, b) => a - b);
}
