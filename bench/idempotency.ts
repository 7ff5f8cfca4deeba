import { setTimeout as sleep } from 'node:timers/promises';
import { httpRequest } from './processes';
import { commandCounts, commandsBetween, type CommandCounts } from './redis-stats';

/**
 * The idempotency cases (`BENCH_ONLY=idempotency`): `POST /api/v1/payouts/`, a route that takes an
 * `Idempotency-Key`, with a level-2 secret key, answered by the sink upstream (`201 {}`, nothing
 * kept). Without a key, each build side by side; with a key (a new one each request, or a replay
 * of one key per account), against the same build without a key, side by side; and the Redis
 * commands of each kind of keyed request, counted one request at a time.
 */

export const PAYOUTS_PATH = '/api/v1/payouts/';
/** A payout request's body, the same bytes on every request (and so on every replay). */
export const PAYOUT_BODY = JSON.stringify({
  amount: 1250,
  currency: 'EUR',
  destination: 'wal_bench_destination',
  reference: 'bench payout',
});

function at<T>(list: readonly T[], index: number): T {
  const value = list[index];
  if (value === undefined) throw new Error(`no item ${index}`);
  return value;
}

function payout(
  url: string,
  secretKey: string,
  key?: string,
): Promise<{ status: number; body: string }> {
  return httpRequest(`${url}${PAYOUTS_PATH}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${secretKey}`,
      'content-type': 'application/json',
      ...(key === undefined ? {} : { 'idempotency-key': key }),
    },
    body: PAYOUT_BODY,
  });
}

/** A payout without a key is answered 201 by the sink. */
export async function payoutCheck(url: string, secretKey: string): Promise<void> {
  const reply = await payout(url, secretKey);
  if (reply.status !== 201) throw new Error(`a payout answered ${reply.status}: ${reply.body}`);
}

/**
 * Answers the first use of each account's replay key (`bench-replay-<index>`, as the `per-set`
 * wrk script sends them), `concurrency` at a time, so that the measured run is all replays.
 */
export async function primeReplays(
  url: string,
  secretKeys: readonly string[],
  concurrency = 16,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let index = next++; index < secretKeys.length; index = next++) {
      let reply = await payout(url, at(secretKeys, index), `bench-replay-${index}`);
      // A loaded machine can time a Redis command out (503 until Redis answers again): retried.
      for (let retry = 0; reply.status === 503 && retry < 50; retry++) {
        await sleep(100);
        reply = await payout(url, at(secretKeys, index), `bench-replay-${index}`);
      }
      if (reply.status !== 201) {
        throw new Error(`priming replay key ${index} answered ${reply.status}: ${reply.body}`);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

function describe(before: CommandCounts, after: CommandCounts): string {
  const { total, scripts, byName } = commandsBetween(before, after);
  const names = [...byName.entries()].map(([name, calls]) => `${name} ${calls}`).join(', ');
  // commandstats counts the commands a script runs too: the EVALSHAs are what the gateway sent.
  return `${scripts} EVALSHA sent (${total} executed: ${names || 'none'})`;
}

/**
 * The Redis commands of each kind of keyed request, one request at a time, against a gateway
 * whose upstream holds every answer `holdMs`: a first use (before the upstream answers, then the
 * settle once it has), a retry while the first is in flight (`409`), and a replay.
 */
export async function countKeyedCommands(
  url: string,
  secretKey: string,
  redisPort: number,
  holdMs: number,
): Promise<string[]> {
  const key = `bench-count-${Date.now()}`;
  const lines: string[] = [];
  // The gateway's scripts loaded (a first EVALSHA gets NOSCRIPT, then EVAL), its first answer kept.
  const warm = await payout(url, secretKey, `${key}-warm-up`);
  if (warm.status !== 201) throw new Error(`a keyed payout answered ${warm.status}`);
  await sleep(100);
  const s0 = await commandCounts(redisPort);
  const first = payout(url, secretKey, key);
  await sleep(Math.min(200, holdMs / 2));
  const s1 = await commandCounts(redisPort);
  const retry = await payout(url, secretKey, key);
  const s2 = await commandCounts(redisPort);
  const answered = await first;
  await sleep(100);
  const s3 = await commandCounts(redisPort);
  const replay = await payout(url, secretKey, key);
  const s4 = await commandCounts(redisPort);
  const noKey = await payout(url, secretKey);
  const s5 = await commandCounts(redisPort);
  if (answered.status !== 201 || retry.status !== 409 || replay.status !== 201) {
    throw new Error(
      `keyed payouts answered ${answered.status}, ${retry.status}, ${replay.status} (201, 409, 201 expected)`,
    );
  }
  if (noKey.status !== 201) throw new Error(`a payout without a key answered ${noKey.status}`);
  lines.push(
    `- first use, until the upstream answers: ${describe(s0, s1)}`,
    `- first use, once answered (the answer kept): ${describe(s2, s3)}`,
    `- the same key while the first is in flight, answered 409: ${describe(s1, s2)}`,
    `- the same key once answered, replayed (201): ${describe(s3, s4)}`,
    `- no key: ${describe(s4, s5)}`,
  );
  return lines;
}
