import type { Fixture } from '../fixture';
import { type RoundCase, TARGETS } from '../labels';

/**
 * `direct`: (a) the stub upstream, (d) Express 5 alone, (d') the same served with
 * `expressServerOptions(app)`, (g) Express 5 + http-proxy-middleware. (d) and (d') are kept
 * running for the side-by-side rounds (`roundUrls`).
 */
export async function runDirect(
  fixture: Fixture,
  roundUrls: Map<RoundCase, string>,
): Promise<void> {
  const { bench, scripts, upstreamUrl } = fixture;
  await bench.measure(TARGETS.upstream, 'gateway headers', upstreamUrl, scripts.upstream);
  const floor = await fixture.startBenchServer('express floor', 'bench/express-floor.js', {});
  await bench.measure(TARGETS.floor, 'gateway headers', floor.url, scripts.upstream);
  roundUrls.set('floor', floor.url);
  const bornFloor = await fixture.startBenchServer(
    'express floor, born',
    'bench/express-floor.js',
    { FLOOR_BORN: '1' },
  );
  await bench.measure(TARGETS.bornFloor, 'gateway headers', bornFloor.url, scripts.upstream);
  roundUrls.set('born-floor', bornFloor.url);
  const proxy = await fixture.startBenchServer('express + proxy', 'bench/express-proxy.js', {
    UPSTREAM_URL: upstreamUrl,
  });
  await bench.measure(TARGETS.proxy, 'gateway headers', proxy.url, scripts.upstream);
  await proxy.child.stop();
}
