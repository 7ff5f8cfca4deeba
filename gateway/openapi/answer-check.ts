import type { ErrorRequestHandler, Request, RequestHandler, Response } from 'express';
import { errorBody, type Logger } from '../../lib';
import { InternalError } from '../../lib/internal';
import { type ApiDescription, describeErrors, pointerSegment } from './document';

/**
 * Answer checks: every answer of the admin API, of the forward-auth door and of the error handlers
 * is compared with the API description before it is sent. An answer that does not match becomes
 * `500 internal_error`, with one log line naming the route and what did not match, so a test that
 * receives it fails: the description cannot drift from what the code answers. They cost a parse
 * and a validation per answer, so they are off unless `TOLLGATE_CHECK_ANSWERS=1` (the test suite
 * sets it for every app and every gateway process it starts); when off, nothing of them is
 * mounted, and the main listener's routes run exactly as without them.
 */

export const ANSWER_CHECKS_VARIABLE = 'TOLLGATE_CHECK_ANSWERS';

/** Whether the environment asks for answer checks (`TOLLGATE_CHECK_ANSWERS=1`). */
export function answerChecksRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  return env[ANSWER_CHECKS_VARIABLE] === '1';
}

/** The answers the description allows for one request: a pointer to its responses object. */
export interface ExpectedAnswers {
  /** What the log names: the method and the path template (`POST /admin/v1/keys/{id}/roll`). */
  readonly route: string;
  /** `#/paths/…/post/responses`, or `undefined` where any answer must be the error body. */
  readonly responses: string | undefined;
}

/** The pointer of an operation's responses. */
export function operationAnswers(method: string, template: string): ExpectedAnswers {
  return {
    route: `${method.toUpperCase()} ${template}`,
    responses: `#/paths/${pointerSegment(template)}/${method.toLowerCase()}/responses`,
  };
}

/** Where no operation is known (the error handlers), an answer must be the error body. */
const ERROR_BODY = '#/components/schemas/ErrorBody';
/** There, a `405` must be the answer every listener gives a method its path does not take. */
const METHOD_NOT_ALLOWED = '#/components/responses/MethodNotAllowed';
const CHECKED = Symbol('tollgate.answerChecked');

type Answer = Response & { [CHECKED]?: true };
type End = (chunk?: unknown, encoding?: unknown, callback?: unknown) => Response;

/** The parts of a response object the checks read. */
interface ResponseObject {
  readonly content?: Readonly<Record<string, unknown>>;
  readonly headers?: Readonly<Record<string, { readonly required?: boolean }>>;
}

/**
 * Checks the answer `res` is about to send against `expected`; the first check installed on a
 * response is the one that runs (a route's own check is more precise than the error handler's).
 * A `HEAD` answer carries no body: its status and headers are checked, as its `GET`'s would be.
 */
export function checkAnswer(
  description: ApiDescription,
  logger: Logger,
  req: Request,
  res: Response,
  expected: ExpectedAnswers,
): void {
  const answer = res as Answer;
  if (answer[CHECKED] === true) return;
  answer[CHECKED] = true;
  const withBody = req.method !== 'HEAD';
  const originalEnd = res.end.bind(res) as End;
  const end: End = (chunk, encoding, callback) => {
    res.end = originalEnd as Response['end'];
    if (res.headersSent) return originalEnd(chunk, encoding, callback);
    const fault = mismatch(description, expected.responses, res, chunk, withBody);
    if (fault === undefined) return originalEnd(chunk, encoding, callback);
    logger.error(
      {
        event: 'openapi.answer_mismatch',
        route: expected.route,
        status: res.statusCode,
        error: fault,
        request_id: req.requestId,
      },
      `the answer to ${expected.route} does not match the API description: ${fault}`,
    );
    const body = JSON.stringify(errorBody(new InternalError(), req.requestId));
    res.statusCode = 500;
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
    res.setHeader('Content-Length', Buffer.byteLength(body));
    return originalEnd(body, 'utf8', typeof encoding === 'function' ? encoding : callback);
  };
  res.end = end as Response['end'];
}

/**
 * What about the answer does not match the description, or `undefined` when it does: its status
 * must be declared (the description has no `default` to stand in for one), every header the
 * description requires must be sent and every header it declares must match its schema, and the
 * body must match, unless `withBody` is false (a `HEAD` answer, whose body is never sent).
 */
function mismatch(
  description: ApiDescription,
  responses: string | undefined,
  res: Response,
  chunk: unknown,
  withBody: boolean,
): string | undefined {
  const status = res.statusCode;
  let pointer: string | undefined;
  let schema: string;
  if (responses === undefined) {
    if (status < 400) return `status ${status} where an error is due`;
    pointer = status === 405 ? METHOD_NOT_ALLOWED : undefined;
    schema = ERROR_BODY;
  } else {
    pointer = responsePointer(description, responses, status);
    if (pointer === undefined) return `status ${status} is not described`;
    schema = `${pointer}/content/application~1json/schema`;
  }
  const response: ResponseObject =
    pointer === undefined
      ? { content: { 'application/json': {} } }
      : (description.at(pointer, true) as ResponseObject);
  const headerFault = headersMismatch(description, pointer, response, res);
  if (headerFault !== undefined) return headerFault;
  if (!withBody) return undefined;
  const text = bodyText(chunk);
  if (response.content === undefined) {
    return text === '' ? undefined : 'a body where the description has none';
  }
  if (response.content['application/json'] === undefined) {
    return 'the description has no application/json answer here';
  }
  const type = res.getHeader('Content-Type');
  if (typeof type !== 'string' || !/^application\/json(;|$)/.test(type)) {
    return `Content-Type ${String(type)} where application/json is described`;
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return 'a body that is not JSON';
  }
  const validate = description.validator(schema);
  return validate(body) ? undefined : describeErrors(validate.errors);
}

