import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { generateKey, KeyRing, sha256, TokenService } from '../lib';
import { SUCCESS } from './expect';
import type { Bench, MeasureOptions } from './harness';
import { PAYOUT_BODY, PAYOUTS_PATH } from './idempotency';
import { FORWARD_AUTH_HEADERS, FORWARD_AUTH_PATH, WALLETS_PATH, WHITELIST } from './labels';
import { type Child, freePort, startChild, versionOf, waitUntil } from './processes';
import { type Build, DIST, type Group, log, REDIS_GROUPS, type Settings } from './settings';
import { writeRotatingScript } from './wrk';

/** What every case group shares: accounts, keys files, wrk scripts, the upstreams, starters. */

export interface BenchAccount {
  readonly accountId: string;
  readonly keyId: string;
  readonly publishableKey: string;
  readonly secretKey: string;
}

type Headers = readonly Readonly<Record<string, string>>[];

export interface Fixture {
  readonly settings: Settings;
  readonly groups: ReadonlySet<Group>;
  readonly bench: Bench;
  /** This build (BENCH_NODE_FLAGS, BENCH_GATEWAY_ENV). */
  readonly current: Build;
  readonly accounts: readonly BenchAccount[];
  readonly first: BenchAccount;
  /** A plausible secret key (shape and checksum right) that no account holds. */
  readonly wrongKey: string;
  readonly keysFile: string;
  /** The same accounts with level-2 keys (POST payouts needs level-2), with `idempotency`. */
  readonly payoutKeysFile: string;
  /** wrk scripts rotating through the accounts (or the wrong keys). */
  readonly scripts: {
    readonly upstream: string;
    readonly secret: string;
    readonly token: string;
    readonly wrong: string;
    readonly forwardAuth: string;
  };
  readonly payoutScripts: {
    readonly noKey: string;
    readonly unique: string;
    readonly replay: string;
  };
  /** The headers the gateway sends upstream, per account. */
  readonly upstreamHeaders: Headers;
  /** `Authorization: Bearer <secret key>`, per account. */
  readonly secretHeaders: Headers;
  readonly upstreamUrl: string;
  /** The payouts' upstream answers 201 and keeps nothing; the held one holds each answer 1 s. */
  readonly payoutUpstreamUrl: string;
  readonly heldUpstreamUrl: string;
  /** A gateway of `build` on a free loopback port, once /healthz reports `limits`. */
  startGateway(
    name: string,
    env: Record<string, string>,
    limits: string,
    build?: Build,
    probe?: boolean,
  ): Promise<{ url: string; gateway: Child }>;
  /** A bench process of `bench/` on a free loopback port, once `GET readyPath` answers. */
  startBenchServer(
    name: string,
    script: string,
    env: Record<string, string>,
    readyPath?: string,
    probe?: boolean,
  ): Promise<{ url: string; child: Child }>;
}

function makeAccounts(count: number): BenchAccount[] {
  return Array.from({ length: count }, (_, index) => ({
    accountId: `acct_bench_${index}`,
    keyId: `key_bench_${index}`,
    publishableKey: generateKey('publishable', 'test'),
    secretKey: generateKey('secret', 'test'),
  }));
}

function keysDocument(accounts: readonly BenchAccount[], role = 'level-1'): unknown {
  return {
    accounts: accounts.map((account) => ({
      id: account.accountId,
      ipWhitelist: WHITELIST,
      keys: [
        {
          id: account.keyId,
          publishableKey: account.publishableKey,
          secretKeySha256: sha256(account.secretKey).toString('hex'),
          role,
        },
      ],
    })),
  };
}

