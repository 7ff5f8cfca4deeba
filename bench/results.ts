import type { GcAttribution } from './gc-attribution';
import type { LoopDelay } from './processes';

/** What the cases record besides wrk rows (report.ts): memory, fixed-rate rounds, RSS. */

/** A gateway's RSS after its measured runs. */
export interface Memory {
  readonly target: string;
  readonly rssMiB: number;
  readonly peakMiB: number;
}

/** What a probed process added over the stub in one fixed-rate round. */
export interface Added {
  readonly p50: number;
  readonly p99: number;
  readonly loop: LoopDelay;
  readonly gc: GcAttribution;
  /** Requests answered over the measured time (what the probe's figures are divided by). */
  readonly requests: number;
}

/** RSS of a gateway before, after a million distinct client IPs, and after the window. */
export interface RssCase {
  readonly target: string;
  readonly ips: number;
  readonly perSecond: number;
  readonly beforeMiB: number;
  readonly afterMiB: number;
  /** The most RSS was (VmHWM) by the end of the addresses: after the warm-up, at least `beforeMiB`. */
  readonly peakMiB: number;
  /** After the 60 s window, and `flushIps` more new addresses. */
  readonly afterWindowMiB: number;
  /** The most RSS was by the end of those addresses. */
  readonly peakAfterWindowMiB: number;
  readonly flushIps: number;
  /** Answers that were not 2xx, and request errors. */
  readonly unexpected: number;
}
