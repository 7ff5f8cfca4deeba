import { DecisionHistory, HISTORY_MINUTES } from '../../../gateway/decision-history';
import type { AuthContext, DecisionEvent } from '../../../lib';
import type { RequestFacts } from '../../../lib/entry/core';
import {
  AuthenticationError,
  InsufficientRoleError,
  IpNotWhitelistedError,
  RateLimitedError,
  type TollgateError,
} from '../../../lib/errors';

/**
 * The dashboard's per-account decision history: 15 one-minute cells per account, allowed, limited
 * and refused by code, on a clock the test moves; bounded in accounts.
 */

const MINUTE = 60_000;
/** A minute boundary, so that `+ n * MINUTE` lands in the n-th next minute. */
const T0 = Date.UTC(2026, 10, 25, 12, 0, 0);

function allowed(accountId: string): DecisionEvent {
  return {
    policy: 'wallets',
    facts: {} as RequestFacts,
    decision: { allowed: true, auth: { accountId } as AuthContext, headers: [] },
  };
}

function refused(accountId: string | undefined, error: TollgateError): DecisionEvent {
  return {
    policy: 'wallets',
    facts: {} as RequestFacts,
    decision: {
      allowed: false,
      error,
      auth: accountId === undefined ? undefined : ({ accountId } as AuthContext),
      headers: [],
    },
  };
}

describe('DecisionHistory', () => {
  let clock: number;
  const now = (): number => clock;

  beforeEach(() => {
    clock = T0 + 5_000;
  });

  it('counts an account’s minute: allowed, limited, and refused by code', () => {
    const history = new DecisionHistory(10, now);
    history.record(allowed('acct_a'));
    history.record(allowed('acct_a'));
    history.record(refused('acct_a', new RateLimitedError(3)));
    history.record(refused('acct_a', new InsufficientRoleError('level-3')));
    history.record(refused('acct_a', new IpNotWhitelistedError()));
    history.record(refused('acct_a', new IpNotWhitelistedError()));
    history.record(allowed('acct_b'));

    const minutes = history.minutes('acct_a');
    expect(minutes).toHaveLength(HISTORY_MINUTES);
    expect(minutes[HISTORY_MINUTES - 1]).toEqual({
      start: T0,
      allowed: 2,
      limited: 1,
      refused: { insufficient_role: 1, ip_not_whitelisted: 2 },
    });
    expect(minutes.slice(0, -1).every((minute) => minute.allowed === 0)).toBe(true);
    expect(history.minutes('acct_b')[HISTORY_MINUTES - 1]?.allowed).toBe(1);
  });

  it('gives 15 minutes oldest first, each a minute apart, zero where nothing happened', () => {
    const history = new DecisionHistory(10, now);
    history.record(allowed('acct_a'));
    clock += 3 * MINUTE;
    history.record(allowed('acct_a'));
    history.record(allowed('acct_a'));

    const minutes = history.minutes('acct_a');
    expect(minutes.map((minute) => minute.start)).toEqual(
      Array.from({ length: HISTORY_MINUTES }, (_, i) => T0 + (i - HISTORY_MINUTES + 4) * MINUTE),
    );
    expect(minutes.map((minute) => minute.allowed).slice(-4)).toEqual([1, 0, 0, 2]);
  });

  it('forgets a minute once it is more than 15 minutes old, though its cell is reused', () => {
    const history = new DecisionHistory(10, now);
    history.record(refused('acct_a', new IpNotWhitelistedError()));
    clock += HISTORY_MINUTES * MINUTE; // the same cell, 15 minutes on
    const empty = { allowed: 0, limited: 0, refused: {} };
    expect(history.minutes('acct_a').at(-1)).toEqual({
      start: T0 + HISTORY_MINUTES * MINUTE,
      ...empty,
    });
    expect(history.minutes('acct_a').map(({ start: _, ...counts }) => counts)).toEqual(
      Array(HISTORY_MINUTES).fill(empty),
    );
    history.record(allowed('acct_a'));
    const last = history.minutes('acct_a')[HISTORY_MINUTES - 1];
    expect(last).toEqual({
      start: T0 + HISTORY_MINUTES * MINUTE,
      allowed: 1,
      limited: 0,
      refused: {},
    });
  });

  it('counts nothing for a credential that names no account, and answers zeros for an unknown one', () => {
    // One account at most: were the refusal kept under some account, acct_a's count would go.
    const history = new DecisionHistory(1, now);
    history.record(allowed('acct_a'));
    history.record(refused(undefined, new AuthenticationError('invalid_api_key')));
    expect(history.minutes('acct_a')[HISTORY_MINUTES - 1]?.allowed).toBe(1);
    const minutes = history.minutes('acct_unknown');
    expect(minutes).toHaveLength(HISTORY_MINUTES);
    expect(
      minutes.every((m) => m.allowed + m.limited === 0 && Object.keys(m.refused).length === 0),
    ).toBe(true);
  });

  it('keeps at most maxAccounts accounts, letting the one seen longest ago go', () => {
    const history = new DecisionHistory(2, now);
    history.record(allowed('acct_a'));
    history.record(allowed('acct_b'));
    clock += MINUTE;
    history.record(allowed('acct_a')); // a new minute for acct_a: it is now the most recent
    history.record(allowed('acct_c')); // acct_b goes
    const total = (id: string): number =>
      history.minutes(id).reduce((sum, minute) => sum + minute.allowed, 0);
    expect([total('acct_a'), total('acct_b'), total('acct_c')]).toEqual([2, 0, 1]);
  });
});
