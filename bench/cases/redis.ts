import { sanityCheck } from '../checks';
import type { Fixture, SharedLimits } from '../fixture';
import { type RoundCase, TARGETS } from '../labels';

/**
 * `redis`: (c) the gateway with Redis limits, with a secret key and with a token, the Redis
 * commands counted; kept running for the side-by-side rounds.
 */
export async function runRedis(
  fixture: Fixture,
  limits: SharedLimits,
  roundUrls: Map<RoundCase, string>,
): Promise<void> {
  const { bench, scripts } = fixture;
  const { url, gateway } = await fixture.startGateway(TARGETS.redis, limits.withRedis(), 'shared');
  await sanityCheck(url, fixture.first);
  await bench.measure(TARGETS.redis, 'secret key', url, scripts.secret, limits.counted);
  await bench.measure(TARGETS.redis, 'token', url, scripts.token, limits.counted);
  bench.recordMemory(TARGETS.redis, gateway);
  roundUrls.set('redis-secret', url).set('redis-token', url);
}
