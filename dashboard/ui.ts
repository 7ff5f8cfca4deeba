import type { ListedAccountAnswer, NewKeyAnswer } from '../gateway/admin/answers';
import { type Api, ApiError } from './api';

/**
 * What the page's sections (keys, whitelist, limits) get from the page (main.ts): the admin API,
 * whether changes are taken, and one way to make a change, so that every change is guarded,
 * reported and followed by a redraw the same way.
 */

/** The four roles, lowest first. */
export { ROLES } from '../lib/model/roles';

/** A secret to show once: the key just created or rolled, and what happened. */
export interface ShownSecret {
  readonly accountId: string;
  readonly key: NewKeyAnswer;
  readonly title: string;
}

/** What a change did: said in the status line; a new key's secret, shown once. */
export interface Outcome {
  readonly message: string;
  readonly secret?: ShownSecret | undefined;
}

export interface Change {
  /** The request; resolves once the server took the change. */
  readonly run: () => Promise<Outcome>;
  /** Where a refusal is shown, beside the control. */
  readonly errorBox: HTMLElement;
  /** Disabled while the request runs: a second click makes no second key. */
  readonly control: HTMLButtonElement;
  /** Shows a refusal its own way (the whitelist's, beside the entry); `true` when it did. */
  readonly onError?: ((error: ApiError) => boolean) | undefined;
}

export interface Ui {
  readonly api: Api;
  /** `false` with a keys file: no control that changes anything is drawn. */
  readonly writable: boolean;
  /** Makes `change`; on success redraws the page from the server's state. */
  change(change: Change): void;
  announce(message: string): void;
  /** The secret to show in this account's keys section, if one was just made. */
  secretFor(account: ListedAccountAnswer): ShownSecret | undefined;
}

/** The message of a refusal as the page shows it. */
export function errorText(error: unknown): string {
  if (error instanceof ApiError) return `${error.message} (${error.code})`;
  return error instanceof Error ? error.message : String(error);
}
