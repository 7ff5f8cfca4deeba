/**
 * Rolling a key with a grace: the rule every store applies, written once. A roll makes a new key
 * pair and gives the old key a deadline at the end of the grace. It is refused for a key that is
 * revoked, that has expired, or that already stops working by the end of the grace: such a key was
 * rolled already (or is about to expire anyway), and rolling it again would hand out a second
 * replacement while giving the old key no grace at all. So of two rolls of one key at once, the
 * second finds the first's deadline and is refused.
 */

/** The longest grace a roll may give, in seconds: a week. */
export const MAX_GRACE_SECONDS = 604_800;

/** What a roll needs to know of the key it rolls. */
export interface RolledKeyState {
  readonly revoked: boolean;
  /** Its deadline, in ms since the epoch; `undefined`: none. */
  readonly expiresAt: number | undefined;
}

export type RollPlan =
  | { readonly kind: 'roll'; readonly deadline: number }
  | { readonly kind: 'revoked' }
  | { readonly kind: 'expired'; readonly expiresAt: number }
  | { readonly kind: 'rolled'; readonly expiresAt: number };

/** Whether `graceSeconds` is a grace a roll may give: a whole number from 0 to a week. */
export function isGraceSeconds(graceSeconds: number): boolean {
  return Number.isInteger(graceSeconds) && graceSeconds >= 0 && graceSeconds <= MAX_GRACE_SECONDS;
}

/** The old key's new deadline at `now` (ms), or why the roll is refused. */
export function planRoll(key: RolledKeyState, graceSeconds: number, now: number): RollPlan {
  if (key.revoked) return { kind: 'revoked' };
  const { expiresAt } = key;
  if (expiresAt !== undefined && expiresAt <= now) return { kind: 'expired', expiresAt };
  const deadline = now + graceSeconds * 1000;
  if (expiresAt !== undefined && expiresAt <= deadline) return { kind: 'rolled', expiresAt };
  return { kind: 'roll', deadline };
}
