import { execFileSync } from 'node:child_process';
import {
  closeSync,
  constants,
  mkdtempSync,
  openSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { generateKey } from '../../lib/model/key-format';
import { sha256 } from '../../lib/keys/key-store';
import { distScript, httpRequest, type HttpResult, NodeProcess } from '../helpers/process';
import {
  acquireTestRedis,
  describeWithRedis,
  freePort,
  type TestRedis,
  uniquePrefix,
} from '../helpers/redis';

/**
 * Key reloads against the real process (`node dist/gateway/server.js`): reloads are
 * serialised and coalesced, so a SIGHUP during a reload schedules exactly one more; the file read
 * last is the one in force; and every request in flight is answered, however many signals arrive.
 *
 * The keys file in force at first is big (5,000 keys, about 1.2 MB, every account with a
 * whitelist), so that reading it takes long enough for the next SIGHUP to land during the read.
 * That race depends on timing, so it is run three times, and once more made deterministic: the big
 * file's content is fed through a FIFO, which holds the older read open until the newer file is in.
 * Each scenario runs on a gateway counting rate limits in memory and on one sharing a real Redis
 * (its own key prefix; the shared Redis is never flushed).
 */

const TOKEN_SECRET = 'key-reloads-test-secret-0123456789-abcdefghijkl';
const WALLETS = '/api/v1/wallets/';
const BIG_ACCOUNTS = 500;
const KEYS_PER_ACCOUNT = 10;
const BIG_KEY_COUNT = BIG_ACCOUNTS * KEYS_PER_ACCOUNT;
const WHITELIST = ['127.0.0.1', '203.0.113.0/24', '198.51.100.0/24', '10.0.0.0/8', '2001:db8::/32'];

interface KeyPair {
  readonly id: string;
  readonly publishableKey: string;
  readonly secretKey: string;
}

interface KeyEntry {
  readonly id: string;
  readonly publishableKey: string;
  readonly secretKeySha256: string;
  readonly role: string;
  readonly revoked: boolean;
}

function newKeyPair(id: string): KeyPair {
  return {
    id,
    publishableKey: generateKey('publishable', 'test'),
    secretKey: generateKey('secret', 'test'),
  };
}

function entry(pair: KeyPair, revoked = false): KeyEntry {
  return {
    id: pair.id,
    publishableKey: pair.publishableKey,
    secretKeySha256: sha256(pair.secretKey).toString('hex'),
    role: 'administrator',
    revoked,
  };
}

/**
 * 5,000 keys over 500 whitelisted accounts; `known` are the first keys of the first account.
 * Digests of fresh random secrets stand in for the other keys (only their shape is checked).
 */
function bigDocument(known: readonly KeyPair[]): string {
  const accounts = [];
  for (let a = 0; a < BIG_ACCOUNTS; a++) {
    const keys: KeyEntry[] = [];
    for (let k = 0; k < KEYS_PER_ACCOUNT; k++) {
      const pair = a === 0 ? known[k] : undefined;
      keys.push(entry(pair ?? newKeyPair(`key_${a}_${k}`)));
    }
    accounts.push({ id: `acct_${a}`, ipWhitelist: WHITELIST, keys });
  }
  return JSON.stringify({ accounts });
}

/** The small file: `revoked` now revoked, `valid` still valid. */
function smallDocument(revoked: KeyPair, valid: KeyPair): string {
  return `${JSON.stringify(
    {
      accounts: [
        { id: 'acct_0', ipWhitelist: WHITELIST, keys: [entry(revoked, true), entry(valid)] },
      ],
    },
    null,
    2,
  )}\n`;
}
const SMALL_KEY_COUNT = 2;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Writes a temporary file in the same directory, then renames it over `file`. */
function replaceAtomically(file: string, text: string): void {
  const temporary = `${file}.${process.pid}.${Date.now()}.tmp`;
  writeFileSync(temporary, text);
  renameSync(temporary, file);
}

/** One request's answer; `'error'` when the connection failed, `undefined` after `timeoutMs`. */
async function within(
  request: Promise<HttpResult>,
  timeoutMs: number,
): Promise<HttpResult | 'error' | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => {
      resolve(undefined);
    }, timeoutMs);
  });
  try {
    return await Promise.race([request.catch(() => 'error' as const), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Opens `fifo` for writing; resolves once a reader has it open, or `undefined` after `timeoutMs`
 * (then a reader of our own unblocks the pending open, and both ends are closed).
 */
async function openWriterWithin(fifo: string, timeoutMs: number): Promise<FileHandle | undefined> {
  const opening = open(fifo, 'w');
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => {
      resolve(undefined);
    }, timeoutMs);
  });
  const writer = await Promise.race([opening, timeout]);
  clearTimeout(timer);
  if (writer !== undefined) return writer;
  const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
  await (await opening).close();
  closeSync(reader);
  return undefined;
}

