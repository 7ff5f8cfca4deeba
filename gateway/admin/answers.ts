/**
 * The admin API's answers as they travel (snake_case, times as RFC 3339 strings): the admin routes
 * build them and the dashboard reads them, both from this file. Types only and no imports, so the
 * dashboard's browser build can take it as it is.
 */

/** A key as the admin API shows it: never its secret nor the secret's digest. */
export interface KeyAnswer {
  readonly id: string;
  readonly role: string;
  readonly publishable_key: string;
  /** `null` with a keys file, which does not record it. */
  readonly created_at: string | null;
  readonly expires_at: string | null;
  /** `null` with a keys file, which does not record it. */
  readonly revoked_at: string | null;
  /** `null` with a keys file, which does not record it. */
  readonly last_used_at: string | null;
  readonly revoked: boolean;
  /** What a restricted key may do; `null`: all its role allows. */
  readonly permissions: readonly string[] | null;
}

/** A key as a write answers it (database key store only): with its account. */
export interface WrittenKeyAnswer extends KeyAnswer {
  readonly account_id: string;
}

/** A key just created or rolled (database key store only): the one answer with its secret. */
export interface NewKeyAnswer extends WrittenKeyAnswer {
  readonly secret_key: string;
}

/** `POST /admin/v1/keys/:id/roll`: the new key pair and the old key, now ending with the grace. */
export interface RolledKeyAnswer extends NewKeyAnswer {
  readonly previous: WrittenKeyAnswer;
}

/** An account as a write answers it. */
export interface AccountAnswer {
  readonly id: string;
  readonly ip_whitelist: readonly string[] | null;
  /** The account's own limits per scope; `null`: every scope at its default. */
  readonly limits: Readonly<Record<string, number>> | null;
}

/** An account as `GET /admin/v1/accounts` lists it, with its keys. */
export interface ListedAccountAnswer extends AccountAnswer {
  readonly keys: readonly KeyAnswer[];
}

export interface AccountsAnswer {
  readonly accounts: readonly ListedAccountAnswer[];
}

/** One per-account scope over the last window. */
export interface ScopeUsageAnswer {
  readonly scope: string;
  readonly limit: number;
  readonly remaining: number;
  readonly reset_seconds: number;
}

export interface UsageAnswer {
  readonly account_id: string;
  readonly scopes: readonly ScopeUsageAnswer[];
}

/** One minute of an account's decisions on this instance. */
export interface MinuteAnswer {
  /** The minute's start. */
  readonly start: string;
  readonly allowed: number;
  readonly limited: number;
  /** Refusals other than limits, by error code. */
  readonly refused: Readonly<Record<string, number>>;
}

export interface DecisionsAnswer {
  readonly account_id: string;
  readonly minutes: readonly MinuteAnswer[];
}

/** The dashboard's session, as `/dashboard/session` answers it. */
export interface SessionAnswer {
  readonly csrf_token: string;
  readonly expires_at: string;
  /** `null` when the admin listener takes changes; otherwise why it does not (a keys file). */
  readonly read_only: string | null;
}