/** Writes the keys files and wrk scripts into `dir` and starts the upstreams. */
export async function prepareFixture(
  bench: Bench,
  settings: Settings,
  groups: ReadonlySet<Group>,
  dir: string,
  current: Build,
): Promise<Fixture> {
  const accounts = makeAccounts(settings.accounts);
  const document = keysDocument(accounts);
  KeyRing.fromDocument(document, 'bench keys');
  const keysFile = path.join(dir, 'keys.json');
  writeFileSync(keysFile, JSON.stringify(document), { mode: 0o600 });
  const tokenSecret = randomBytes(48).toString('base64');
  // Minted with the kit's TokenService and the gateway's secret: what the exchange returns.
  const tokens = new TokenService({ secret: tokenSecret });
  // Plausible secret keys (shape and checksum right) that no account holds: compared, refused.
  const wrongKeys = Array.from({ length: settings.accounts }, () => generateKey('secret', 'test'));
  const scripts = {
    upstream: path.join(dir, 'upstream.lua'),
    secret: path.join(dir, 'secret.lua'),
    token: path.join(dir, 'token.lua'),
    wrong: path.join(dir, 'wrong.lua'),
    forwardAuth: path.join(dir, 'forward-auth.lua'),
  };
  const upstreamHeaders = accounts.map((account) => ({
    'X-Gateway-Account-Id': account.accountId,
    'X-Gateway-Key-Id': account.keyId,
    'X-Gateway-Role': 'level-1',
    'X-Gateway-Credential': 'secret',
  }));
  const secretHeaders = accounts.map((account) => ({
    Authorization: `Bearer ${account.secretKey}`,
  }));
  writeRotatingScript(scripts.upstream, WALLETS_PATH, upstreamHeaders);
  writeRotatingScript(scripts.secret, WALLETS_PATH, secretHeaders);
  writeRotatingScript(
    scripts.token,
    WALLETS_PATH,
    accounts.map((account) => ({
      Authorization: `Bearer ${tokens.issue({ id: account.keyId, accountId: account.accountId, role: 'level-1' }).token}`,
    })),
  );
  writeRotatingScript(
    scripts.wrong,
    WALLETS_PATH,
    wrongKeys.map((key) => ({ Authorization: `Bearer ${key}` })),
    { countStatuses: true },
  );
  // What nginx's auth_request sends (test/helpers/forward-auth.ts), for each account in turn.
  writeRotatingScript(
    scripts.forwardAuth,
    FORWARD_AUTH_PATH,
    secretHeaders.map((headers) => ({ ...headers, ...FORWARD_AUTH_HEADERS })),
  );
  // The idempotency cases: the same accounts with level-2 keys (POST payouts needs level-2).
  const payoutKeysFile = path.join(dir, 'keys-level-2.json');
  const payoutScripts = {
    noKey: path.join(dir, 'payouts.lua'),
    unique: path.join(dir, 'payouts-unique-keys.lua'),
    replay: path.join(dir, 'payouts-replays.lua'),
  };
  if (groups.has('idempotency')) {
    writeFileSync(payoutKeysFile, JSON.stringify(keysDocument(accounts, 'level-2')), {
      mode: 0o600,
    });
    const post = { method: 'POST', body: PAYOUT_BODY, countStatuses: true } as const;
    writeRotatingScript(payoutScripts.noKey, PAYOUTS_PATH, secretHeaders, post);
    writeRotatingScript(payoutScripts.unique, PAYOUTS_PATH, secretHeaders, {
      ...post,
      idempotencyKeys: 'unique',
    });
    writeRotatingScript(payoutScripts.replay, PAYOUTS_PATH, secretHeaders, {
      ...post,
      idempotencyKeys: 'per-set',
    });
  }
  const first = accounts[0];
  const wrongKey = wrongKeys[0];
  if (first === undefined || wrongKey === undefined) throw new Error('no accounts');

  // The gateways' upstream, measured directly only with `direct`.
  const upstreamPort = await freePort();
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
  const upstream = bench.node('stub upstream', 'gateway/stub-upstream-server.js', {
    PORT: String(upstreamPort),
    HOST: '127.0.0.1',
  });
  await waitUntil(upstream, `${upstreamUrl}/`, (reply) => reply.status > 0);
  // The payouts' upstream answers 201 and keeps nothing; the held one holds each answer 1 s.
  let payoutUpstreamUrl = upstreamUrl;
  let heldUpstreamUrl = upstreamUrl;
  if (groups.has('idempotency')) {
    for (const [name, delay] of [
      ['sink upstream (payouts)', '0'],
      ['sink upstream, held 1 s', '1000'],
    ] as const) {
      const port = await freePort();
      const sink = bench.node(name, 'bench/sink-upstream.js', {
        PORT: String(port),
        SINK_DELAY_MS: delay,
      });
      await waitUntil(sink, `http://127.0.0.1:${port}/`, (reply) => reply.status > 0);
      if (delay === '0') payoutUpstreamUrl = `http://127.0.0.1:${port}`;
      else heldUpstreamUrl = `http://127.0.0.1:${port}`;
    }
  }

  const gatewayEnv = {
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    TOLLGATE_KEYS_FILE: keysFile,
    TOLLGATE_TOKEN_SECRET: tokenSecret,
    TOLLGATE_UPSTREAM_URL: upstreamUrl,
  };
  return {
    settings,
    groups,
    bench,
    current,
    accounts,
    first,
    wrongKey,
    keysFile,
    payoutKeysFile,
    scripts,
    payoutScripts,
    upstreamHeaders,
    secretHeaders,
    upstreamUrl,
    payoutUpstreamUrl,
    heldUpstreamUrl,
    async startGateway(name, env, limits, build = current, probe = false) {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const gateway = bench.node(
        name,
        'gateway/server.js',
        { ...gatewayEnv, ...build.env, ...env, PORT: String(port) },
        build.dist,
        { probe, nodeFlags: build.nodeFlags },
      );
      await waitUntil(
        gateway,
        `${url}/healthz`,
        (reply) => reply.status === 200 && reply.body.includes(`"${limits}"`),
      );
      return { url, gateway };
    },
    async startBenchServer(name, script, env, readyPath = WALLETS_PATH, probe = false) {
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const child = bench.node(name, script, { ...env, PORT: String(port) }, DIST, { probe });
      await waitUntil(child, `${url}${readyPath}`, (reply) => reply.status > 0);
      return { url, child };
    },
  };
}

