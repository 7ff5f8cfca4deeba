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

const ERROR_RESPONSE = '#/components/responses/Error';
const CHECKED = Symbol('tollgate.answerChecked');

type Answer = Response & { [CHECKED]?: true };
type End = (chunk?: unknown, encoding?: unknown, callback?: unknown) => Response;

/**
 * Checks the answer `res` is about to send against `expected`; the first check installed on a
 * response is the one that runs (a route's own check is more precise than the error handler's).
 */
export function checkAnswer(
  description: ApiDescription,
  logger: Logger,
  req: Request,
  res: Response,
  expected: ExpectedAnswers,
): void {
  const answer = res as Answer;
  // HEAD answers carry no body to compare.
  if (answer[CHECKED] === true || req.method === 'HEAD') return;
  answer[CHECKED] = true;
  const originalEnd = res.end.bind(res) as End;
  const end: End = (chunk, encoding, callback) => {
    res.end = originalEnd as Response['end'];
    if (res.headersSent) return originalEnd(chunk, encoding, callback);
    const fault = mismatch(description, expected.responses, res, chunk);
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

/** What about the answer does not match the description, or `undefined` when it does. */
function mismatch(
  description: ApiDescription,
  responses: string | undefined,
  res: Response,
  chunk: unknown,
): string | undefined {
  const status = res.statusCode;
  const pointer =
    responses === undefined ? ERROR_RESPONSE : responsePointer(description, responses, status);
  if (pointer === undefined) return `status ${status} is not described`;
  const response = description.at(pointer, true) as { content?: Record<string, unknown> };
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
  const validate = description.validator(`${pointer}/content/application~1json/schema`);
  return validate(body) ? undefined : describeErrors(validate.errors);
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

/** An error handler whose answers must be the error body. */
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

/**
 * The forward-auth door's check, mounted where the door is (`/authz`): each of its three paths
 * answers as its operation says; any other path is left to the routes after it.
 */
export function forwardAuthAnswerCheck(
  description: ApiDescription,
  logger: Logger,
  mountPath: string,
): RequestHandler {
  const operations = {
    forwardAuth: operationAnswers('get', `${mountPath}/forward-auth`),
    authRequest: operationAnswers('get', `${mountPath}/auth-request`),
    extAuthz: operationAnswers('get', `${mountPath}/ext-authz/{original_path}`),
  };
  return function forwardAuthAnswerCheckMiddleware(req, res, next) {
    const expected =
      req.path === '/forward-auth'
        ? operations.forwardAuth
        : req.path === '/auth-request'
          ? operations.authRequest
          : req.path === '/ext-authz' || req.path.startsWith('/ext-authz/')
            ? operations.extAuthz
            : undefined;
    if (expected !== undefined) checkAnswer(description, logger, req, res, expected);
    next();
  };
}
