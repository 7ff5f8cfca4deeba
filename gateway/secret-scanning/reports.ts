import { createHash } from 'node:crypto';
import type { KeyRecord } from '../../lib';
import { keyPrefixType, keyShape } from '../../lib/entry/core';
import { isExpired } from '../../lib/internal';

/**
 * What a secret-scanning report is, and what each reported token means to the keys in force.
 * The programme posts a JSON array of `{token, type, url, source}`; it is answered with one
 * `{token_hash, token_type, label}` per token (`token_hash` the lowercase hex SHA-256 of the token,
 * so that the answer never carries a secret back), `label` being `true_positive` when the token is a
 * key that works here, `false_positive` otherwise (unknown, revoked, expired, or not a key).
 */

export interface ReportedToken {
  readonly token: string;
  readonly type: string;
  /** Where the token was found (a commit's file, a gist, a package): in the audit line. */
  readonly url: string | undefined;
  /** What kind of place it was found in (`content`, `commit`, `npm`, …). */
  readonly source: string | undefined;
}

export type Label = 'true_positive' | 'false_positive';

export interface TokenAnswer {
  readonly token_hash: string;
  readonly token_type: string;
  readonly label: Label;
}

/** What the gateway does about one reported token. */
export type Finding =
  /** Not a key in force here: nothing to do, and nothing said about why. */
  | { readonly kind: 'unknown' }
  /** A publishable key in force: made public by design, never revoked. */
  | { readonly kind: 'publishable'; readonly key: KeyRecord }
  /** A secret key already revoked or expired: nothing left to do. */
  | { readonly kind: 'dead'; readonly key: KeyRecord }
  /** A secret key already set to expire within the grace period (rolled earlier): left as it is. */
  | { readonly kind: 'expiring'; readonly key: KeyRecord }
  /** A secret key in force: it is revoked (or rolled). */
  | { readonly kind: 'live'; readonly key: KeyRecord };

/**
 * Where reported tokens are looked up. A report is about a key, not a use of it: these lookups
 * never count as one, or a key no client ever used would show a last use at the time of the report
 * that revoked it, after its revocation.
 */
export interface ReportLookups {
  findBySecretKey(secretKey: string): KeyRecord | undefined;
  findByPublishableKey(publishableKey: string): KeyRecord | undefined;
}

/** Reports hold a few tokens each; more in one request is not a report. */
export const MAX_TOKENS_PER_REPORT = 1000;
const MAX_FIELD_LENGTH = 2048;

/** The report's tokens, or a description of what is wrong with it. */
export function parseReport(body: Buffer): ReportedToken[] | string {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return 'the body is not JSON';
  }
  if (!Array.isArray(value)) return 'the body must be a JSON array of reported tokens';
  if (value.length > MAX_TOKENS_PER_REPORT) {
    return `a report holds at most ${String(MAX_TOKENS_PER_REPORT)} tokens`;
  }
  const tokens: ReportedToken[] = [];
  for (const [index, entry] of (value as unknown[]).entries()) {
    const fields = (typeof entry === 'object' && entry !== null ? entry : {}) as Record<
      string,
      unknown
    >;
    const { token, type, url, source } = fields;
    if (typeof token !== 'string' || token.length === 0 || token.length > MAX_FIELD_LENGTH) {
      return `[${String(index)}].token must be a non-empty string`;
    }
    if (typeof type !== 'string' || type.length > MAX_FIELD_LENGTH) {
      return `[${String(index)}].type must be a string`;
    }
    tokens.push({ token, type, url: shortString(url), source: shortString(source) });
  }
  return tokens;
}

/**
 * What `token` is among the keys in force at `now`. Only a token of the shape `generateKey()`
 * makes, with a right checksum, is looked up; its prefix says which kind of key to look for, so
 * a secret key is never taken for a publishable one or the other way round.
 */
export function findingOf(
  keyStore: ReportLookups,
  token: string,
  now: number,
  graceSeconds: number | undefined,
): Finding {
  if (keyShape(token) !== 'typed') return { kind: 'unknown' };
  if (keyPrefixType(token) === 'publishable') {
    const key = keyStore.findByPublishableKey(token);
    return key === undefined || key.revoked || isExpired(key, now)
      ? { kind: 'unknown' }
      : { kind: 'publishable', key };
  }
  const key = keyStore.findBySecretKey(token);
  if (key === undefined) return { kind: 'unknown' };
  if (key.revoked || isExpired(key, now)) return { kind: 'dead', key };
  if (
    graceSeconds !== undefined &&
    key.expiresAt !== undefined &&
    key.expiresAt <= now + graceSeconds * 1000
  ) {
    return { kind: 'expiring', key };
  }
  return { kind: 'live', key };
}

/** A key that works here is a true positive: a publishable one too (it is public by design). */
export function labelOf(finding: Finding): Label {
  return finding.kind === 'unknown' || finding.kind === 'dead' ? 'false_positive' : 'true_positive';
}

/** How the answer names a token: its lowercase hex SHA-256, never the token itself. */
export function tokenHash(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

function shortString(value: unknown): string | undefined {
  return typeof value === 'string' ? value.slice(0, MAX_FIELD_LENGTH) : undefined;
}
