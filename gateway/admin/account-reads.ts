import type { RequestHandler } from 'express';
import { type KeyDirectory, type KeyRecord, type Logger } from '../../lib';
import { NotFoundError } from '../../lib/internal';
import { type ScopeUsage } from '../../lib/entry/core';
import type { MinuteCounts } from '../decision-history';
import { asAdminError, type KeyManager } from './database-store';
import { pathId } from './validation';
import { decisionsAnswer, usageAnswer } from './views';

/** An account's use of its per-account scopes, given its limit overrides. */
export type AccountUsage = (
  accountId: string,
  limits?: Readonly<Record<string, number>>,
) => Promise<ScopeUsage[]>;

/** An account's decisions of the last 15 minutes on this instance, a minute at a time. */
export type AccountDecisions = (
  accountId: string,
) => readonly MinuteCounts[] | Promise<readonly MinuteCounts[]>;

/** Where an account is looked up: its keys in force, then (database store) its row. */
export interface AccountSources {
  readonly directory: Required<KeyDirectory>;
  readonly manager: KeyManager | undefined;
  /** Where a database out of reach is logged. */
  readonly logger: Logger;
}

/**
 * `GET /admin/v1/accounts/:id/usage`: every per-account scope of the account in the
 * last window (rolling), spending nothing. The account's limit overrides come from its keys in force; an
 * account without keys is found in the database with its overrides, and an unknown one answers 404.
 */
export function usageHandler(sources: AccountSources, usage: AccountUsage): RequestHandler {
  return function accountUsage(req, res, next) {
    const id = pathId(req.params);
    knownAccount(sources, id)
      .then(async (account) => {
        res.json(usageAnswer(id, await usage(id, account.limits)));
      })
      .catch((error: unknown) => {
        next(asAdminError(error, sources.logger));
      });
  };
}

/**
 * `GET /admin/v1/accounts/:id/decisions`: the account's decisions of the last 15 minutes on this
 * instance, oldest minute first: `{"account_id","minutes":[{"start","allowed","limited","refused":
 * {code: count}}]}`. An unknown account answers 404.
 */
export function decisionsHandler(
  sources: AccountSources,
  decisions: AccountDecisions,
): RequestHandler {
  return function accountDecisions(req, res, next) {
    const id = pathId(req.params);
    knownAccount(sources, id)
      .then(async () => decisions(id))
      .then(
        (minutes) => {
          res.json(decisionsAnswer(id, minutes));
        },
        (error: unknown) => {
          next(asAdminError(error, sources.logger));
        },
      );
  };
}

/**
 * The account's limit overrides, from one of its keys in force; an account without keys is looked
 * up by id in the database. Neither lists other accounts. An unknown account rejects with
 * `NotFoundError`.
 */
async function knownAccount(
  { directory, manager }: AccountSources,
  id: string,
): Promise<{ limits: KeyRecord['limits'] }> {
  for (const record of directory.recordsOfAccount(id)) return { limits: record.limits };
  const stored = await manager?.findAccount(id);
  if (stored === undefined) throw new NotFoundError();
  return { limits: stored.limits ?? undefined };
}
