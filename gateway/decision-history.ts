import type { DecisionEvent } from '../lib';

/**
 * The last 15 minutes of each account's decisions, a minute at a time, for the dashboard's chart
 * allowed, limited, and refused by error code. Only decisions whose credential was
 * identified count: a request with an unknown key belongs to no account.
 *
 * Bounded whatever the traffic: at most `maxAccounts` accounts (the ones seen longest ago give way)
 * and, per account, 15 minutes of cells whose codes come from the closed set of error codes. The
 * request path pays for one map lookup and a few increments.
 */

export const HISTORY_MINUTES = 15;
const MINUTE_MS = 60_000;

export interface MinuteCounts {
  /** The minute's start, ms since the epoch. */
  readonly start: number;
  readonly allowed: number;
  readonly limited: number;
  /** Refusals by error code (never `rate_limited`, which is `limited`). */
  readonly refused: Readonly<Record<string, number>>;
}

interface Cell {
  minute: number;
  allowed: number;
  limited: number;
  refused: Map<string, number>;
}

export class DecisionHistory {
  /** Per account, its cells by minute modulo `HISTORY_MINUTES`; in order of the last decision. */
  private readonly accounts = new Map<string, Cell[]>();

  constructor(
    private readonly maxAccounts = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** The gate's observer. */
  record(event: DecisionEvent): void {
    const { decision } = event;
    const accountId = decision.auth?.accountId;
    if (accountId === undefined) return;
    const cell = this.cellOf(accountId);
    if (decision.allowed) cell.allowed += 1;
    else if (decision.error.code === 'rate_limited') cell.limited += 1;
    else {
      const code = decision.error.code;
      cell.refused.set(code, (cell.refused.get(code) ?? 0) + 1);
    }
  }

  /** The account's last `HISTORY_MINUTES` minutes, oldest first, the current one last. */
  minutes(accountId: string): MinuteCounts[] {
    const cells = this.accounts.get(accountId);
    const current = Math.floor(this.now() / MINUTE_MS);
    const minutes: MinuteCounts[] = [];
    for (let minute = current - HISTORY_MINUTES + 1; minute <= current; minute++) {
      const cell = cells?.[minute % HISTORY_MINUTES];
      const live = cell?.minute === minute;
      minutes.push({
        start: minute * MINUTE_MS,
        allowed: live ? cell.allowed : 0,
        limited: live ? cell.limited : 0,
        refused: live ? Object.fromEntries(cell.refused) : {},
      });
    }
    return minutes;
  }

  private cellOf(accountId: string): Cell {
    const minute = Math.floor(this.now() / MINUTE_MS);
    let cells = this.accounts.get(accountId);
    if (cells === undefined) {
      if (this.accounts.size >= this.maxAccounts) {
        const oldest = this.accounts.keys().next().value;
        if (oldest !== undefined) this.accounts.delete(oldest);
      }
      cells = [];
      this.accounts.set(accountId, cells);
    } else if (cells[minute % HISTORY_MINUTES]?.minute !== minute) {
      // A new minute for this account: it moves to the end of the eviction order.
      this.accounts.delete(accountId);
      this.accounts.set(accountId, cells);
    }
    const slot = minute % HISTORY_MINUTES;
    let cell = cells[slot];
    if (cell?.minute !== minute) {
      cell = { minute, allowed: 0, limited: 0, refused: new Map() };
      cells[slot] = cell;
    }
    return cell;
  }
}
