'use strict';

/**
 * Micro-benchmark of what the metrics add to one request: one decision counted, one
 * status counted, one upstream latency observed and one Redis command timed, as the gateway does
 * per allowed request. Prints nanoseconds and bytes allocated per request (median of rounds). Not
 * a test: run it by hand on a quiet machine.
 *
 *   npm run build && node --expose-gc scripts/microbench-metrics.cjs [rounds]
 */

const { GatewayMetrics } = require('../dist/gateway/metrics.js');

const ROUNDS = Number(process.argv[2] ?? 5);
const PER_ROUND = 500_000;

const metrics = new GatewayMetrics({
  scopes: ['payments'],
  rateLimitState: () => 'shared',
  degradedSince: () => undefined,
  keys: () => ({ status: 'ready', count: 1 }),
  upstream: () => ({ up: true, reason: undefined, checkedAt: Date.now(), latencySeconds: 0.001 }),
  ready: () => true,
});
const event = {
  policy: '/api/v1/wallets/',
  facts: {},
  decision: { allowed: true, auth: {}, headers: [] },
};
const reply = Promise.resolve(1);
const redis = metrics.instrumentRedis({
  client: { status: 'ready', call: () => reply },
  health: {},
});

async function round() {
  global.gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  const started = process.hrtime.bigint();
  for (let i = 0; i < PER_ROUND; i++) {
    metrics.decision(event, 'shared');
    metrics.request(200);
    metrics.upstreamAnswered(0.004);
    if (i % 1000 === 0) await redis.client.call('EVALSHA', 'sha', '1', 'key');
  }
  const ns = Number(process.hrtime.bigint() - started) / PER_ROUND;
  const bytes = (process.memoryUsage().heapUsed - heapBefore) / PER_ROUND;
  return { ns, bytes };
}

async function redisRound() {
  const started = process.hrtime.bigint();
  for (let i = 0; i < PER_ROUND / 10; i++) await redis.client.call('EVALSHA', 'sha', '1', 'key');
  const wrapped = Number(process.hrtime.bigint() - started) / (PER_ROUND / 10);
  const bare = { call: () => reply };
  const started2 = process.hrtime.bigint();
  for (let i = 0; i < PER_ROUND / 10; i++) await bare.call('EVALSHA', 'sha', '1', 'key');
  return wrapped - Number(process.hrtime.bigint() - started2) / (PER_ROUND / 10);
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

(async () => {
  await round(); // warm-up
  const rounds = [];
  const redisCosts = [];
  for (let r = 0; r < ROUNDS; r++) {
    rounds.push(await round());
    redisCosts.push(await redisRound());
  }
  process.stdout.write(
    `decision + status + upstream histogram: ${median(rounds.map((x) => x.ns)).toFixed(0)} ns/request, ` +
      `${median(rounds.map((x) => x.bytes)).toFixed(1)} bytes/request of heap growth over the round\n`,
  );
  process.stdout.write(`timing one Redis command: +${median(redisCosts).toFixed(0)} ns/command\n`);
})();
