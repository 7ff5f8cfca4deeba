/**
 * The admin API as the page calls it: same origin, the session cookie sent by
 * the browser, and on every change the session's CSRF token. Errors arrive as the JSON error body
 * (`{"status", "code", "message", "request_id"}`) and are thrown as `ApiError`.
 */

export interface Session {
  readonly csrf_token: string;
  readonly expires_at: string;
  /** `null` when the admin listener takes changes; otherwise why it does not (a keys file). */
  readonly read_only: string | null;
}

export interface KeyView {
  readonly id: string;
  readonly role: string;
  readonly publishable_key: string;
  readonly created_at: string | null;
  readonly expires_at: string | null;
  readonly revoked_at: string | null;
  readonly last_used_at: string | null;
  readonly revoked: boolean;
  readonly permissions: readonly string[] | null;
}

export interface AccountView {
  readonly id: string;
  readonly ip_whitelist: readonly string[] | null;
  readonly limits: Readonly<Record<string, number>> | null;
  readonly keys: readonly KeyView[];
}

/** A key just created or rolled (database key store only): the one answer with its secret. */
export interface NewKey extends KeyView {
  readonly account_id: string;
  readonly secret_key: string;
}

export interface ScopeUsage {
  readonly scope: string;
  readonly limit: number;
  readonly remaining: number;
  readonly reset_seconds: number;
}

export interface Minute {
  readonly start: string;
  readonly allowed: number;
  readonly limited: number;
  readonly refused: Readonly<Record<string, number>>;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export class Api {
  private csrf = '';

  /** The session the cookie holds, or `undefined` when there is none (sign in). */
  async session(): Promise<Session | undefined> {
    try {
      const session = await this.call<Session>('GET', '/dashboard/session');
      this.csrf = session.csrf_token;
      return session;
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return undefined;
      throw error;
    }
  }

  /** Opens a session for the admin token (the only time the page holds it). */
  async signIn(token: string): Promise<Session> {
    const session = await this.call<Session>('POST', '/dashboard/session', { token });
    this.csrf = session.csrf_token;
    return session;
  }

  async signOut(): Promise<void> {
    await this.call('POST', '/dashboard/session/end');
  }

  async accounts(): Promise<AccountView[]> {
    return (await this.call<{ accounts: AccountView[] }>('GET', '/admin/v1/accounts')).accounts;
  }

  createAccount(id: string): Promise<AccountView> {
    return this.call('POST', '/admin/v1/accounts', { id });
  }

  usage(account: string): Promise<{ scopes: ScopeUsage[] }> {
    return this.call('GET', `/admin/v1/accounts/${encodeURIComponent(account)}/usage`);
  }

  decisions(account: string): Promise<{ minutes: Minute[] }> {
    return this.call('GET', `/admin/v1/accounts/${encodeURIComponent(account)}/decisions`);
  }

  setWhitelist(account: string, entries: readonly string[] | null): Promise<AccountView> {
    return this.call('PUT', `/admin/v1/accounts/${encodeURIComponent(account)}/ip-whitelist`, {
      entries,
    });
  }

  setLimits(account: string, limits: Record<string, number> | null): Promise<AccountView> {
    return this.call('PUT', `/admin/v1/accounts/${encodeURIComponent(account)}/limits`, {
      limits,
    });
  }

  createKey(account: string, role: string): Promise<NewKey> {
    return this.call('POST', `/admin/v1/accounts/${encodeURIComponent(account)}/keys`, { role });
  }

  setRole(key: string, role: string): Promise<KeyView> {
    return this.call('PATCH', `/admin/v1/keys/${encodeURIComponent(key)}`, { role });
  }

  roll(key: string, graceSeconds: number): Promise<NewKey> {
    return this.call('POST', `/admin/v1/keys/${encodeURIComponent(key)}/roll`, {
      grace_seconds: graceSeconds,
    });
  }

  revoke(key: string): Promise<KeyView> {
    return this.call('POST', `/admin/v1/keys/${encodeURIComponent(key)}/revoke`);
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { Accept: 'application/json' };
    if (method !== 'GET') headers['X-CSRF-Token'] = this.csrf;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response: Response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? null : JSON.stringify(body),
        credentials: 'same-origin',
        cache: 'no-store',
      });
    } catch {
      throw new ApiError(0, 'network', 'The gateway did not answer. Is it running?');
    }
    if (response.status === 204) return undefined as T;
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (!response.ok) {
      const error = parsed as { code?: unknown; message?: unknown } | undefined;
      throw new ApiError(
        response.status,
        typeof error?.code === 'string' ? error.code : 'unknown',
        typeof error?.message === 'string' ? error.message : `HTTP ${response.status}`,
      );
    }
    return parsed as T;
  }
}
