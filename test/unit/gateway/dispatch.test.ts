import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { decodedParameter, routeDispatch } from '../../../gateway/dispatch';
import { InvalidRequestError, MethodNotAllowedError } from '../../../lib/errors';
import { RouteTable } from '../../../lib/entry/core';
import { series } from '../../../lib/entry/express';

/** A request as the dispatch reads it: its method and path (nothing else is read). */
function request(method: string, path: string): Request {
  return Object.assign(Object.create(null) as Request, { method, path });
}
const response = Object.create(null) as Response;
/** The names of the handlers that ran, in order (`step`). */
const ran: string[] = [];

/** Runs `handler` and reports what reached its `next`, and which handlers ran, in order. */
function run(
  handler: RequestHandler,
  req: Request = request('GET', '/'),
): { ran: string[]; next: unknown[][] } {
  const next: unknown[][] = [];
  ran.length = 0;
  void handler(req, response, ((...args: unknown[]) => next.push(args)) as NextFunction);
  return { ran: [...ran], next };
}
const step =
  (
    name: string,
    then: (next: NextFunction) => void = (next) => {
      next();
    },
  ): RequestHandler =>
  (_req, _res, next) => {
    ran.push(name);
    then(next);
  };

describe('series', () => {
  it('runs its handlers in turn, then the next layer once', () => {
    expect(run(series([step('a'), step('b'), step('c')]))).toEqual({
      ran: ['a', 'b', 'c'],
      next: [[]],
    });
  });

  it('skips the rest at an error passed or thrown, and hands it on once', () => {
    const passed = new Error('passed');
    expect(
      run(
        series([
          step('a', (next) => {
            next(passed);
          }),
          step('b'),
        ]),
      ),
    ).toEqual({
      ran: ['a'],
      next: [[passed]],
    });
    const thrown = new Error('thrown');
    const throwing: RequestHandler = () => {
      ran.push('throws');
      throw thrown;
    };
    expect(run(series([step('a'), throwing, step('c')]))).toEqual({
      ran: ['a', 'throws'],
      next: [[thrown]],
    });
  });

  it("hands Express's own signals on as they were given", () => {
    expect(
      run(
        series([
          step('a', (next) => {
            next('route');
          }),
          step('b'),
        ]),
      ).next,
    ).toEqual([['route']]);
  });

  it('goes on past a falsy value given to next, as Express does', () => {
    for (const nothing of [undefined, null, false, 0, '']) {
      expect(
        run(
          series([
            step('a', (next) => {
              next(nothing);
            }),
            step('b'),
          ]),
        ),
      ).toEqual({ ran: ['a', 'b'], next: [[]] });
    }
  });

  it('stops where a handler answers without calling next', () => {
    expect(run(series([step('a', () => undefined), step('b')]))).toEqual({
      ran: ['a'],
      next: [],
    });
  });
});

describe('routeDispatch', () => {
  const dispatch = routeDispatch(
    [
      { method: 'GET', path: '/items/', value: step('list') },
      { method: 'GET', path: '/items/:id/', value: step('read') },
      { method: 'POST', path: '/items/:id/approve/', value: step('approve') },
      { method: 'OPTIONS', path: '/items/:id/approve/', value: step('preflight') },
    ],
    /^[a-z0-9_]{1,8}$/,
  );

  it.each([
    ['GET', '/items/', 'list'],
    ['GET', '/items', 'list'],
    ['HEAD', '/items/', 'list'],
    ['GET', '/items/abc/', 'read'],
    ['GET', '/items/a%5Fb/', 'read'],
    ['POST', '/items/abc/approve', 'approve'],
    ['OPTIONS', '/items/abc/approve/', 'preflight'],
  ])('%s %s runs the route (%s)', (method, path, name) => {
    expect(run(dispatch, request(method, path))).toEqual({ ran: [name], next: [[]] });
  });

  it.each([
    ['GET', '/Items/'],
    ['GET', '/items//'],
    ['GET', '/items/a%2Fb/'],
    ['GET', '/items/toolongid/'],
    ['POST', '/items/%ZZ/other/'],
  ])('%s %s matches no route: on to the next layer', (method, path) => {
    expect(run(dispatch, request(method, path))).toEqual({ ran: [], next: [[]] });
  });

  it('refuses another method with 405 and the route methods in Allow (never OPTIONS)', () => {
    const { ran: handlers, next } = run(dispatch, request('DELETE', '/items/abc/approve/'));
    expect(handlers).toEqual([]);
    const [error] = next[0] ?? [];
    expect(error).toBeInstanceOf(MethodNotAllowedError);
    expect((error as MethodNotAllowedError).headers).toEqual({ Allow: 'POST' });
    const read = run(dispatch, request('POST', '/items/abc/')).next[0]?.[0];
    expect((read as MethodNotAllowedError).headers).toEqual({ Allow: 'GET, HEAD' });
  });

  it('refuses a malformed escape in a parameter of a route with 400', () => {
    const { ran: handlers, next } = run(dispatch, request('GET', '/items/%E0%A4%A/'));
    expect(handlers).toEqual([]);
    expect(next[0]?.[0]).toBeInstanceOf(InvalidRequestError);
  });
});

describe('RouteTable with a parameter matcher', () => {
  it('asks the matcher only on a path whose literal segments all match', () => {
    const asked: string[] = [];
    const table = new RouteTable(
      [{ method: 'POST', path: '/payouts/:id/approve/', value: 'approve' }],
      (segment) => {
        asked.push(segment);
        return true;
      },
    );
    expect(table.match('POST', '/payouts/p1/other/')).toEqual({ kind: 'not_found' });
    expect(asked).toEqual([]);
    expect(table.match('POST', '/payouts/p1/approve/')).toEqual({
      kind: 'found',
      value: 'approve',
    });
    expect(asked).toEqual(['p1']);
  });

  it('decodes a parameter before testing it, as Express did', () => {
    const matcher = decodedParameter(/^[a-z_]+$/);
    expect(matcher('a%5fb')).toBe(true);
    expect(matcher('a%2fb')).toBe(false);
    expect(() => matcher('%E0%A4%A')).toThrow(InvalidRequestError);
  });
});
