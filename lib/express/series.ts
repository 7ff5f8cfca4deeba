import type { NextFunction, Request, RequestHandler, Response } from 'express';

/**
 * Handlers run in turn as one: each one's `next()` calls the following one, the last one's calls
 * `next`. An error, thrown or passed (`next(err)`, `next('route')`), skips the rest and goes to
 * `next` as Express would take it from a single handler.
 */
export function series(handlers: readonly RequestHandler[]): RequestHandler {
  const [only] = handlers;
  if (handlers.length === 1 && only !== undefined) return only;
  return function seriesHandler(req: Request, res: Response, next: NextFunction): void {
    let index = 0;
    const step = (error?: unknown): void => {
      // Express's router takes any falsy value given to `next` (`false`, `0`, `''`) as none.
      if (error) {
        next(error);
        return;
      }
      const handler = handlers[index++];
      if (handler === undefined) {
        next();
        return;
      }
      try {
        // The kit's middlewares settle their own work into `next` and return nothing.
        void handler(req, res, step);
      } catch (thrown) {
        next(thrown);
      }
    };
    step();
  };
}
