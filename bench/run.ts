import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runBaseline } from './cases/baseline';
import { runDirect } from './cases/direct';
import { runForwardAuth } from './cases/forward-auth';
import { runIdempotency } from './cases/idempotency';
import { runLatency } from './cases/latency';
import { runMemory } from './cases/memory';
import { runNaive } from './cases/naive';
import { runRedis } from './cases/redis';
import { runTargetRounds } from './cases/rounds';
import { runRss } from './cases/rss';
import { runWrongCredential } from './cases/wrong-credential';
import { prepareFixture, sharedLimits } from './fixture';
import { Bench } from './harness';
import type { RoundCase } from './labels';
import { versionOf } from './processes';
import { baselineBuild, currentBuild, log, readSettings, selectedGroups } from './settings';
import { printReport } from './summary';

/**
 * `npm run bench`: GET /api/v1/wallets/ measured with wrk, in one run, against
 *   (a) the stub upstream hit directly,
 *   (d) Express 5 alone answering the same JSON (the floor for anything built on Express),
 *   (d') the same Express app served with `expressServerOptions(app)`, as the gateway is,
 *   (b) the gateway in front of the stub with in-memory limits, with a secret key and a token,
 *   (c) the same with Redis-backed limits (a redis-server started for the run),
 *   (e) the gateway refusing wrong secret keys while the IP's failure budget lasts: plausible keys
 *       (right shape and checksum) that are in no keys file, compared and answered 401, with
 *       TOLLGATE_AUTH_FAILURE_LIMIT=100000 (the highest allowed),
 *   (f) the same wrong keys once the budget (the default 20) is spent: every attempt refused with
 *       429 before any comparison, the cheap refusal.
 * Every process listens on 127.0.0.1 only. The gateways run the real `dist/gateway/server.js`
 * with NODE_ENV=production and LOG_LEVEL=warn (at `info` two log lines per request dominate the
 * cost), a generated keys file of many accounts, and wrk rotating through them, so the per-account
 * limits (1,500/min) are never reached. Each case says which statuses it expects (2xx for
 * (a)-(d), 401 for (e), also 429 once its budget runs out, 429 for (f)); any other answer or a
 * socket error is reported next to the figures and the run exits with 1.
 *
 * All wrk traffic comes from 127.0.0.1, one client IP: (e) spends its budget of 100 000 failures
 * per minute at several thousand requests a second, so its measured time is cut (and said so) to
 * what the budget allows after the warm-up, and its 401 and 429 answers are counted apart.
 *
 *   (g) Express 5 + http-proxy-middleware to the stub, no auth (bench/express-proxy.ts),
 *   (h) the naive composition (ten lines of the same libraries) with Redis limits
 *       (bench/naive-composition.ts),
 *   (i) the gateway's forward-auth endpoint (GET /authz/auth-request as nginx sends it) with
 *       Redis limits, TOLLGATE_TRUST_PROXY=127.0.0.1,
 * then the performance targets' ratios from side-by-side rounds of (d), (d'), (h), (c) and (i)
 * (medians of per-round ratios), Redis commands per allowed request (INFO commandstats of the
 * bench's own redis-server), the latency the gateway adds over the stub at a fixed 1,000 requests
 * a second (an open-loop stream, each request timed from when it was due: bench/paced.ts), next to
 * what (d'), (g) and (g') add in the same rounds ((g'): Express 5 with one Redis round trip and the
 * gateway's proxy, no check: bench/express-hops.ts), with each process's collector pauses and the
 * bytes it allocates per request (bench/keys/probe.ts), and (j) the gateway's RSS after
 * BENCH_DISTINCT_IPS (1,000,000) distinct client IPs in X-Forwarded-For on POST /api/v1/checkout/
 * (per-IP scope), memory and Redis limits, before, after, and after the 60 s window
 * (bench/distinct-ips.ts), and (k) POST /api/v1/payouts/ with and without an Idempotency-Key
 * (bench/idempotency.ts). The run ends with the table of performance targets, met or not.
 *
 * Each group of cases is a module of bench/cases/ (their shared accounts, scripts and processes:
 * bench/fixture.ts; the measuring: bench/harness.ts; the report: bench/summary.ts); this file
 * chooses the groups and prints.
 *
 * Settings (environment): BENCH_DURATION seconds per measured case (15), BENCH_WARMUP (3),
 * BENCH_CONNECTIONS (32), BENCH_THREADS (1), BENCH_ACCOUNTS (1000; also the number of wrong keys
 * rotated), BENCH_REDIS_URL (use this Redis instead of starting one; a unique key prefix keeps the
 * run apart from other users, and no Redis commands are counted), BENCH_NODE_FLAGS (Node flags
 * for the gateways, none), BENCH_DISTINCT_IPS (1000000), BENCH_ONLY (a comma-separated list of `direct` (a, d, d', g),
 * `memory` (b), `redis` (c), `naive` (h), `forward-auth` (i), `latency`, `wrong-credential` (e,
 * f), `rss` (j), `idempotency` (k); all by default).
 *
 * Side by side: BENCH_BASELINE_DIST, the `dist` directory of another build (an older commit, built
 * with `npm run build`). Then (e), (f) and, when `memory` is selected, (b) with a secret key also
 * run against `<BENCH_BASELINE_DIST>/gateway/server.js`, and so does (c) with a secret key when
 * `redis` is selected and Redis is there (with this build's stub upstream, keys
 * and wrk scripts) in BENCH_ROUNDS alternating rounds (3) of BENCH_ROUND_DURATION seconds (5, at
 * most BENCH_DURATION) after BENCH_WARMUP, each build in a fresh gateway process, which build goes
 * first swapped every round; the per-round and median ratios this build / baseline are printed.
 * With BENCH_BASELINE_CONCURRENT=1 both builds' gateways of a round run at the same time instead,
 * each under its own wrk: on a shared machine the other load then falls on both alike (Redis
 * commands are not counted in these rounds). BENCH_BASELINE_NODE_FLAGS gives the baseline's
 * gateways Node flags of their own (else BENCH_NODE_FLAGS): with BENCH_BASELINE_DIST=dist, the
 * same build with and without a flag. BENCH_GATEWAY_ENV (`NAME=value,…`) gives this build's
 * gateways more environment, e.g. `OTEL_EXPORTER_OTLP_ENDPOINT=…`: the same build traced and not.
 */

