import { forwardAuthCheck } from '../checks';
import type { Fixture, SharedLimits } from '../fixture';
import { type RoundCase, TARGETS } from '../labels';

/**
 * `forward-auth`: (i) the gateway's forward-auth endpoint as nginx's auth_request calls it, Redis
 * limits, TOLLGATE_TRUST_PROXY=127.0.0.1; kept running for the side-by-side rounds.
 */
export async function runForwardAuth(
  fixture: Fixture,
  limits: SharedLimits,
  roundUrls: Map<RoundCase, string>,
): Promise<void> {
  const { bench } = fixture;
  const { url, gateway } = await fixture.startGateway(
    TARGETS.forwardAuth,
    { ...limits.withRedis(), TOLLGATE_TRUST_PROXY: '127.0.0.1' },
    'shared',
  );
  await forwardAuthCheck(url, fixture.first);
  await bench.measure(
    TARGETS.forwardAuth,
    'secret key',
    url,
    fixture.scripts.forwardAuth,
    limits.counted,
  );
  bench.recordMemory(TARGETS.forwardAuth, gateway);
  roundUrls.set('forward-auth', url);
}
