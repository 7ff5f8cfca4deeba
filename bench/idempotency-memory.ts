import { randomBytes } from 'node:crypto';
import { IdempotencyRule } from '../lib/core/idempotency';
import type { RequestFacts } from '../lib/core/facts';
import { MemoryIdempotencyStore } from '../lib/idempotency/store';
import type { AuthContext } from '../lib/types';

/**
 * The process memory of a full in-memory idempotency store: `MemoryIdempotencyStore` at its
 * defaults (100 000 records, 64 Mi characters) filled through the rule itself, as the gateway
 * does, with answered keys: each a first use of a new key (claim), then its answer kept
 * (`complete`), a `201` JSON answer of `IDEM_ANSWER_BYTES` (200) bytes. Keys are spread over 1,000
 * accounts. Prints RSS and heap used before and after (each after a full collection), per record,
 * and what the next new key gets. Run: `npm run build && node --expose-gc
 * dist/bench/idempotency-memory.js` (IDEM_RECORDS, IDEM_ANSWER_BYTES to change the fill).
 */

const RECORDS = Number(process.env.IDEM_RECORDS ?? 100_000);
const ANSWER_BYTES = Number(process.env.IDEM_ANSWER_BYTES ?? 200);
const ACCOUNTS = 1000;

function at<T>(list: readonly T[], index: number): T {
  const value = list[index];
  if (value === undefined) throw new Error(`no item ${index}`);
  return value;
}

function collect(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with node --expose-gc');
  gc();
  gc();
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/** A JSON payout answer of exactly `bytes` bytes. */
function answerOf(index: number, bytes: number): Buffer {
  const head = {
    id: `po_${index.toString(36).padStart(12, '0')}`,
    status: 'pending',
    amount: 1250,
  };
  const text = JSON.stringify({ ...head, currency: 'EUR', note: '' });
  const pad = Math.max(0, bytes - text.length);
  return Buffer.from(JSON.stringify({ ...head, currency: 'EUR', note: 'x'.repeat(pad) }));
}

async function main(): Promise<void> {
  const store = new MemoryIdempotencyStore();
  const rule = new IdempotencyRule({
    secret: randomBytes(48),
    store,
    ttlSeconds: 86_400,
    maxAnswerBytes: 65_536,
  });
  const rawBody = Buffer.from(
    JSON.stringify({ amount: 1250, currency: 'EUR', destination: 'wal_bench_destination' }),
  );
  const auths: AuthContext[] = Array.from({ length: ACCOUNTS }, (_, index) => ({
    accountId: `acct_bench_${index}`,
    keyId: `key_bench_${index}`,
    role: 'level-2',
    credential: 'secret',
  }));
  const facts = (key: string): RequestFacts => ({
    method: 'POST',
    path: '/api/v1/payouts/',
    originalUrl: '/api/v1/payouts/',
    headersDistinct: { 'idempotency-key': [key] },
    rawBody,
  });
  const keyOf = (index: number): string => `${index.toString(16).padStart(8, '0')}-bench-key`;
  collect();
  const before = process.memoryUsage();
  const started = performance.now();
  for (let index = 0; index < RECORDS; index++) {
    const auth = at(auths, index % ACCOUNTS);
    const step = await rule.check(facts(keyOf(index)), '/api/v1/payouts/', 'optional', auth);
    if (step?.kind !== 'claimed') {
      throw new Error(`key ${index}: ${step?.kind ?? 'no step'} instead of a claim`);
    }
    const body = answerOf(index, ANSWER_BYTES);
    await step.claim.complete({
      kind: 'answer',
      status: 201,
      contentType: 'application/json',
      body,
    });
  }
  const fillMs = performance.now() - started;
  collect();
  const after = process.memoryUsage();
  const sealedCharacters = (store as unknown as { characters: number }).characters;
  const next = await rule.check(
    facts('one-more-key'),
    '/api/v1/payouts/',
    'optional',
    at(auths, 0),
  );
  const replay = await rule.check(facts(keyOf(0)), '/api/v1/payouts/', 'optional', at(auths, 0));
  const perRecord = (after.rss - before.rss) / RECORDS;
  const heapPerRecord = (after.heapUsed - before.heapUsed) / RECORDS;
  const lines = [
    `- ${store.size.toLocaleString('en-US')} records of ${ANSWER_BYTES}-byte answers in ${(fillMs / 1000).toFixed(1)} s; ${sealedCharacters.toLocaleString('en-US')} characters held (${(sealedCharacters / RECORDS).toFixed(0)} a record, bound ${(64 * 2 ** 20).toLocaleString('en-US')})`,
    `- RSS ${mib(before.rss)} before, ${mib(after.rss)} full: +${mib(after.rss - before.rss)} (${perRecord.toFixed(0)} B a record)`,
    `- heap used ${mib(before.heapUsed)} before, ${mib(after.heapUsed)} full: +${mib(after.heapUsed - before.heapUsed)} (${heapPerRecord.toFixed(0)} B a record); external +${mib(after.external - before.external)}`,
    `- the next new key: ${next?.kind === 'refused' ? `refused ${next.error.status} ${next.error.code}` : String(next?.kind)}; a replay of the first key: ${replay?.kind ?? 'none'}`,
  ];
  console.log(lines.join('\n'));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
