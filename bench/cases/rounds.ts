import { SUCCESS } from '../expect';
import type { Fixture } from '../fixture';
import { ROUND_LABELS, type RoundCase } from '../labels';
import type { WrkResult } from '../wrk';

/**
 * The side-by-side rounds of the target ratios: every case still running (`roundUrls`) in turn,
 * BENCH_ROUNDS times, the first case moving by one every round.
 */
export async function runTargetRounds(
  fixture: Fixture,
  roundUrls: ReadonlyMap<RoundCase, string>,
): Promise<void> {
  const { bench, settings, scripts } = fixture;
  const scriptOf: Readonly<Record<RoundCase, string>> = {
    floor: scripts.upstream,
    'born-floor': scripts.upstream,
    naive: scripts.secret,
    'redis-secret': scripts.secret,
    'forward-auth': scripts.forwardAuth,
  };
  const cases = [...roundUrls.keys()];
  for (let round = 1; round <= settings.rounds; round++) {
    // Which case goes first moves by one every round.
    const shift = (round - 1) % cases.length;
    const order = [...cases.slice(shift), ...cases.slice(0, shift)];
    const results = new Map<RoundCase, WrkResult>();
    for (const name of order) {
      const row = await bench.run(
        ROUND_LABELS[name],
        `round ${round}`,
        roundUrls.get(name) ?? '',
        scriptOf[name],
        {
          expected: SUCCESS,
          durationSeconds: settings.roundSeconds,
          context: `round ${round} of ${settings.rounds}`,
        },
      );
      bench.roundRows.push(row);
      results.set(name, row.result);
    }
    bench.rounds.push(results);
  }
}
