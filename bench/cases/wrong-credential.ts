import type { Fixture, SharedLimits } from '../fixture';
import { TARGETS } from '../labels';
import { log } from '../settings';
import { runCase, wrongLeftCase, wrongSpentCase } from './gateway-case';

/** `wrong-credential`: (e) and (f), each in a gateway of its own with in-memory limits. */
export async function runWrongCredential(fixture: Fixture, limits: SharedLimits): Promise<void> {
  const { bench, settings, current } = fixture;
  if (settings.warmupSeconds + settings.durationSeconds >= 60) {
    log(`${TARGETS.wrongSpent}: the budget's 1-minute window resets during the case`);
  }
  bench.rows.push(await runCase(fixture, limits, wrongLeftCase(fixture), current));
  bench.rows.push(await runCase(fixture, limits, wrongSpentCase(fixture), current));
}