/** The declared headers: each required one sent, each one sent matching its schema. */
function headersMismatch(
  description: ApiDescription,
  pointer: string | undefined,
  response: ResponseObject,
  res: Response,
): string | undefined {
  if (pointer === undefined) return undefined;
  for (const [name, header] of Object.entries(response.headers ?? {})) {
    const sent = res.getHeader(name);
    if (sent === undefined) {
      if (header.required === true) return `no ${name} header where the description requires one`;
      continue;
    }
    const value = Array.isArray(sent) ? sent.join(', ') : String(sent);
    const validate = description.validator(`${pointer}/headers/${pointerSegment(name)}/schema`);
    if (!validate(value)) return `header ${name}: ${describeErrors(validate.errors)}`;
  }
  return undefined;
}

/** The response object for `status`: its own, else its class (`4XX`), else `default`. */
function responsePointer(
  description: ApiDescription,
  responses: string,
  status: number,
): string | undefined {
  const described = description.at(responses, true) as Record<string, unknown>;
  for (const key of [String(status), `${String(status).charAt(0)}XX`, 'default']) {
    if (Object.hasOwn(described, key)) {
      const entry = described[key] as { $ref?: string };
      return entry.$ref ?? `${responses}/${key}`;
    }
  }
  return undefined;
}

function bodyText(chunk: unknown): string {
  if (chunk === undefined || chunk === null) return '';
  if (typeof chunk === 'string') return chunk;
  if (chunk instanceof Uint8Array) return Buffer.from(chunk).toString('utf8');
  // Express sends text or bytes; anything else is no body the description could allow.
  return '(a body that is neither text nor bytes)';
}

/** A route's check: its answers are those of its operation in the description. */
export function answerCheck(
  description: ApiDescription,
  logger: Logger,
  expected: ExpectedAnswers,
): RequestHandler {
  return function answerCheckMiddleware(req, res, next) {
    checkAnswer(description, logger, req, res, expected);
    next();
  };
}

/**
 * An error handler whose answers must be the error body; a `405` must also be the `MethodNotAllowed`
 * answer, its `Allow` header included.
 */
export function checkedErrorHandler(
  handler: ErrorRequestHandler,
  description: ApiDescription,
  logger: Logger,
): ErrorRequestHandler {
  return function checkedErrorHandlerMiddleware(error: unknown, req, res, next) {
    checkAnswer(description, logger, req, res, {
      route: `${req.method} ${req.route === undefined ? '(no route)' : String((req.route as { path: unknown }).path)}`,
      responses: undefined,
    });
    handler(error, req, res, next);
  };
}

/** The methods an OpenAPI path item can describe: the ext-authz door is described for each. */
const DESCRIBED_METHODS: ReadonlySet<string> = new Set([
  'GET',
  'HEAD',
  'POST',
  'PUT',
  'PATCH',
  'DELETE',
  'OPTIONS',
  'TRACE',
]);

/**
 * The forward-auth door's check, mounted where the door is (`/authz`): each of its three paths
 * answers as its operation says; any other path is left to the routes after it. Envoy asks the
 * ext-authz path with the original method, so its operation is the one of the request's method;
 * a method OpenAPI cannot name (`PROPFIND`) has no operation, and its answer must be the error
 * body. The two other paths are described for `GET`, the method their proxies ask with.
 */
export function forwardAuthAnswerCheck(
  description: ApiDescription,
  logger: Logger,
  mountPath: string,
): RequestHandler {
  const extAuthz = `${mountPath}/ext-authz/{original_path}`;
  const operations = {
    forwardAuth: operationAnswers('get', `${mountPath}/forward-auth`),
    authRequest: operationAnswers('get', `${mountPath}/auth-request`),
    extAuthz: new Map(
      [...DESCRIBED_METHODS].map((method) => [method, operationAnswers(method, extAuthz)]),
    ),
  };
  const extAuthzUndescribed = (method: string): ExpectedAnswers => ({
    route: `${method} ${extAuthz}`,
    responses: undefined,
  });
  return function forwardAuthAnswerCheckMiddleware(req, res, next) {
    const expected =
      req.path === '/forward-auth'
        ? operations.forwardAuth
        : req.path === '/auth-request'
          ? operations.authRequest
          : req.path === '/ext-authz' || req.path.startsWith('/ext-authz/')
            ? (operations.extAuthz.get(req.method) ?? extAuthzUndescribed(req.method))
            : undefined;
    if (expected !== undefined) checkAnswer(description, logger, req, res, expected);
    next();
  };
}
