import { walletsWith } from '../checks';
import type { Fixture, Redis, SharedLimits } from '../fixture';
import { type RoundCase, TARGETS } from '../labels';

/**
 * `naive`: (h) the naive composition (bench/naive-composition.ts) with Redis limits; kept
 * running for the side-by-side rounds.
 */
export async function runNaive(
  fixture: Fixture,
  redis: Redis,
  limits: SharedLimits,
  roundUrls: Map<RoundCase, string>,
): Promise<void> {
  const env = limits.withRedis();
  const naive = await fixture.startBenchServer('naive composition', 'bench/naive-composition.js', {
    KEYS_FILE: fixture.keysFile,
    REDIS_URL: redis.url,
    REDIS_PREFIX: env.TOLLGATE_REDIS_PREFIX ?? 'tollgate-bench:naive:',
    UPSTREAM_URL: fixture.upstreamUrl,
  });
  const status = await walletsWith(naive.url, fixture.first.secretKey);
  if (status !== 200) throw new Error(`the naive composition answered ${status}`);
  await fixture.bench.measure(
    TARGETS.naive,
    'secret key',
    naive.url,
    fixture.scripts.secret,
    limits.counted,
  );
  roundUrls.set('naive', naive.url);
}
