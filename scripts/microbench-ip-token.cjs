'use strict';

/**
 * Micro-benchmark of the per-request client-address, whitelist and token work, before
 * and after, alternated in one process (rounds in rotating order, medians reported). Not a test:
 * run it by hand on a quiet machine.
 *
 *   npm run build && node scripts/microbench-ip-token.cjs [rounds]
 *
 * "before" is the code as of d7854dd, copied below (canonicalClientIp with a parse for every
 * address; IpWhitelist.allows canonicalising again, then ip-range-check parsing every range) and
 * a TokenService with its cache turned off (verifiedTokenCacheSize: 0, the former verify()).
 */

const { isIP } = require('node:net');
const ipaddr = require('ipaddr.js');
const ipRangeCheck = require('ip-range-check');
const { TokenService } = require('../dist/lib/index.js');
const { canonicalClientIp, IpWhitelist } = require('../dist/lib/entry/core.js');

const ROUNDS = Number(process.argv[2] ?? 7);

// ---- before (d7854dd) -------------------------------------------------------------------------
function canonicalBefore(value) {
  if (value === undefined || value.length > 64) return undefined;
  const zone = value.indexOf('%');
  const address = zone === -1 ? value : value.slice(0, zone);
  if (isIP(address) === 0 || (zone !== -1 && isIP(address) !== 6)) return undefined;
  try {
    return ipaddr.process(address).toString();
  } catch {
    return undefined;
  }
}

function whitelistBefore(entries) {
  const ipv4 = entries.filter((entry) => !entry.includes(':'));
  const ipv6 = entries.filter((entry) => entry.includes(':'));
  return {
    allows(ip) {
      const canonical = canonicalBefore(ip);
      if (canonical === undefined) return false;
      const sameFamily = canonical.includes(':') ? ipv6 : ipv4;
      return sameFamily.length > 0 && ipRangeCheck(canonical, sameFamily);
    },
  };
}

// ---- harness ----------------------------------------------------------------------------------
function nsPerCall(fn, iterations) {
  let sink = 0;
  const started = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) if (fn(i)) sink++;
  const ns = Number(process.hrtime.bigint() - started) / iterations;
  if (sink === -1) process.stdout.write('');
  return ns;
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

function compare(name, before, after, iterations) {
  nsPerCall(before, iterations / 4); // warm-up
  nsPerCall(after, iterations / 4);
  const times = { before: [], after: [] };
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? ['before', 'after'] : ['after', 'before'];
    for (const which of order) {
      times[which].push(nsPerCall(which === 'before' ? before : after, iterations));
    }
  }
  const b = median(times.before);
  const a = median(times.after);
  process.stdout.write(
    `${name.padEnd(58)} before ${b.toFixed(0).padStart(6)} ns   after ${a
      .toFixed(0)
      .padStart(6)} ns   ${(b / a).toFixed(1)}x\n`,
  );
}

// ---- cases ------------------------------------------------------------------------------------
const ENTRIES = ['203.0.113.0/24', '198.51.100.7/32', '10.0.0.0/8', '2001:db8::/32'];
const after = IpWhitelist.parse(ENTRIES);
const before = whitelistBefore(after.entries());

// Per request: the door canonicalises req.ip, the gate asks the account's whitelist.
for (const [label, raw] of [
  ['IPv4 client (req.ip 203.0.113.9), allowed', '203.0.113.9'],
  ['IPv4-mapped client (::ffff:203.0.113.9), allowed', '::ffff:203.0.113.9'],
  ['IPv4 client outside (192.0.2.1), denied', '192.0.2.1'],
  ['IPv6 client (2001:db8::42), allowed', '2001:db8::42'],
]) {
  compare(
    `client IP + whitelist, one address: ${label}`,
    () => before.allows(canonicalBefore(raw)),
    () => after.allows(canonicalClientIp(raw)),
    20_000,
  );
}

// The memo's worst case: every request from a new address (never a hit).
const DISTINCT = 200_000;
const addresses = Array.from(
  { length: DISTINCT },
  (_, n) => `${n % 3 === 0 ? 203 : 10}.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`,
);
compare(
  `client IP + whitelist, ${DISTINCT} distinct IPv4 addresses (all misses)`,
  (i) => before.allows(canonicalBefore(addresses[i % DISTINCT])),
  (i) => after.allows(canonicalClientIp(addresses[(i + DISTINCT / 2) % DISTINCT])),
  20_000,
);
process.stdout.write(`  memo entries after ${DISTINCT} distinct addresses: ${after.memoSize()}\n`);

// Tokens: the same token presented again (a client reuses its token until it expires).
const SECRET = 'microbench-token-secret-of-at-least-32-bytes';
const uncached = new TokenService({ secret: SECRET, verifiedTokenCacheSize: 0 });
const cached = new TokenService({ secret: SECRET });
const key = { id: 'key_bench', accountId: 'acct_bench', role: 'level-2' };
const token = cached.issue(key).token;
compare(
  'TokenService.verify, the same token again',
  () => uncached.verify(token).keyId === key.id,
  () => cached.verify(token).keyId === key.id,
  2_000,
);
const tokens = Array.from({ length: 1000 }, () => cached.issue(key).token);
compare(
  'TokenService.verify, 1000 tokens in turn (all fit the cache)',
  (i) => uncached.verify(tokens[i % 1000]).keyId === key.id,
  (i) => cached.verify(tokens[i % 1000]).keyId === key.id,
  2_000,
);

const memory = process.memoryUsage();
process.stdout.write(
  `node ${process.version}, ${ROUNDS} rounds, medians; heap used ${(memory.heapUsed / 2 ** 20).toFixed(0)} MiB\n`,
);
