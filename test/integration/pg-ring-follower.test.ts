import { MessageChannel, type MessagePort } from 'node:worker_threads';
import { Pool } from 'pg';
import type { KeyRecord } from '../../lib';
import type { PgKeyStore } from '../../lib/entry/postgres';
import {
  noteUsesElsewhere,
  openSharedPgKeyStore,
  type PackedTable,
  RingBroadcast,
  RingFollower,
  type RingFollowerStart,
  type RingNews,
} from '../../lib/internal';
import { FULL_LOAD_ROWS } from '../../lib/keys/pg-key-store';
import { migrate } from '../../lib/keys/pg-schema';
import { GATEWAY_LIMIT_SCOPES } from '../../gateway/keys-cli/limit-scopes';
import { describeWithPostgres, startTestPostgres, type TestPostgres } from '../helpers/postgres';

/**
 * A thread following the database key store's ring (`RingFollower`) holds the same keys as the
 * store, change after change: the news crosses a real `MessageChannel`, as between threads, so the
 * rows arrive cloned (their digests as plain `Uint8Array`s, the base in shared memory).
 */

/** The store's broadcast, posted on `port`; it counts the bases and keeps the last one. */
function broadcastOn(port: MessagePort): {
  broadcast: RingBroadcast;
  bases: () => number;
  table: () => PackedTable | undefined;
  batches: () => number;
} {
  let bases = 0;
  let batches = 0;
  let table: PackedTable | undefined;
  const broadcast = new RingBroadcast((news) => {
    if (news.kind === 'base') {
      bases++;
      batches = 1;
      table = news.table;
    } else if (news.kind === 'changes') {
      batches++;
    }
    port.postMessage(news);
  });
  return { broadcast, bases: () => bases, table: () => table, batches: () => batches };
}

/** A follower fed from `port`, started from a clone of `start` (as `workerData` is). */
function follow(port: MessagePort, start: RingFollowerStart): RingFollower {
  const follower = new RingFollower(structuredClone(start));
  port.on('message', (news: RingNews) => {
    follower.hear(news);
  });
  return follower;
}

/** A record as plain, comparable data. */
function plain(record: KeyRecord | undefined): unknown {
  if (record === undefined) return undefined;
  return {
    id: record.id,
    accountId: record.accountId,
    role: record.role,
    publishableKey: record.publishableKey,
    secret: Buffer.from(record.secretKeySha256).toString('hex'),
    revoked: record.revoked,
    expiresAt: record.expiresAt,
    whitelist: record.ipWhitelist?.entries(),
    limits: record.limits,
    permissions: record.permissions === undefined ? undefined : [...record.permissions].sort(),
  };
}

function everyKey(store: { keyRecords(): Iterable<KeyRecord> }): unknown[] {
  return [...store.keyRecords()]
    .sort((a, b) => (a.id < b.id ? -1 : 1))
    .map((record) => plain(record));
}

