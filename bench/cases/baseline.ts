import type { Fixture, SharedLimits } from '../fixture';
import type { Round, Row } from '../report';
import type { Build } from '../settings';
import {
  type GatewayCase,
  redisSecretKeyCase,
  runCase,
  runConcurrently,
  secretKeyCase,
  wrongLeftCase,
  wrongSpentCase,
} from './gateway-case';
import { payoutsCase } from './idempotency';

/**
 * BENCH_BASELINE_DIST: the selected groups' gateway cases against the baseline build, in
 * BENCH_ROUNDS rounds, each build in a fresh gateway, which goes first swapped every round (or
 * both at once with BENCH_BASELINE_CONCURRENT).
 */
export async function runBaseline(
  fixture: Fixture,
  limits: SharedLimits,
  baseline: Build,
): Promise<void> {
  const { bench, groups, settings, current } = fixture;
  const redis = limits.redis !== undefined;
  const compared: GatewayCase[] = [
    ...(groups.has('memory') ? [secretKeyCase(fixture)] : []),
    ...(redis && groups.has('redis') ? [redisSecretKeyCase(fixture, limits)] : []),
    ...(groups.has('wrong-credential') ? [wrongLeftCase(fixture), wrongSpentCase(fixture)] : []),
    ...(groups.has('idempotency') ? [payoutsCase(fixture, limits, false)] : []),
    ...(redis && groups.has('idempotency') ? [payoutsCase(fixture, limits, true)] : []),
  ];
  for (const gatewayCase of compared) {
    const rounds: Round[] = [];
    for (let round = 1; round <= settings.rounds; round++) {
      const order: Round['order'] = settings.concurrent
        ? 'at once'
        : round % 2 === 1
          ? 'this first'
          : 'baseline first';
      const runOne = (build: Build): Promise<Row> =>
        runCase(
          fixture,
          limits,
          gatewayCase,
          build,
          settings.roundSeconds,
          `${build.label} build, round ${round} of ${settings.rounds}`,
        );
      let mine: Row;
      let theirs: Row;
      if (order === 'at once') {
        ({ mine, theirs } = await runConcurrently(fixture, limits, gatewayCase, baseline, round));
      } else if (order === 'this first') {
        mine = await runOne(current);
        theirs = await runOne(baseline);
      } else {
        theirs = await runOne(baseline);
        mine = await runOne(current);
      }
      rounds.push({ round, order, current: mine, baseline: theirs });
    }
    bench.comparisons.push({ name: gatewayCase.name, rounds });
  }
}
