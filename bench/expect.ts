import type { WrkResult } from './wrk';

/**
 * What a case is meant to be answered with. The benchmark measures refusals too (wrong
 * credentials, a spent failure budget), so "clean" is per case: a case is clean when every answer
 * has an expected status and no socket error happened.
 */
export interface Expectation {
  /** Shown in the table's `expected` column. */
  readonly label: string;
  readonly accepts: (status: number) => boolean;
  /**
   * Statuses always listed in the `answers` column, even at 0. A non-empty list means the case
   * needs per-status counts (`countStatuses` in its wrk script): wrk's own error count only tells
   * statuses above 399 apart from the rest.
   */
  readonly listed: readonly number[];
}

export const SUCCESS: Expectation = {
  label: '2xx',
  accepts: (status) => status >= 200 && status < 300,
  listed: [],
};

/** Wrong credentials while the IP's failure budget lasts; 429 once it is spent. */
export const WRONG_CREDENTIAL: Expectation = {
  label: '401 (429 once the budget is spent)',
  accepts: (status) => status === 401 || status === 429,
  listed: [401, 429],
};

/** The IP's failure budget is spent: every authentication attempt is refused before comparing. */
export const BUDGET_SPENT: Expectation = {
  label: '429',
  accepts: (status) => status === 429,
  listed: [429],
};

/** Answers whose status the case did not expect. */
export function unexpectedAnswers(result: WrkResult, expected: Expectation): number {
  const { statuses } = result;
  if (statuses === undefined) {
    if (expected.listed.length > 0) {
      throw new Error(`a case expecting ${expected.label} needs a script that counts statuses`);
    }
    // wrk counts statuses above 399; the gateway and the stubs never answer 1xx or 3xx here.
    return result.errorStatuses;
  }
  return Object.entries(statuses).reduce(
    (sum, [status, count]) => (expected.accepts(Number(status)) ? sum : sum + count),
    0,
  );
}

/** `401: 61,234; 429: 0`, or `-` when the script did not count statuses. */
export function describeAnswers(result: WrkResult, expected: Expectation): string {
  const { statuses } = result;
  if (statuses === undefined) return '-';
  const counts = new Map<number, number>(expected.listed.map((status) => [status, 0]));
  for (const [status, count] of Object.entries(statuses)) counts.set(Number(status), count);
  return [...counts.entries()]
    .sort(([a], [b]) => a - b)
    .map(([status, count]) => `${status}: ${count.toLocaleString('en-US')}`)
    .join('; ');
}

/** How many answers had `status` (0 when statuses were not counted). */
export function answersWith(result: WrkResult, status: number): number {
  return result.statuses?.[status] ?? 0;
}
