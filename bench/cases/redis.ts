import { sanityCheck } from '../checks';
import type { Fixture, SharedLimits } from '../fixture';
import { type RoundCase, TARGETS } from '../labels';
import type { Round } from '../report';
import { redisSecretKeyCase, redisTokenCase, runConcurrently } from './gateway-case';

/**
 * `redis`: (c) the gateway with Redis limits, with a secret key and with a token, the Redis
 * commands counted; kept running for the side-by-side rounds (with a secret key). Then a token
 * against a secret key, each in a gateway of its own, both under load at once: the machine's other
 * load falls on both alike, which rounds one after the other cannot promise.
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
  roundUrls.set('redis-secret', url);
  const rounds: Round[] = [];
  for (let round = 1; round <= fixture.settings.rounds; round++) {
    const { mine, theirs } = await runConcurrently(
      fixture,
      limits,
      redisTokenCase(fixture, limits),
      fixture.current,
      round,
      redisSecretKeyCase(fixture, limits),
    );
    rounds.push({ round, order: 'at once', current: mine, baseline: theirs });
  }
  bench.credentialComparisons.push({ name: '(c) token / secret key, Redis', rounds });
}