async function redisAnswers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.setTimeout(500);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString().startsWith('+PONG'));
    });
    socket.once('error', () => {
      resolve(false);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

export interface Redis {
  readonly url: string;
  /** Where it comes from, for the report. */
  readonly origin: string;
  /** The port of the bench's own redis-server (its commands are counted). */
  readonly port?: number;
}

/** A Redis for the run: BENCH_REDIS_URL, else a redis-server started on a free loopback port. */
async function obtainRedis(bench: Bench): Promise<Redis | undefined> {
  const fromEnv = process.env.BENCH_REDIS_URL;
  if (fromEnv !== undefined && fromEnv !== '') {
    // INFO commandstats counts every client of a shared server: no command counts then.
    return { url: fromEnv, origin: 'BENCH_REDIS_URL (no command counts: a shared server)' };
  }
  const version = versionOf('redis-server');
  if (version === undefined) return undefined;
  const port = await freePort();
  const child = startChild(
    'redis-server',
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { PATH: process.env.PATH ?? '' },
  );
  bench.track(child);
  const deadline = Date.now() + 5000;
  while (!(await redisAnswers(port))) {
    if (Date.now() > deadline) throw new Error(`redis-server did not start:\n${child.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const shortVersion = /v=(\S+)/.exec(version)?.[1] ?? version;
  return {
    url: `redis://127.0.0.1:${port}`,
    origin: `redis-server ${shortVersion} started for this run`,
    port,
  };
}

/** The Redis of the Redis cases, when one is there. */
export interface SharedLimits {
  readonly redis: Redis | undefined;
  /** A gateway's Redis settings: REDIS_URL and a fresh key prefix (none without Redis). */
  readonly withRedis: () => Record<string, string>;
  /** Measured with the Redis commands counted (on the bench's own redis-server). */
  readonly counted: MeasureOptions;
}

/** A Redis when a selected group needs one. */
export async function sharedLimits(fixture: Fixture): Promise<SharedLimits> {
  const wanted = REDIS_GROUPS.some((group) => fixture.groups.has(group));
  const redis = wanted ? await obtainRedis(fixture.bench) : undefined;
  if (redis === undefined && wanted) {
    log('no redis-server on PATH and no BENCH_REDIS_URL: the Redis cases are skipped');
  }
  return {
    redis,
    withRedis: (): Record<string, string> =>
      redis === undefined
        ? {}
        : {
            REDIS_URL: redis.url,
            TOLLGATE_REDIS_PREFIX: `tollgate-bench:${randomBytes(6).toString('hex')}:`,
          },
    counted: { expected: SUCCESS, redisPort: redis?.port },
  };
}
