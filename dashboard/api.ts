/**
 * The admin API as the page calls it: same origin, the session cookie sent by the browser, and
 * on every change the session's CSRF token. Errors arrive as the JSON error body
 * (`{"status", "code", "message", "request_id"}`) and are thrown as `ApiError`. The answers' shapes
 * are the admin routes' own (gateway/admin/answers.ts).
 */

import type {
  AccountAnswer,
  AccountsAnswer,
  DecisionsAnswer,
  ListedAccountAnswer,
  NewKeyAnswer,
  SessionAnswer,
  UsageAnswer,
  WrittenKeyAnswer,
} from '../gateway/admin/answers';

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
  async session(): Promise<SessionAnswer | undefined> {
    try {
      const session = await this.call<SessionAnswer>('GET', '/dashboard/session');
      this.csrf = session.csrf_token;
      return session;
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return undefined;
      throw error;
    }
  }

  /** Opens a session for the admin token (the only time the page holds it). */
  async signIn(token: string): Promise<SessionAnswer> {
    const session = await this.call<SessionAnswer>('POST', '/dashboard/session', { token });
    this.csrf = session.csrf_token;
    return session;
  }

  async signOut(): Promise<void> {
    await this.call('POST', '/dashboard/session/end');
  }

  async accounts(): Promise<readonly ListedAccountAnswer[]> {
    return (await this.call<AccountsAnswer>('GET', '/admin/v1/accounts')).accounts;
  }

  createAccount(id: string): Promise<AccountAnswer> {
    return this.call('POST', '/admin/v1/accounts', { id });
  }

  usage(account: string): Promise<UsageAnswer> {
    return this.call('GET', `/admin/v1/accounts/${encodeURIComponent(account)}/usage`);
  }

  decisions(account: string): Promise<DecisionsAnswer> {
    return this.call('GET', `/admin/v1/accounts/${encodeURIComponent(account)}/decisions`);
  }

  setWhitelist(account: string, entries: readonly string[] | null): Promise<AccountAnswer> {
    return this.call('PUT', `/admin/v1/accounts/${encodeURIComponent(account)}/ip-whitelist`, {
      entries,
    });
  }

  setLimits(account: string, limits: Record<string, number> | null): Promise<AccountAnswer> {
    return this.call('PUT', `/admin/v1/accounts/${encodeURIComponent(account)}/limits`, {
      limits,
    });
  }

  createKey(account: string, role: string): Promise<NewKeyAnswer> {
    return this.call('POST', `/admin/v1/accounts/${encodeURIComponent(account)}/keys`, { role });
  }

  setRole(key: string, role: string): Promise<WrittenKeyAnswer> {
    return this.call('PATCH', `/admin/v1/keys/${encodeURIComponent(key)}`, { role });
  }

  roll(key: string, graceSeconds: number): Promise<NewKeyAnswer> {
    return this.call('POST', `/admin/v1/keys/${encodeURIComponent(key)}/roll`, {
      grace_seconds: graceSeconds,
    });
  }

  revoke(key: string): Promise<WrittenKeyAnswer> {
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
