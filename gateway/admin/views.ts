import type { KeyRecord } from '../../lib';
import type { ScopeUsage } from '../../lib/entry/core';
import type {
  AccountView as StoredAccount,
  KeyView as StoredKey,
  NewKey as NewStoredKey,
  AccountWithKeys,
} from '../../lib/entry/postgres';
import type { MinuteCounts } from '../decision-history';
import type {
  AccountAnswer,
  DecisionsAnswer,
  KeyAnswer,
  ListedAccountAnswer,
  NewKeyAnswer,
  UsageAnswer,
  WrittenKeyAnswer,
} from './answers';

/** The admin API's answers made from what the key stores and this instance hold. */

export function accountAnswer(account: StoredAccount): AccountAnswer {
  return {
    id: account.id,
    ip_whitelist: account.ipWhitelist === null ? null : [...account.ipWhitelist],
    limits: account.limits === null ? null : { ...account.limits },
  };
}

/** An account of the database and its keys, as listed. */
export function listedAccountAnswer(account: AccountWithKeys): ListedAccountAnswer {
  return { ...accountAnswer(account), keys: account.keys.map(keyAnswer) };
}

export function keyAnswer(key: StoredKey): WrittenKeyAnswer {
  return {
    id: key.id,
    account_id: key.accountId,
    role: key.role,
    publishable_key: key.publishableKey,
    created_at: key.createdAt?.toISOString() ?? null,
    expires_at: key.expiresAt?.toISOString() ?? null,
    revoked_at: key.revokedAt?.toISOString() ?? null,
    last_used_at: key.lastUsedAt?.toISOString() ?? null,
    revoked: key.revoked,
    permissions: key.permissions === null ? null : [...key.permissions],
  };
}

/** A key just made: the only answer that ever holds its secret. */
export function newKeyAnswer(key: NewStoredKey): NewKeyAnswer {
  return { ...keyAnswer(key), secret_key: key.secretKey };
}

/**
 * Accounts and their keys from a keys file's records as `GET /admin/v1/accounts` answers them,
 * never a secret or its digest, plus `revoked`. A keys file records neither when a key was created or revoked nor when it was last
 * used: those are `null` there; `revoked` and `expires_at` say what the file says.
 */
export function recordAccountAnswers(records: Iterable<KeyRecord>): ListedAccountAnswer[] {
  const accounts = new Map<string, AccountAnswer & { keys: KeyAnswer[] }>();
  for (const record of records) {
    let account = accounts.get(record.accountId);
    if (account === undefined) {
      account = {
        id: record.accountId,
        ip_whitelist: record.ipWhitelist === undefined ? null : [...record.ipWhitelist.entries()],
        limits: record.limits === undefined ? null : { ...record.limits },
        keys: [],
      };
      accounts.set(record.accountId, account);
    }
    account.keys.push({
      id: record.id,
      role: record.role,
      publishable_key: record.publishableKey,
      created_at: null,
      expires_at: record.expiresAt === undefined ? null : new Date(record.expiresAt).toISOString(),
      revoked_at: null,
      last_used_at: null,
      revoked: record.revoked,
      permissions: record.permissions === undefined ? null : [...record.permissions],
    });
  }
  return [...accounts.values()];
}

export function usageAnswer(accountId: string, scopes: readonly ScopeUsage[]): UsageAnswer {
  return {
    account_id: accountId,
    scopes: scopes.map((scope) => ({
      scope: scope.scope,
      limit: scope.limit,
      remaining: scope.remaining,
      reset_seconds: scope.resetSeconds,
    })),
  };
}

export function decisionsAnswer(
  accountId: string,
  minutes: readonly MinuteCounts[],
): DecisionsAnswer {
  return {
    account_id: accountId,
    minutes: minutes.map((minute) => ({
      start: new Date(minute.start).toISOString(),
      allowed: minute.allowed,
      limited: minute.limited,
      refused: minute.refused,
    })),
  };
}