interface Mode {
  readonly label: string;
  readonly describe: jest.Describe;
  readonly shared: boolean;
}

const MODES: readonly Mode[] = [
  { label: 'counting in memory', describe, shared: false },
  { label: 'sharing Redis', describe: describeWithRedis, shared: true },
];

for (const mode of MODES) {
  mode.describe(`key reloads of the gateway process, ${mode.label}`, () => {
    const server = distScript('gateway/server.js');
    let testRedis: TestRedis | undefined;
    let directory: string;
    const running: NodeProcess[] = [];

    beforeAll(async () => {
      if (!mode.shared) return;
      testRedis = await acquireTestRedis();
      if (testRedis === undefined) throw new Error('describeWithRedis ran without a Redis');
    });
    afterAll(async () => {
      await testRedis?.close();
    });
    beforeEach(() => {
      directory = mkdtempSync(path.join(tmpdir(), 'tollgate-key-reloads-'));
    });
    afterEach(async () => {
      for (const child of running.splice(0)) await child.stop();
      rmSync(directory, { recursive: true, force: true });
    });

    const start = async (file: string): Promise<{ gateway: NodeProcess; port: number }> => {
      const port = await freePort();
      const gateway = new NodeProcess(server, [], {
        PORT: String(port),
        HOST: '127.0.0.1',
        TOLLGATE_KEYS_FILE: file,
        TOLLGATE_TOKEN_SECRET: TOKEN_SECRET,
        // Polling a revoked key counts failed authentications: keep the budget out of the way.
        TOLLGATE_AUTH_FAILURE_LIMIT: '100000',
        ...(testRedis === undefined
          ? {}
          : { REDIS_URL: testRedis.url, TOLLGATE_REDIS_PREFIX: uniquePrefix('key-reloads') }),
      });
      running.push(gateway);
      const started = await gateway.waitForEntry(
        (line) => line.event === 'gateway.started',
        0,
        15_000,
      );
      expect(started.rate_limits).toBe(mode.shared ? 'url' : 'memory');
      return { gateway, port };
    };

    const wallets = (port: number, pair: KeyPair): Promise<HttpResult> =>
      httpRequest({
        port,
        path: WALLETS,
        headers: { authorization: `Bearer ${pair.secretKey}` },
      });

    const reloadedCounts = (gateway: NodeProcess): unknown[] =>
      gateway
        .entries()
        .filter((line) => line.event === 'keys.reloaded')
        .map((line) => line.keys);

    const TRIALS = 3;

    it(`a SIGHUP during a slow reload schedules one more, and the file read last wins (${TRIALS} trials)`, async () => {
      const file = path.join(directory, 'keys.json');
      const revokedLater = newKeyPair('key_revoked_later');
      const stillValid = newKeyPair('key_still_valid');
      const big = bigDocument([revokedLater, stillValid]);
      expect(big.length).toBeGreaterThan(1_100_000);
      const small = smallDocument(revokedLater, stillValid);

      const outcomes: Record<string, unknown>[] = [];
      for (let trial = 1; trial <= TRIALS; trial++) {
        writeFileSync(file, big);
        const { gateway, port } = await start(file);
        expect((await wallets(port, revokedLater)).status).toBe(200);

        gateway.kill('SIGHUP');
        await sleep(2);
        replaceAtomically(file, small);
        gateway.kill('SIGHUP');

        // Within 2.5 s the revoked key is refused...
        const deadline = Date.now() + 2500;
        let firstRefusal: number | undefined;
        let lastStatus = 0;
        while (Date.now() < deadline) {
          lastStatus = (await wallets(port, revokedLater)).status;
          if (lastStatus === 401) {
            firstRefusal = lastStatus;
            break;
          }
          await sleep(50);
        }
        // ...and stays refused: no older, slower read lands after the newer one.
        const afterwards: number[] = [];
        for (let check = 0; check < 5; check++) {
          await sleep(250);
          afterwards.push((await wallets(port, revokedLater)).status);
        }
        const counts = reloadedCounts(gateway);
        outcomes.push({
          trial,
          revokedKeyWithin2500Ms: firstRefusal ?? lastStatus,
          revokedKeyAfterwards: afterwards,
          otherKey: (await wallets(port, stillValid)).status,
          lastReloadedKeys: counts[counts.length - 1],
          alive: gateway.running,
        });
        await gateway.stop();
      }
      expect(outcomes).toEqual(
        Array.from({ length: TRIALS }, (_, i) => ({
          trial: i + 1,
          revokedKeyWithin2500Ms: 401,
          revokedKeyAfterwards: [401, 401, 401, 401, 401],
          otherKey: 200,
          lastReloadedKeys: SMALL_KEY_COUNT,
          alive: true,
        })),
      );
    }, 60_000);

    it('a read held open past a newer SIGHUP does not win: the file read last is in force', async () => {
      // The same race made deterministic: the big file reaches the gateway through a FIFO put in
      // its place, so the older read lasts until the test lets it end, after the newer, small file
      // has been swapped in and signalled. Serialised reloads read the small file after it.
      const file = path.join(directory, 'keys.json');
      const revokedLater = newKeyPair('key_revoked_later');
      const stillValid = newKeyPair('key_still_valid');
      const big = bigDocument([revokedLater, stillValid]);
      writeFileSync(file, big);
      const { gateway, port } = await start(file);
      expect((await wallets(port, revokedLater)).status).toBe(200);
      const before = reloadedCounts(gateway).length;

      const fifo = path.join(directory, 'slow-read.fifo');
      execFileSync('mkfifo', [fifo]);
      renameSync(fifo, file);
      gateway.kill('SIGHUP');
      // Resolves once the gateway has opened the FIFO to read it.
      const writer = await openWriterWithin(file, 5000);
      expect(writer).toBeDefined();
      if (writer === undefined) return;
      try {
        replaceAtomically(file, smallDocument(revokedLater, stillValid));
        gateway.kill('SIGHUP');
        // Ample time for the newer read to end, where reloads run side by side.
        await sleep(400);
        await writer.writeFile(big);
      } finally {
        await writer.close();
      }

      const deadline = Date.now() + 2500;
      let status = 0;
      while (Date.now() < deadline) {
        status = (await wallets(port, revokedLater)).status;
        if (status === 401) break;
        await sleep(50);
      }
      const afterwards: number[] = [];
      for (let check = 0; check < 4; check++) {
        await sleep(250);
        afterwards.push((await wallets(port, revokedLater)).status);
      }
      const counts = reloadedCounts(gateway).slice(before);
      expect({
        revokedKeyWithin2500Ms: status,
        revokedKeyAfterwards: afterwards,
        otherKey: (await wallets(port, stillValid)).status,
        lastReloadedKeys: counts[counts.length - 1],
        alive: gateway.running,
      }).toEqual({
        revokedKeyWithin2500Ms: 401,
        revokedKeyAfterwards: [401, 401, 401, 401],
        otherKey: 200,
        lastReloadedKeys: SMALL_KEY_COUNT,
        alive: true,
      });
      // One read per SIGHUP at most: the held one, then exactly one more.
      expect(counts.length).toBeLessThanOrEqual(2);
    }, 30_000);

    it('answers every request (200) while 600 SIGHUPs arrive 25 ms apart, and stays up', async () => {
      const file = path.join(directory, 'keys.json');
      const known = [newKeyPair('key_storm_a'), newKeyPair('key_storm_b')];
      writeFileSync(file, bigDocument(known));
      const { gateway, port } = await start(file);
      for (const pair of known) expect((await wallets(port, pair)).status).toBe(200);

      const SIGNALS = 600;
      const SIGNAL_EVERY_MS = 25;
      const CLIENTS = 20;
      const REQUESTS = 300;
      const ANSWER_WITHIN_MS = 15_000;
      const period = SIGNALS * SIGNAL_EVERY_MS;

      const began = Date.now();
      const storm = (async () => {
        for (let signal = 0; signal < SIGNALS && gateway.running; signal++) {
          gateway.kill('SIGHUP');
          const next = began + (signal + 1) * SIGNAL_EVERY_MS;
          await sleep(Math.max(0, next - Date.now()));
        }
      })();

      // 20 clients, each sending its share of the 300 requests spread over the storm; a client
      // does not wait for one answer before sending its next request (each gets 15 s).
      const perClient = REQUESTS / CLIENTS;
      const spacing = period / REQUESTS;
      const answers: Promise<HttpResult | 'error' | undefined>[] = [];
      const clients = Array.from({ length: CLIENTS }, async (_, client) => {
        for (let n = 0; n < perClient; n++) {
          const index = n * CLIENTS + client;
          await sleep(Math.max(0, began + index * spacing - Date.now()));
          answers.push(within(wallets(port, known[index % known.length]!), ANSWER_WITHIN_MS));
        }
      });
      await Promise.all(clients);
      await storm;
      const settled = await Promise.all(answers);

      const summary = (results: readonly (HttpResult | 'error' | undefined)[]) => {
        const counts: Record<string, number> = {};
        for (const result of results) {
          const key =
            result === undefined
              ? 'no answer within 15 s'
              : result === 'error'
                ? 'connection error'
                : String(result.status);
          counts[key] = (counts[key] ?? 0) + 1;
        }
        return counts;
      };
      expect(settled).toHaveLength(REQUESTS);
      expect(summary(settled)).toEqual({ '200': REQUESTS });
      expect(gateway.running).toBe(true);
      // Still answering after the storm, with the file's keys in force.
      expect((await wallets(port, known[0]!)).status).toBe(200);
      const counts = reloadedCounts(gateway);
      expect(counts.length).toBeGreaterThan(0);
      expect(counts[counts.length - 1]).toBe(BIG_KEY_COUNT);
    }, 45_000);
  });
}
