import { median } from './report';

/**
 * The performance targets, each with the figure this run measured and whether it is met. Ratios of
 * throughput are medians of per-round ratios (each round runs the cases next to each other, in an
 * order rotated every round).
 */

export interface Target {
  readonly label: string;
  /** As printed: `>= 1.4`, `< 2 ms`, ... */
  readonly goal: string;
  /** The figure as printed, or `undefined` when the case was not run. */
  readonly figure: string | undefined;
  readonly met: boolean | undefined;
}

export function ratioTarget(
  label: string,
  ratios: readonly number[] | undefined,
  atLeast: number,
): Target {
  if (ratios === undefined || ratios.length === 0) {
    return { label, goal: `>= ${atLeast}`, figure: undefined, met: undefined };
  }
  const value = median(ratios);
  return {
    label,
    goal: `>= ${atLeast}`,
    figure: `${value.toFixed(2)} (rounds: ${ratios.map((ratio) => ratio.toFixed(2)).join(', ')})`,
    met: value >= atLeast,
  };
}

export function formatTargets(targets: readonly Target[]): string {
  const lines = ['| figure | this run | target | met |', '|---|--:|--:|---|'];
  for (const target of targets) {
    const met = target.met === undefined ? 'not measured' : target.met ? 'met' : 'NOT met';
    lines.push(`| ${target.label} | ${target.figure ?? '-'} | ${target.goal} | ${met} |`);
  }
  return lines.join('\n');
}
