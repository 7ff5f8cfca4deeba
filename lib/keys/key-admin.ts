import type {
  AccountView,
  CreateKeyOptions,
  KeyChanges,
  KeysDocument,
  KeyView,
  NewKey,
  RollOptions,
  RollResult,
} from './pg-key-views';

/**
 * Key administration as a library: what a store that takes changes does, with typed inputs. Every
 * input is still checked at run time with the rules of key-rules.ts (a caller in plain JavaScript
 * is not held by the types), and a fault is the library's own error naming the parameter as this
 * interface spells it (`expiresAt: …`, `graceSeconds: …`): an `InvalidRequestError` for a bad
 * value, a `NotFoundError`-like 404 for an unknown account or key, a `ConflictError` for a
 * duplicate or a roll refused (key-roll.ts). A caller that takes input in other words (the admin
 * API's JSON fields, the key command's options) checks and names it there first.
 */
export interface KeyAdmin {
  /** A new account; `ipWhitelist` `null` or absent: not restricted; `limits` the same: defaults. */
  createAccount(
    id: string,
    ipWhitelist?: readonly string[] | null,
    limits?: Readonly<Record<string, number>> | null,
  ): Promise<AccountView>;
  /** An account's limit overrides; `null` puts every scope back at its default. */
  setLimits(
    accountId: string,
    limits: Readonly<Record<string, number>> | null,
  ): Promise<AccountView>;
  /** An account's whitelist; `null` lifts the restriction. */
  setIpWhitelist(accountId: string, entries: readonly string[] | null): Promise<AccountView>;
  /** A new key pair for the account: the only time its secret is known. */
  createKey(accountId: string, options?: CreateKeyOptions): Promise<NewKey>;
  /** A key's role, its permissions (`null` lifts them), or both, in one write. */
  updateKey(keyId: string, changes: KeyChanges): Promise<KeyView>;
  /** A new pair for the key, the old one stopping at the end of the grace (key-roll.ts). */
  roll(keyId: string, graceSeconds: number, options?: RollOptions): Promise<RollResult>;
  revoke(keyId: string): Promise<KeyView>;
  /**
   * A keys document written in, all or nothing. It is read from a file or a request, so it is
   * taken as it comes and checked whole, as the keys file's loader checks it.
   */
  import(document: unknown): Promise<{ accounts: number; keys: number }>;
  /** Every key as a keys document (digests only). */
  export(): Promise<KeysDocument>;
}
