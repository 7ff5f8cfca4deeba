/**
 * Reading the Prometheus text format a gateway's `/metrics` serves, for assertions on its
 * samples.
 */

/** Parsed text format: `name{labels}` -> value. */
export function samples(text: string): Map<string, number> {
  const result = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    result.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return result;
}

/** The value of the series with exactly these labels (in any order), or undefined. */
export function valueOf(
  all: Map<string, number>,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const wanted = Object.entries(labels)
    .map(([label, value]) => `${label}="${value}"`)
    .sort()
    .join(',');
  for (const [series, value] of all) {
    const brace = series.indexOf('{');
    const seriesName = brace === -1 ? series : series.slice(0, brace);
    if (seriesName !== name) continue;
    const seriesLabels = brace === -1 ? '' : series.slice(brace + 1, -1);
    if (seriesLabels.split(',').filter(Boolean).sort().join(',') === wanted) return value;
  }
  return undefined;
}