async function main(): Promise<void> {
  const wrk = versionOf('wrk')?.replace(/\s+Copyright.*$/, '');
  if (wrk === undefined) {
    console.error(
      'bench: wrk is not installed. On Debian/Ubuntu: sudo apt-get install -y wrk ' +
        '(macOS: brew install wrk), then run npm run bench again.',
    );
    process.exit(1);
  }
  const settings = readSettings();
  const groups = selectedGroups();
  const baseline = baselineBuild();
  const current = currentBuild();
  const loadBefore = os.loadavg();
  if ((loadBefore[0] ?? 0) > 3) {
    log(`load average is ${loadBefore[0]?.toFixed(2)}: the machine is busy, figures will be low`);
  }
  const started = Date.now();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-bench-'));
  const bench = new Bench(settings, dir);
  let redisOrigin = groups.has('redis') ? 'not available: (c) skipped' : 'not selected';
  try {
    const fixture = await prepareFixture(bench, settings, groups, dir, current);
    // Kept running until the side-by-side rounds of the target ratios are done.
    const roundUrls = new Map<RoundCase, string>();
    if (groups.has('direct')) await runDirect(fixture, roundUrls);
    if (groups.has('memory')) await runMemory(fixture);
    const limits = await sharedLimits(fixture);
    const { redis } = limits;
    if (redis !== undefined) redisOrigin = redis.origin;
    if (redis !== undefined && groups.has('redis')) await runRedis(fixture, limits, roundUrls);
    if (redis !== undefined && groups.has('naive')) {
      await runNaive(fixture, redis, limits, roundUrls);
    }
    if (redis !== undefined && groups.has('forward-auth')) {
      await runForwardAuth(fixture, limits, roundUrls);
    }
    if (roundUrls.size > 1) await runTargetRounds(fixture, roundUrls);
    if (redis !== undefined && groups.has('latency')) await runLatency(fixture, redis, limits);
    if (groups.has('wrong-credential')) await runWrongCredential(fixture, limits);
    if (baseline !== undefined) await runBaseline(fixture, limits, baseline);
    if (groups.has('idempotency')) await runIdempotency(fixture, limits);
    if (groups.has('rss')) await runRss(fixture, limits);
  } finally {
    await bench.stopAll();
  }
  printReport(bench, {
    settings,
    groups,
    current,
    baseline,
    wrk,
    redisOrigin,
    loadBefore,
    started,
  });
}

main().catch((error: unknown) => {
  console.error(`bench: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
