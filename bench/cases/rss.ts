import { addressNumber, sendFromDistinctIps } from '../distinct-ips';
import type { BenchAccount, Fixture, SharedLimits } from '../fixture';
import { CHECKOUT_PATH } from '../labels';
import { type Child, httpRequest, memoryOf } from '../processes';
import type { RssCase } from '../results';
import { log } from '../settings';

/** A limit window of the per-IP scopes, and a margin. */
const WINDOW_WAIT_MS = 61_000;
/** RSS may move this much after the window and still count as flat. */
export const FLAT_MIB = 8;
export const RSS_GROWTH_TARGET_MIB = 64;
/** Addresses of the RSS cases' warm-up, before the first reading. */
const RSS_WARMUP_IPS = 5000;

async function measureRss(
  target: string,
  url: string,
  gateway: Child,
  account: BenchAccount,
  ips: number,
): Promise<RssCase> {
  const request = {
    url,
    method: 'POST',
    path: CHECKOUT_PATH,
    headers: {
      'content-type': 'application/json',
      'x-service-public-api-key': account.publishableKey,
    },
    body: '{"amount":100}',
  };
  const check = await httpRequest(`${url}${CHECKOUT_PATH}`, {
    method: 'POST',
    headers: { ...request.headers, 'x-forwarded-for': addressNumber(2 ** 24 - 1) },
    body: request.body,
  });
  if (check.status !== 201) throw new Error(`${target}: a checkout answered ${check.status}`);
  const rss = (): number => memoryOf(gateway.process.pid)?.rssMiB ?? Number.NaN;
  const peak = (): number => memoryOf(gateway.process.pid)?.peakMiB ?? Number.NaN;
  const unexpected = (statuses: Readonly<Record<number, number>>, errors: number): number =>
    errors +
    Object.entries(statuses).reduce(
      (sum, [status, count]) => (Number(status) >= 200 && Number(status) < 300 ? sum : sum + count),
      0,
    );
  // Warm-up from another block of addresses (the top of 10/8), so that "before" is a warmed
  // process, not a fresh one growing its heap for the first time.
  const warmup = await sendFromDistinctIps({
    ...request,
    first: 2 ** 24 - RSS_WARMUP_IPS - 1,
    count: RSS_WARMUP_IPS,
  });
  if (unexpected(warmup.statuses, warmup.errors) > 0) {
    throw new Error(
      `${target}: the warm-up had ${unexpected(warmup.statuses, warmup.errors)} unexpected answers`,
    );
  }
  const beforeMiB = rss();
  log(
    `${target}: ${ips.toLocaleString('en-US')} distinct client IPs, RSS before ${beforeMiB.toFixed(0)} MiB`,
  );
  const sent = await sendFromDistinctIps({
    ...request,
    first: 0,
    count: ips,
    onProgress: (answered) => {
      log(`${target}: ${answered.toLocaleString('en-US')} answered, RSS ${rss().toFixed(0)} MiB`);
    },
  });
  const afterMiB = rss();
  const peakMiB = peak();
  log(
    `${target}: RSS after ${afterMiB.toFixed(0)} MiB (peak ${peakMiB.toFixed(0)} MiB); waiting ${WINDOW_WAIT_MS / 1000}s for the window`,
  );
  await new Promise((resolve) => setTimeout(resolve, WINDOW_WAIT_MS));
  const flushIps = Math.max(1000, Math.floor(ips / 10));
  const flushed = await sendFromDistinctIps({ ...request, first: ips, count: flushIps });
  const afterWindowMiB = rss();
  const peakAfterWindowMiB = peak();
  log(
    `${target}: RSS after the window and ${flushIps.toLocaleString('en-US')} more IPs ${afterWindowMiB.toFixed(0)} MiB (peak ${peakAfterWindowMiB.toFixed(0)} MiB)`,
  );
  return {
    target,
    ips,
    perSecond: sent.answered / sent.seconds,
    beforeMiB,
    afterMiB,
    peakMiB,
    afterWindowMiB,
    peakAfterWindowMiB,
    flushIps,
    unexpected:
      unexpected(sent.statuses, sent.errors) + unexpected(flushed.statuses, flushed.errors),
  };
}

/**
 * `rss`: (j) the gateway's RSS after BENCH_DISTINCT_IPS distinct client IPs in X-Forwarded-For on
 * POST /api/v1/checkout/ (per-IP scope), memory and Redis limits, before, after, and after the
 * 60 s window (bench/distinct-ips.ts).
 */
export async function runRss(fixture: Fixture, limits: SharedLimits): Promise<void> {
  const sink = await fixture.startBenchServer('sink upstream', 'bench/sink-upstream.js', {}, '/');
  const kinds: { limits: string; env: Record<string, string>; healthz: string }[] = [
    { limits: 'memory', env: {}, healthz: 'memory' },
    ...(limits.redis === undefined
      ? []
      : [{ limits: 'Redis', env: limits.withRedis(), healthz: 'shared' }]),
  ];
  for (const kind of kinds) {
    const target = `(j) gateway, ${kind.limits} limits, POST ${CHECKOUT_PATH} per IP`;
    const { url, gateway } = await fixture.startGateway(
      target,
      { ...kind.env, TOLLGATE_TRUST_PROXY: '127.0.0.1', TOLLGATE_UPSTREAM_URL: sink.url },
      kind.healthz,
    );
    fixture.bench.rss.push(
      await measureRss(target, url, gateway, fixture.first, fixture.settings.distinctIps),
    );
    await gateway.stop();
  }
}

export function formatRss(cases: readonly RssCase[]): string {
  const lines = [
    '| target | distinct IPs | requests/s | RSS before (MiB) | after (MiB) | peak (MiB) | peak growth (MiB) | after the window (MiB) | its peak (MiB) | unexpected |',
    '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const c of cases) {
    lines.push(
      `| ${c.target} | ${c.ips.toLocaleString('en-US')} | ${Math.round(c.perSecond).toLocaleString('en-US')} | ` +
        `${c.beforeMiB.toFixed(0)} | ${c.afterMiB.toFixed(0)} | ${c.peakMiB.toFixed(0)} | ${(c.peakMiB - c.beforeMiB).toFixed(0)} | ` +
        `${c.afterWindowMiB.toFixed(0)} (+${c.flushIps.toLocaleString('en-US')} IPs) | ${c.peakAfterWindowMiB.toFixed(0)} | ${c.unexpected} |`,
    );
  }
  return lines.join('\n');
}
