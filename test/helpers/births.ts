import type http from 'node:http';
import type { ExpressPrototypes } from '../../lib';

export interface Births {
  /** Per request taken since the recording began: built with the app's prototypes or not. */
  readonly born: boolean[];
  /** Ends the recording. */
  stop(): void;
}

/**
 * Records, for every request the server takes from now on, whether Node built its request and
 * response with the app's own Express prototypes (`expressServerOptions`) before Express saw them:
 * the listener runs before the app's.
 */
export function recordBirths(server: http.Server, app: ExpressPrototypes): Births {
  const born: boolean[] = [];
  const note = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    born.push(
      Object.getPrototypeOf(req) === app.request && Object.getPrototypeOf(res) === app.response,
    );
  };
  server.prependListener('request', note);
  return {
    born,
    stop: () => {
      server.off('request', note);
    },
  };
}
