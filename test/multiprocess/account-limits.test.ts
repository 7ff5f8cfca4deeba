import { writeFileSync } from 'node:fs';
import { uniquePrefix, type OwnedRedis } from '../helpers/redis';
import { type RecordingUpstream, startRecordingUpstream } from '../helpers/upstream';
import {
  assertBuilt,
  closeClient,
  describeWithOwnedRedis,
  type GatewayProcess,
  hammer,
  type KeysFile,
  printRateLimitEvents,
  rollingState,
  startGatewayFleet,
  startOwnedRedis,
  statusCounts,
  stopAll,
  waitForState,
  writeKeysFile,
} from './harness';

/**
 * Limit overrides across a fleet: an account's own limit is just another limit on the same shared
 * counter, so two gateway processes on one Redis, hit at once with three times the override,
 * admit exactly the override together, and every answer shows the account's own quota.
 */

const INSTANCES = 2;
const CONCURRENCY = 16;
const OVERRIDE = 7;

describeWithOwnedRedis(
  'two gateway processes sharing one Redis, an account with its own limit',
  () => {
    const prefix = uniquePrefix('mp-account-limits');
    let redis: OwnedRedis;
    let upstream: RecordingUpstream;
    let keys: KeysFile;
    let fleet: GatewayProcess[];

    beforeAll(async () => {
      assertBuilt();
      [redis, upstream] = await Promise.all([startOwnedRedis(), startRecordingUpstream()]);
      keys = writeKeysFile();
      const document = {
        accounts: keys.fixtures.document.accounts.map((account) =>
          account.id === 'acct_open' ? { ...account, limits: { payments: OVERRIDE } } : account,
        ),
      };
      writeFileSync(keys.path, JSON.stringify(document), { mode: 0o600 });
      fleet = await startGatewayFleet(INSTANCES, {
        keysFile: keys,
        upstreamUrl: upstream.url,
        env: { REDIS_URL: redis.url, TOLLGATE_REDIS_PREFIX: prefix },
      });
      await waitForState(fleet, 'shared');
    }, 30_000);

    afterAll(async () => {
      closeClient();
      await stopAll();
      await upstream.close();
    });

    it(`admits exactly the override (payments ${OVERRIDE}) over both instances, with q=${OVERRIDE} on every answer`, async () => {
      const { admin } = keys.fixtures.keys;
      const answers = await hammer(3 * OVERRIDE * INSTANCES, CONCURRENCY, (index) => ({
        url: fleet[index % INSTANCES]?.url ?? '',
        path: '/api/v1/wallets/',
        headers: { authorization: `Bearer ${admin.secretKey}` },
      }));
      const key = `${prefix}payments:rolling:account:{acct_open}`;
      if (statusCounts(answers)[200] !== OVERRIDE) {
        printRateLimitEvents('[account-limits] count off', fleet);
      }
      expect(statusCounts(answers)).toEqual({ 200: OVERRIDE, 429: answers.length - OVERRIDE });
      for (const answer of answers) {
        expect(answer.headers['ratelimit-policy']).toMatch(
          new RegExp(`"payments"; q=${OVERRIDE};`),
        );
      }
      const perInstance = fleet.map(
        (_, instance) =>
          answers.filter((answer, index) => index % INSTANCES === instance && answer.status === 200)
            .length,
      );
      const counted = (await rollingState(redis.port, key))?.count;
      console.log(
        `[account-limits] ${answers.length} payments requests over ${INSTANCES} instances, ${CONCURRENCY} in flight: ` +
          `admitted ${statusCounts(answers)[200]} (override ${OVERRIDE}, default 1500); per instance ${perInstance.join('/')}; Redis counted ${counted}: refused requests spend nothing`,
      );
      expect(counted).toBe(OVERRIDE);
    });
  },
);
