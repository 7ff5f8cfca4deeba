import type { RequestHandler } from 'express';
import { ConflictError } from '../../lib/internal';
import { type KeyDirectory } from '../../lib';
import type { StoreAction } from './routes';
import { recordAccountAnswers } from './views';

/** With a keys file: the keys in force are listed, every write is refused. */
export function fileHandlers(
  directory: KeyDirectory,
  reason: string,
): Record<StoreAction, RequestHandler> {
  const refuse: RequestHandler = (_req, _res, next) => {
    next(new ConflictError(reason));
  };
  return {
    'accounts.list': (_req, res) => {
      res.json({ accounts: recordAccountAnswers(directory.keyRecords()) });
    },
    'accounts.create': refuse,
    'accounts.set_ip_whitelist': refuse,
    'accounts.set_limits': refuse,
    'keys.create': refuse,
    'keys.update': refuse,
    'keys.roll': refuse,
    'keys.revoke': refuse,
  };
}
