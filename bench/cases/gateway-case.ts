import { DEFAULT_AUTH_FAILURE_LIMIT } from '../../lib/rate-limit/auth-failures';
import { sanityCheck, spendBudget, wrongKeyCheck } from '../checks';
import { BUDGET_SPENT, SUCCESS, WRONG_CREDENTIAL } from '../expect';
import type { Fixture, SharedLimits } from '../fixture';
import type { MeasureOptions } from '../harness';
import { TARGETS, WRONG_KEY } from '../labels';
import type { Child } from '../processes';
import type { Row } from '../report';
import type { Build } from '../settings';

/** TOLLGATE_AUTH_FAILURE_LIMIT for (e): the highest the gateway accepts. */
const LARGE_FAILURE_BUDGET = 100_000;

/** A case measured in a gateway process of its own (in-memory limits), for either build. */
export interface GatewayCase {
  readonly name: string;
  readonly target: string;
  readonly credential: string;
  readonly env: Record<string, string>;
  readonly script: string;
  /** Checks the answers before measuring (and spends the budget for (f)). */
  readonly prepare: (url: string) => Promise<void>;
  readonly options: MeasureOptions;
  /** Limits shared in Redis (a fresh key prefix per gateway) instead of process memory. */
  readonly redis?: boolean;
}

/** (b) with a secret key, in a gateway of its own. */
export function secretKeyCase(fixture: Fixture): GatewayCase {
  return {
    name: '(b) secret key',
    target: TARGETS.memory,
    credential: 'secret key',
    env: {},
    script: fixture.scripts.secret,
    prepare: (url) => sanityCheck(url, fixture.first),
    options: { expected: SUCCESS },
  };
}

/** (c) with a secret key, in a gateway of its own. */
export function redisSecretKeyCase(fixture: Fixture, limits: SharedLimits): GatewayCase {
  return {
    name: '(c) secret key, Redis',
    target: TARGETS.redis,
    credential: 'secret key',
    env: {},
    script: fixture.scripts.secret,
    prepare: (url) => sanityCheck(url, fixture.first),
    options: limits.counted,
    redis: true,
  };
}

/** (c) with a token, in a gateway of its own. */
export function redisTokenCase(fixture: Fixture, limits: SharedLimits): GatewayCase {
  return {
    ...redisSecretKeyCase(fixture, limits),
    name: '(c) token, Redis',
    credential: 'token',
    script: fixture.scripts.token,
  };
}

/** (e): wrong secret keys, compared and answered 401 while the (large) failure budget lasts. */
export function wrongLeftCase(fixture: Fixture): GatewayCase {
  return {
    name: '(e) wrong key, budget left',
    target: TARGETS.wrongLeft,
    credential: WRONG_KEY,
    env: { TOLLGATE_AUTH_FAILURE_LIMIT: String(LARGE_FAILURE_BUDGET) },
    script: fixture.scripts.wrong,
    prepare: (url) => wrongKeyCheck(url, fixture.wrongKey),
    // `prepare` spent one.
    options: { expected: WRONG_CREDENTIAL, failureBudget: LARGE_FAILURE_BUDGET - 1 },
  };
}

/** (f): the same wrong keys once the default budget is spent, refused 429 before comparing. */
export function wrongSpentCase(fixture: Fixture): GatewayCase {
  return {
    name: '(f) wrong key, budget spent',
    target: TARGETS.wrongSpent,
    credential: WRONG_KEY,
    env: { TOLLGATE_AUTH_FAILURE_LIMIT: String(DEFAULT_AUTH_FAILURE_LIMIT) },
    script: fixture.scripts.wrong,
    prepare: (url) => spendBudget(url, fixture.wrongKey, DEFAULT_AUTH_FAILURE_LIMIT),
    options: { expected: BUDGET_SPENT },
  };
}

interface Started {
  readonly url: string;
  readonly gateway: Child;
}

/** A case's gateway of `build`, started and prepared; the caller stops it. */
async function startCase(
  fixture: Fixture,
  limits: SharedLimits,
  gatewayCase: GatewayCase,
  build: Build,
): Promise<Started> {
  const started = await fixture.startGateway(
    `${gatewayCase.target} (${build.label} build)`,
    { ...gatewayCase.env, ...(gatewayCase.redis === true ? limits.withRedis() : {}) },
    gatewayCase.redis === true ? 'shared' : 'memory',
    build,
  );
  try {
    await gatewayCase.prepare(started.url);
  } catch (error) {
    await started.gateway.stop();
    throw error;
  }
  return started;
}

function measureCase(
  fixture: Fixture,
  gatewayCase: GatewayCase,
  { url, gateway }: Started,
  measuredSeconds?: number,
  context?: string,
  options: MeasureOptions = gatewayCase.options,
): Promise<Row> {
  return fixture.bench.run(gatewayCase.target, gatewayCase.credential, url, gatewayCase.script, {
    ...options,
    durationSeconds: measuredSeconds,
    context,
    pid: gateway.process.pid,
  });
}

/** A case in a fresh gateway of `build`, stopped once measured. */
export async function runCase(
  fixture: Fixture,
  limits: SharedLimits,
  gatewayCase: GatewayCase,
  build: Build,
  measuredSeconds?: number,
  context?: string,
): Promise<Row> {
  const started = await startCase(fixture, limits, gatewayCase, build);
  try {
    return await measureCase(fixture, gatewayCase, started, measuredSeconds, context);
  } finally {
    await started.gateway.stop();
  }
}

/**
 * Both builds' gateways of a case under load at the same time (BENCH_BASELINE_CONCURRENT):
 * the machine's other load falls on both alike. Redis commands are not counted (one server).
 */
export async function runConcurrently(
  fixture: Fixture,
  limits: SharedLimits,
  gatewayCase: GatewayCase,
  other: Build,
  round: number,
  otherCase: GatewayCase = gatewayCase,
): Promise<{ mine: Row; theirs: Row }> {
  const { current, settings } = fixture;
  const mine = await startCase(fixture, limits, gatewayCase, current);
  const theirs = await startCase(fixture, limits, otherCase, other).catch(
    async (error: unknown) => {
      await mine.gateway.stop();
      throw error;
    },
  );
  const { redisPort: _counted, ...options } = gatewayCase.options;
  const { redisPort: _alsoCounted, ...otherOptions } = otherCase.options;
  const context = (build: Build): string =>
    `${build.label} build, both at once, round ${round} of ${settings.rounds}`;
  try {
    const [mineRow, theirsRow] = await Promise.all([
      measureCase(fixture, gatewayCase, mine, settings.roundSeconds, context(current), options),
      measureCase(fixture, otherCase, theirs, settings.roundSeconds, context(other), otherOptions),
    ]);
    return { mine: mineRow, theirs: theirsRow };
  } finally {
    await Promise.all([mine.gateway.stop(), theirs.gateway.stop()]);
  }
}
