import { randomBytes } from 'node:crypto';
import { closeSync, openSync, writeSync } from 'node:fs';
import { generateKey, sha256 } from '../../lib';

/**
 * The bench's key population: `count` accounts of one key each. A quarter of the accounts have
 * no whitelist, half share one of 100 lists, a quarter have a list of their own (a merchant's own
 * servers); every list holds 127.0.0.1, where the bench's requests come from. `sample` keys,
 * spread evenly over the population, keep their secret: the bench's traffic uses them.
 */

export interface BenchKey {
  readonly index: number;
  readonly accountId: string;
  readonly keyId: string;
  readonly publishableKey: string;
  readonly secretKey: string;
}

export interface BenchRow {
  readonly accountId: string;
  readonly keyId: string;
  readonly publishableKey: string;
  readonly digest: Buffer;
  readonly whitelist: readonly string[] | undefined;
}

const SHARED_LISTS = 100;

export function whitelistOf(index: number): readonly string[] | undefined {
  switch (index % 4) {
    case 0:
      return undefined;
    case 3:
      return ['127.0.0.1', `10.${(index >> 16) & 255}.${(index >> 8) & 255}.${index & 255}/32`];
    default: {
      const list = index % SHARED_LISTS;
      return ['127.0.0.1', `198.51.100.${list}`, `2001:db8:${list.toString(16)}::/48`];
    }
  }
}

/** The population, row by row, and the sampled keys whose secrets the traffic sends. */
export function* population(count: number, sample: number): Generator<BenchRow, void, undefined> {
  const every = Math.max(1, Math.floor(count / sample));
  for (let index = 0; index < count; index++) {
    const sampled = index % every === 0;
    yield {
      accountId: `acct_${index}`,
      keyId: `key_${index}`,
      publishableKey: generateKey('publishable', 'test'),
      digest: sampled ? sha256(sampledSecret(index)) : randomBytes(32),
      whitelist: whitelistOf(index),
    };
  }
}

/** The sampled keys' secrets are derived from the run's seed and their index. */
let seed = randomBytes(8).toString('hex');
export function sampledSecret(index: number): string {
  return `sk_bench_${seed}_${index.toString().padStart(10, '0')}`;
}
export function reseed(): void {
  seed = randomBytes(8).toString('hex');
}

export function sampledIndexes(count: number, sample: number): number[] {
  const every = Math.max(1, Math.floor(count / sample));
  const indexes: number[] = [];
  for (let index = 0; index < count; index += every) indexes.push(index);
  return indexes;
}

/**
 * Writes the keys file (`{"accounts": [...]}`) by streaming accounts, so a million keys never sit
 * in one string; `revoked` names a key index written with `"revoked": true`. Returns its byte size.
 */
export function writeKeysFile(file: string, rows: Iterable<BenchRow>, revoked?: number): number {
  const fd = openSync(file, 'w');
  let bytes = 0;
  let chunk = '{"accounts":[\n';
  let first = true;
  let index = 0;
  const flush = (): void => {
    bytes += writeSync(fd, chunk);
    chunk = '';
  };
  for (const row of rows) {
    const key: Record<string, unknown> = {
      id: row.keyId,
      publishableKey: row.publishableKey,
      secretKeySha256: row.digest.toString('hex'),
      role: 'level-2',
    };
    if (index === revoked) key.revoked = true;
    const account: Record<string, unknown> = { id: row.accountId };
    if (row.whitelist !== undefined) account.ipWhitelist = row.whitelist;
    account.keys = [key];
    chunk += `${first ? '' : ',\n'}${JSON.stringify(account)}`;
    first = false;
    index++;
    if (chunk.length > 1 << 20) flush();
  }
  chunk += '\n]}\n';
  flush();
  closeSync(fd);
  return bytes;
}
