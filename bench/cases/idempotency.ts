import { SUCCESS } from '../expect';
import type { Fixture, SharedLimits } from '../fixture';
import { countKeyedCommands, payoutCheck, primeReplays } from '../idempotency';
import { TARGETS } from '../labels';
import type { Round } from '../report';
import { type GatewayCase, runCase, runConcurrently } from './gateway-case';

/** POST payouts with level-2 keys, to the sink upstream. */
function payoutCase(
  fixture: Fixture,
  limits: SharedLimits,
  name: string,
  credential: string,
  script: string,
  redis: boolean,
): GatewayCase {
  return {
    name,
    target: redis ? TARGETS.payoutsRedis : TARGETS.payoutsMemory,
    credential,
    env: payoutEnv(fixture),
    script,
    prepare: async (url) => {
      await payoutCheck(url, fixture.first.secretKey);
      if (script === fixture.payoutScripts.replay) {
        await primeReplays(
          url,
          fixture.accounts.map((account) => account.secretKey),
        );
      }
    },
    options: redis
      ? { ...limits.counted, extraCommandsByDesign: script !== fixture.payoutScripts.noKey }
      : { expected: SUCCESS },
    redis,
  };
}

function payoutEnv(fixture: Fixture): Record<string, string> {
  return {
    TOLLGATE_KEYS_FILE: fixture.payoutKeysFile,
    TOLLGATE_UPSTREAM_URL: fixture.payoutUpstreamUrl,
  };
}

/** (k) POST payouts without an Idempotency-Key, with in-memory or Redis limits. */
export function payoutsCase(fixture: Fixture, limits: SharedLimits, redis: boolean): GatewayCase {
  return payoutCase(
    fixture,
    limits,
    `(k) POST payouts, no key, ${redis ? 'Redis' : 'memory'}`,
    'secret key, no Idempotency-Key',
    fixture.payoutScripts.noKey,
    redis,
  );
}

/** Keyed payouts, each measured side by side with the same build's payouts without a key. */
function keyedCases(fixture: Fixture, limits: SharedLimits): readonly [GatewayCase, GatewayCase][] {
  const { payoutScripts } = fixture;
  const memory = payoutsCase(fixture, limits, false);
  const redis = payoutsCase(fixture, limits, true);
  return [
    [
      payoutCase(
        fixture,
        limits,
        '(k) first uses (a new key each request), memory',
        'secret key, a new Idempotency-Key each request',
        payoutScripts.unique,
        false,
      ),
      memory,
    ],
    [
      payoutCase(
        fixture,
        limits,
        '(k) replays (one key per account), memory',
        'secret key, replayed Idempotency-Key',
        payoutScripts.replay,
        false,
      ),
      memory,
    ],
    [
      payoutCase(
        fixture,
        limits,
        '(k) first uses (a new key each request), Redis',
        'secret key, a new Idempotency-Key each request',
        payoutScripts.unique,
        true,
      ),
      redis,
    ],
    [
      payoutCase(
        fixture,
        limits,
        '(k) replays (one key per account), Redis',
        'secret key, replayed Idempotency-Key',
        payoutScripts.replay,
        true,
      ),
      redis,
    ],
  ];
}

/**
 * `idempotency`: (k) POST payouts with and without an Idempotency-Key. The Redis commands of each
 * kind of keyed request, one at a time, then under load; then with a key against without, the
 * same build, both gateways under load at once.
 */
export async function runIdempotency(fixture: Fixture, limits: SharedLimits): Promise<void> {
  const { bench, settings, current } = fixture;
  const { redis } = limits;
  const keyed = keyedCases(fixture, limits);
  if (redis !== undefined) {
    const held = await fixture.startGateway(
      `${TARGETS.payoutsRedis}, upstream held 1 s`,
      {
        ...payoutEnv(fixture),
        TOLLGATE_UPSTREAM_URL: fixture.heldUpstreamUrl,
        ...limits.withRedis(),
      },
      'shared',
    );
    if (redis.port !== undefined) {
      bench.keyedCommands.push(
        ...(await countKeyedCommands(held.url, fixture.first.secretKey, redis.port, 1000)),
      );
    }
    await held.gateway.stop();
    bench.rows.push(await runCase(fixture, limits, payoutsCase(fixture, limits, true), current));
    for (const [withKey] of keyed) {
      if (withKey.redis === true) bench.rows.push(await runCase(fixture, limits, withKey, current));
    }
  }
  for (const [withKey, withoutKey] of keyed) {
    if (withKey.redis === true && redis === undefined) continue;
    const rounds: Round[] = [];
    for (let round = 1; round <= settings.rounds; round++) {
      const { mine, theirs } = await runConcurrently(
        fixture,
        limits,
        withKey,
        current,
        round,
        withoutKey,
      );
      rounds.push({ round, order: 'at once', current: mine, baseline: theirs });
    }
    bench.keyComparisons.push({ name: withKey.name, rounds });
  }
}
