import { sanityCheck } from '../checks';
import { SUCCESS } from '../expect';
import type { Fixture, Redis, SharedLimits } from '../fixture';
import { attributeToPauses } from '../gc-attribution';
import { PACED_RATE, TARGETS, WALLETS_PATH } from '../labels';
import { type PacedResult, runPaced } from '../paced';
import { askProbe, type Child, type LoopDelay } from '../processes';
import type { Added } from '../results';
import { log } from '../settings';

/** The processes of a fixed-rate round. */
type PacedCase = 'stub' | 'express' | 'proxy' | 'hops' | 'gateway';
const PACED_CASES: readonly PacedCase[] = ['stub', 'express', 'proxy', 'hops', 'gateway'];

/** Round `round` (from 1) starts one process later than the round before, so none is always first. */
function pacedOrder(round: number): PacedCase[] {
  const shift = (round - 1) % PACED_CASES.length;
  return [...PACED_CASES.slice(shift), ...PACED_CASES.slice(0, shift)];
}

/** A fixed-rate run through a process with the probe preloaded, and what the probe saw. */
interface Probed {
  readonly result: PacedResult;
  readonly loop: LoopDelay;
}

function addedOver(direct: PacedResult, through: Probed): Added {
  return {
    p50: through.result.p50Ms - direct.p50Ms,
    p99: through.result.p99Ms - direct.p99Ms,
    loop: through.loop,
    gc: attributeToPauses(through.result.samples, through.loop.pauses, through.result.p99Ms),
    requests: through.result.samples.length,
  };
}

/**
 * `latency`: the latency the gateway (Redis limits, secret key) adds over the stub at a fixed
 * PACED_RATE requests a second (an open-loop stream, bench/paced.ts), next to what (d'), (g) and
 * (g') add in the same rounds, each process probed for its collector pauses and allocations.
 */
export async function runLatency(
  fixture: Fixture,
  redis: Redis,
  limits: SharedLimits,
): Promise<void> {
  const { bench, settings, current, first, upstreamUrl, upstreamHeaders, secretHeaders } = fixture;
  const { withRedis } = limits;
  const { url, gateway } = await fixture.startGateway(
    TARGETS.paced,
    withRedis(),
    'shared',
    current,
    true,
  );
  await sanityCheck(url, first);
  // Floors: Express 5 answering alone, its server built as the gateway's is (with
  // `app.listen()` it promotes 16 times the bytes and collects fully every few seconds), and
  // the ten-line gateway: Express 5 with http-proxy-middleware and no check at all.
  const expressAlone = await fixture.startBenchServer(
    'express floor, born, paced',
    'bench/express-floor.js',
    { FLOOR_BORN: '1' },
    WALLETS_PATH,
    true,
  );
  const expressProxy = await fixture.startBenchServer(
    'express + proxy, paced',
    'bench/express-proxy.js',
    { UPSTREAM_URL: upstreamUrl },
    WALLETS_PATH,
    true,
  );
  // The gateway's own hops (a Redis round trip, its proxy) on Express, without its checks.
  const expressHops = await fixture.startBenchServer(
    'express + redis + proxy, paced',
    'bench/express-hops.js',
    { UPSTREAM_URL: upstreamUrl, REDIS_URL: redis.url },
    WALLETS_PATH,
    true,
  );
  const paced = async (
    target: string,
    credential: string,
    targetUrl: string,
    headerSets: readonly Readonly<Record<string, string>>[],
    context: string,
  ): Promise<PacedResult> => {
    const { warmupSeconds } = settings;
    log(
      `${target}, ${PACED_RATE}/s [${context}]: ${warmupSeconds}s warm-up, ${settings.roundSeconds}s measured`,
    );
    const result = await runPaced({
      url: targetUrl,
      path: WALLETS_PATH,
      headerSets,
      rate: PACED_RATE,
      warmupSeconds,
      durationSeconds: settings.roundSeconds,
    });
    const short = result.requestsPerSecond < PACED_RATE * 0.95;
    bench.pacedRows.push({
      target,
      credential: `${credential}, ${context}`,
      expected: SUCCESS,
      result,
      measuredSeconds: settings.roundSeconds,
      ...(short
        ? {
            note: `${context}: answered ${Math.round(result.requestsPerSecond)} of the ${PACED_RATE} requests due each second within the measured time`,
          }
        : {}),
    });
    return result;
  };
  for (let round = 1; round <= settings.rounds; round++) {
    const context = `round ${round}`;
    const stub = (): Promise<PacedResult> =>
      paced(TARGETS.upstream, 'gateway headers', upstreamUrl, upstreamHeaders, context);
    /** A round through a probed process; the probe's count starts again after the warm-up. */
    const probed = async (
      child: Child,
      target: string,
      credential: string,
      targetUrl: string,
      headerSets: readonly Readonly<Record<string, string>>[],
    ): Promise<Probed> => {
      const loopDelay = (): Promise<LoopDelay> =>
        askProbe<LoopDelay>(child.process, child.name, 'loop');
      const warmedUp = new Promise((resolve) =>
        setTimeout(resolve, settings.warmupSeconds * 1000),
      ).then(loopDelay);
      const result = await paced(target, credential, targetUrl, headerSets, context);
      await warmedUp;
      return { result, loop: await loopDelay() };
    };
    const gate = (): Promise<Probed> =>
      probed(gateway, TARGETS.paced, 'secret key', url, secretHeaders);
    const alone = (): Promise<Probed> =>
      probed(
        expressAlone.child,
        TARGETS.bornFloor,
        'gateway headers',
        expressAlone.url,
        upstreamHeaders,
      );
    const bare = (): Promise<Probed> =>
      probed(
        expressProxy.child,
        TARGETS.proxy,
        'gateway headers',
        expressProxy.url,
        upstreamHeaders,
      );
    const hops = (): Promise<Probed> =>
      probed(expressHops.child, TARGETS.hops, 'gateway headers', expressHops.url, upstreamHeaders);
    let direct: PacedResult | undefined;
    let through: Probed | undefined;
    let answered: Probed | undefined;
    let proxied: Probed | undefined;
    let hopped: Probed | undefined;
    const runs: Record<PacedCase, () => Promise<void>> = {
      stub: async () => {
        direct = await stub();
      },
      express: async () => {
        answered = await alone();
      },
      proxy: async () => {
        proxied = await bare();
      },
      hops: async () => {
        hopped = await hops();
      },
      gateway: async () => {
        through = await gate();
      },
    };
    for (const name of pacedOrder(round)) await runs[name]();
    if (
      direct === undefined ||
      through === undefined ||
      answered === undefined ||
      proxied === undefined ||
      hopped === undefined
    ) {
      throw new Error('a fixed-rate round did not run');
    }
    bench.added.push(addedOver(direct, through));
    bench.expressAdded.push(addedOver(direct, answered));
    bench.proxyAdded.push(addedOver(direct, proxied));
    bench.hopsAdded.push(addedOver(direct, hopped));
  }
  await gateway.stop();
  await expressAlone.child.stop();
  await expressProxy.child.stop();
  await expressHops.child.stop();
}