async function within(timeoutMs: number, check: () => boolean): Promise<void> {
  const start = performance.now();
  while (!check()) {
    if (performance.now() - start > timeoutMs) throw new Error(`not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describeWithPostgres('the database ring followed by another thread', () => {
  let server: TestPostgres;
  let url: string;
  let pool: Pool;
  let store: PgKeyStore;
  let feed: ReturnType<typeof broadcastOn>;
  let follower: RingFollower;
  const ports: MessagePort[] = [];
  /** Secret keys made so far, by key id. */
  const secrets = new Map<string, string>();

  /** Waits until the follower is at the store's version, then compares every key and lookup. */
  const sameRing = async (who: RingFollower = follower): Promise<void> => {
    await within(5000, () => who.state().version === store.state().version);
    expect(who.size).toBe(store.size);
    expect(everyKey(who)).toEqual(everyKey(store));
    for (const [id, secret] of secrets) {
      expect(plain(who.peekBySecretKey(secret))).toEqual(plain(store.peekBySecretKey(secret)));
      expect(plain(who.findById(id))).toEqual(plain(store.findById(id)));
    }
  };

  beforeAll(async () => {
    server = await startTestPostgres();
    url = await server.createDatabase('follower');
    pool = new Pool({ connectionString: url });
    await migrate(pool);
    await pool.query(
      "INSERT INTO accounts (id, ip_whitelist) VALUES ('acct_before', ARRAY['10.0.0.0/8'])",
    );
    const channel = new MessageChannel();
    ports.push(channel.port1, channel.port2);
    feed = broadcastOn(channel.port1);
    store = await openSharedPgKeyStore(
      { connectionString: url, queryTimeoutMs: 2000, limitScopes: GATEWAY_LIMIT_SCOPES },
      feed.broadcast,
    );
    follower = follow(channel.port2, feed.broadcast.start(store));
  }, 60_000);

  afterAll(async () => {
    for (const port of ports) port.close();
    await store.close();
    await pool.end();
    server.destroy();
  });

  it('starts from the same base, held in shared memory', async () => {
    const table = feed.table() as unknown as Record<string, unknown>;
    const arrays = Object.values(table).filter((value) => ArrayBuffer.isView(value));
    expect(arrays.length).toBeGreaterThan(0);
    // By its tag: the test's realm has a SharedArrayBuffer of its own.
    for (const array of arrays) {
      expect(Object.prototype.toString.call(array.buffer)).toBe('[object SharedArrayBuffer]');
    }
    expect(follower.state()).toMatchObject({ status: 'ready', keys: 0 });
    await sameRing();
  });

  it('holds every change as the store does, one write after another', async () => {
    const made = async (accountId: string, options = {}): Promise<string> => {
      const key = await store.createKey(accountId, options);
      secrets.set(key.id, key.secretKey);
      return key.id;
    };
    await store.createAccount('acct_a', ['192.0.2.0/24'], { payments: 30 });
    await store.createAccount('acct_b');
    const a1 = await made('acct_a', { role: 'level-2' });
    const a2 = await made('acct_a', { permissions: ['payments:read'] });
    const b1 = await made('acct_b');
    const before1 = await made('acct_before');
    await sameRing();

    await store.revoke(a1);
    await sameRing();
    expect(follower.findById(a1)?.revoked).toBe(true);

    const rolled = await store.roll(a2, 60);
    secrets.set(rolled.key.id, rolled.key.secretKey);
    await store.setIpWhitelist('acct_a', ['198.51.100.7']);
    await store.setLimits('acct_a', null);
    await store.setRole(b1, 'level-3');
    await store.setPermissions(b1, ['payouts:write']);
    await sameRing();
    expect(follower.findById(a2)?.ipWhitelist?.entries()).toEqual(['198.51.100.7/32']);

    // Rows deleted and written by hand, past the store.
    await pool.query('DELETE FROM keys WHERE id = $1', [b1]);
    await pool.query('DELETE FROM keys WHERE id = $1', [before1]);
    await pool.query("DELETE FROM accounts WHERE id = 'acct_before'");
    await pool.query(
      "UPDATE accounts SET ip_whitelist = ARRAY['not an address'] WHERE id = 'acct_a'",
    );
    secrets.delete(b1);
    secrets.delete(before1);
    await store.sync();
    await sameRing();
    expect(follower.findById(rolled.key.id)?.revoked).toBe(true);
  });

  it('a follower started late, from the base and the batches since, holds the same ring', async () => {
    const channel = new MessageChannel();
    ports.push(channel.port1, channel.port2);
    expect(feed.batches()).toBeGreaterThan(1);
    const late = follow(channel.port2, feed.broadcast.start(store));
    await sameRing(late);
  });

  it('follows a new base when the store rebuilds it, and the changes made meanwhile', async () => {
    const before = feed.bases();
    await pool.query('INSERT INTO accounts (id) VALUES ($1)', ['acct_bulk']);
    await pool.query(
      `INSERT INTO keys (id, account_id, role, publishable_key, secret_sha256)
       SELECT 'bulk_' || n, 'acct_bulk', 'level-1', 'pk_test_bulk_' || lpad(n::text, 12, '0'),
              sha256(convert_to('bulk-secret-' || n, 'UTF8'))
       FROM generate_series(1, $1::int) AS n`,
      [FULL_LOAD_ROWS + 10],
    );
    await store.sync();
    await within(60_000, () => feed.bases() > before && store.size >= FULL_LOAD_ROWS + 10);
    await store.createAccount('acct_after');
    const late = await store.createKey('acct_after');
    secrets.set(late.id, late.secretKey);
    await sameRing();
    expect(follower.findBySecretKey('bulk-secret-7')?.id).toBe('bulk_7');
  }, 90_000);

  it('hands the keys it served to the store, which writes their last use', async () => {
    const [id, secret] = [...secrets].find(([keyId]) => !store.findById(keyId)?.revoked) ?? [];
    if (id === undefined || secret === undefined) throw new Error('no key in force');
    // The lookups of the comparisons above, in both threads: written, then forgotten.
    follower.takeUses();
    await store.flushLastUsed();
    await pool.query('UPDATE keys SET last_used_at = NULL');
    expect(follower.takeUses()).toEqual([]);
    expect(follower.findBySecretKey(secret)?.id).toBe(id);
    const uses = follower.takeUses();
    expect(uses.map(([keyId]) => keyId)).toEqual([id]);
    expect(follower.takeUses()).toEqual([]);
    noteUsesElsewhere(store, structuredClone(uses));
    expect(await store.flushLastUsed()).toBe(1);
    const { rows } = await pool.query<{ id: string; age: number }>(
      `SELECT id, extract(epoch FROM now() - last_used_at)::float8 AS age
       FROM keys WHERE last_used_at IS NOT NULL`,
    );
    expect(rows.map((row) => row.id)).toEqual([id]);
    expect(rows[0]?.age).toBeGreaterThanOrEqual(0);
    expect(rows[0]?.age).toBeLessThan(5);
  });
});
