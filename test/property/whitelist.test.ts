import { isIP } from 'node:net';
import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import { ConfigurationError } from '../../lib/errors';
import { canonicalClientIp, formatCidr, parseCidrEntry } from '../../lib/model/ip-address';
import { IpWhitelist } from '../../lib/model/ip-whitelist';

/**
 * Whitelist entries and client addresses under random input: parsing never throws, canonical forms
 * are fixed points, the lenient spellings ipaddr.js and ip-range-check accept (octal, short,
 * integer, padded, zone ids, /0) are refused, and matching agrees with plain bit arithmetic.
 */

const RUNS = 500;

const octet = fc.integer({ min: 0, max: 255 });
const ipv4Parts = fc.tuple(octet, octet, octet, octet);
const ipv4Number = ([a, b, c, d]: readonly number[]): number =>
  (a ?? 0) * 2 ** 24 + ((b ?? 0) << 16) + ((c ?? 0) << 8) + (d ?? 0);
const dotted = (parts: readonly number[]): string => parts.join('.');

/** The reference: does `address` fall in `network/prefix`, by arithmetic on 32-bit numbers? */
function inIpv4Range(address: number, network: number, prefix: number): boolean {
  const size = 2 ** (32 - prefix);
  return Math.floor(address / size) === Math.floor(network / size);
}

function ipv6BigInt(text: string): bigint {
  const [head = '', tail] = text.split('::');
  const groups = (part: string): string[] => (part === '' ? [] : part.split(':'));
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  const all = [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  return all.reduce((value, group) => (value << 16n) + BigInt(parseInt(group, 16)), 0n);
}

function ipv6Text(value: bigint): string {
  return Array.from({ length: 8 }, (_, index) =>
    ((value >> BigInt(112 - 16 * index)) & 0xffffn).toString(16),
  ).join(':');
}

/** The network of `address/prefix`, written in full (eight groups). */
function ipv6Network(address: string, prefix: number): string {
  const shift = BigInt(128 - prefix);
  return ipv6Text((ipv6BigInt(address) >> shift) << shift);
}

describe('whitelist entry parsing', () => {
  it('never throws, whatever it is given', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.anything(), fc.string(), fc.stringMatching(/^[0-9a-fA-F:.%/ x]{0,50}$/)),
        (entry) => {
          const parsed = parseCidrEntry(entry);
          expect('error' in parsed ? typeof parsed.error : typeof parsed.address).toBe('string');
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('is a fixed point on its own canonical output', () => {
    const entry = fc.oneof(
      fc
        .tuple(fc.ipV4(), fc.integer({ min: 1, max: 32 }))
        .map(([address, prefix]) => `${address}/${prefix}`),
      fc
        .tuple(fc.ipV6(), fc.integer({ min: 1, max: 128 }))
        .map(([address, prefix]) => `${address}/${prefix}`),
      fc.ipV4(),
      fc.ipV6(),
    );
    fc.assert(
      fc.property(entry, (text) => {
        const parsed = parseCidrEntry(text);
        if ('error' in parsed) return;
        const canonical = formatCidr(parsed);
        expect(parseCidrEntry(canonical)).toEqual(parsed);
      }),
      { numRuns: RUNS },
    );
  });

  it('refuses octal, short, integer and hexadecimal spellings of IPv4 addresses', () => {
    const lenient = fc.oneof(
      ipv4Parts.map(([a, b, c, d]) => `0${a}.${b}.${c}.${d}`),
      ipv4Parts.map(([a, b, c, d]) => `${a}.${b}.0${c}.${d}`),
      ipv4Parts.map(([a, , , d]) => `${a}.${d}`),
      ipv4Parts.map(([a, b, , d]) => `${a}.${b}.${d}`),
      ipv4Parts.map((parts) => String(ipv4Number(parts))),
      ipv4Parts.map(([a, b, c, d]) => `0x${a.toString(16)}.${b}.${c}.${d}`),
    );
    fc.assert(
      fc.property(
        lenient,
        fc.option(fc.integer({ min: 1, max: 32 }), { nil: undefined }),
        (address, prefix) => {
          expect(
            parseCidrEntry(prefix === undefined ? address : `${address}/${prefix}`),
          ).toHaveProperty('error');
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('refuses white space around an entry, a zone id, a zero prefix and the IPv4-compatible form', () => {
    const spoiled = fc.oneof(
      fc.ipV4().map((address) => `::${address}`),
      fc
        .tuple(fc.ipV4(), fc.constantFrom(' ', '\t', '\n', '\u00a0'))
        .map(([address, space]) => `${space}${address}`),
      fc
        .tuple(fc.ipV4(), fc.constantFrom(' ', '\t', '\n'))
        .map(([address, space]) => `${address}${space}`),
      fc
        .tuple(fc.ipV6(), fc.stringMatching(/^[a-z0-9]{1,8}$/))
        .map(([address, zone]) => `${address}%${zone}`),
      fc
        .ipV4()
        .map(
          (address) => `${address.replace(/\.\d+$/, '.0').replace(/^\d+\.\d+\.\d+/, '0.0.0')}/0`,
        ),
      fc.constant('::/0'),
      fc.constant('::ffff:0:0/96'),
    );
    fc.assert(
      fc.property(spoiled, (entry) => {
        expect(parseCidrEntry(entry)).toHaveProperty('error');
      }),
      { numRuns: RUNS },
    );
  });

  it('reads an IPv4-mapped range as the IPv4 range it covers', () => {
    fc.assert(
      fc.property(ipv4Parts, fc.integer({ min: 1, max: 32 }), (parts, prefix) => {
        const size = 2 ** (32 - prefix);
        const network = Math.floor(ipv4Number(parts) / size) * size;
        const address = [24, 16, 8, 0]
          .map((shift) => Math.floor(network / 2 ** shift) % 256)
          .join('.');
        expect(parseCidrEntry(`::ffff:${address}/${prefix + 96}`)).toEqual({
          address,
          prefixLength: prefix,
          kind: 'ipv4',
        });
      }),
      { numRuns: RUNS },
    );
  });

  it('loads a list or throws a ConfigurationError naming the entry, nothing else', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.ipV4(), fc.ipV6(), fc.string(), fc.anything()), { maxLength: 5 }),
        (entries) => {
          try {
            const whitelist = IpWhitelist.parse(entries);
            expect(whitelist.entries().length).toBeGreaterThan(0);
          } catch (error) {
            expect(error).toBeInstanceOf(ConfigurationError);
          }
        },
      ),
      { numRuns: RUNS },
    );
  });
});

describe('whitelist matching', () => {
  it('agrees with bit arithmetic for IPv4 clients and ranges', () => {
    fc.assert(
      fc.property(
        ipv4Parts,
        fc.integer({ min: 1, max: 32 }),
        ipv4Parts,
        (networkParts, prefix, clientParts) => {
          const size = 2 ** (32 - prefix);
          const network = Math.floor(ipv4Number(networkParts) / size) * size;
          const networkText = [24, 16, 8, 0]
            .map((shift) => Math.floor(network / 2 ** shift) % 256)
            .join('.');
          const whitelist = IpWhitelist.parse([`${networkText}/${prefix}`]);
          const client = dotted(clientParts);
          const expected = inIpv4Range(ipv4Number(clientParts), network, prefix);
          expect(whitelist.allows(canonicalClientIp(client))).toBe(expected);
          expect(whitelist.allows(canonicalClientIp(`::ffff:${client}`))).toBe(expected);
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('agrees with bit arithmetic for IPv6 clients and ranges', () => {
    fc.assert(
      fc.property(
        fc.ipV6(),
        fc.integer({ min: 1, max: 128 }),
        fc.ipV6(),
        fc.boolean(),
        (networkText, prefix, client, inside) => {
          const network = ipv6Network(canonicalClientIp(networkText) ?? '::', prefix);
          const range = parseCidrEntry(`${network}/${prefix}`);
          fc.pre(!('error' in range) && range.kind === 'ipv6');
          // Half the time, move the client into the range by keeping its host bits only.
          const shift = BigInt(128 - prefix);
          const hostBits = ipv6BigInt(canonicalClientIp(client) ?? '::') & ((1n << shift) - 1n);
          const candidate = inside ? ipv6Text(ipv6BigInt(network) | hostBits) : client;
          const canonical = canonicalClientIp(candidate);
          fc.pre(canonical?.includes(':') === true);
          const expected = ipv6BigInt(canonical) >> shift === ipv6BigInt(network) >> shift;
          if (inside) expect(expected).toBe(true);
          expect(IpWhitelist.parse([`${network}/${prefix}`]).allows(canonical)).toBe(expected);
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('never lets an IPv4 client match an IPv6 range or the reverse', () => {
    fc.assert(
      fc.property(fc.ipV4(), fc.ipV6(), (v4, v6) => {
        const network = ipv6Network(canonicalClientIp(v6) ?? '::', 64);
        fc.pre(!network.startsWith('0:0:0:0:'));
        expect(IpWhitelist.parse([`${network}/64`]).allows(v4)).toBe(false);
        expect(IpWhitelist.parse([v4]).allows(v6)).toBe(canonicalClientIp(v6) === v4);
      }),
      { numRuns: RUNS },
    );
  });

  it('denies, without throwing, anything that is not one IP address', () => {
    const whitelist = IpWhitelist.parse(['10.0.0.0/8', '2001:db8::/32']);
    const notAnAddress = fc.oneof(
      fc.string(),
      ipv4Parts.map(([a, b, c, d]) => `0${a}.${b}.${c}.${d}`),
      fc.integer({ min: 167772160, max: 184549375 }).map(String),
      fc
        .tuple(fc.ipV4(), fc.integer({ min: 1, max: 65535 }))
        .map(([address, port]) => `${address}:${port}`),
      fc.ipV4().map((address) => ` ${address}`),
      fc.ipV6().map((address) => `[${address}]`),
    );
    fc.assert(
      fc.property(notAnAddress, (value) => {
        fc.pre(canonicalClientIp(value) === undefined);
        expect(whitelist.allows(value)).toBe(false);
      }),
      { numRuns: RUNS },
    );
  });

  it('answers from its memo as a whitelist that has seen nothing, whatever came before', () => {
    const entries = ['10.0.0.0/8', '192.168.1.7', '2001:db8::/32'];
    const remembering = IpWhitelist.parse(entries);
    const client = fc.oneof(
      fc.ipV4(),
      fc.ipV4Extended(),
      fc.ipV6(),
      fc.ipV4().map((address) => `::ffff:${address}`),
      fc.integer({ min: 167772160, max: 184549375 }).map(String),
      fc.constantFrom('10.0.0.1', '10.1', '010.0.0.1', '::ffff:10.0.0.1', '2001:DB8::1'),
      fc.string(),
    );
    fc.assert(
      fc.property(fc.array(client, { minLength: 1, maxLength: 20 }), (clients) => {
        for (const value of clients) {
          expect(remembering.allows(value)).toBe(IpWhitelist.parse(entries).allows(value));
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('canonicalises a client address as ipaddr.js does, with or without its fast paths', () => {
    const reference = (value: string): string | undefined => {
      const address = value.split('%')[0] ?? '';
      const family = isIP(address);
      if (family === 0 || (value.includes('%') && family !== 6)) return undefined;
      return ipaddr.process(address).toString();
    };
    const mapped = fc
      .tuple(fc.ipV4(), fc.constantFrom('::ffff:', '::FFFF:', '::fFfF:', '0:0:0:0:0:ffff:'))
      .map(([address, prefix]) => `${prefix}${address}`);
    fc.assert(
      fc.property(
        fc.oneof(
          fc.ipV4(),
          fc.ipV4Extended(),
          fc.ipV6(),
          mapped,
          mapped.map((address) => `${address}%eth0`),
          fc.ipV4().map((address) => `${address}%eth0`),
          fc.string(),
        ),
        (value) => {
          expect(canonicalClientIp(value)).toBe(reference(value));
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('reads client addresses without throwing and drops zone ids', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.ipV4Extended(),
          fc.ipV6(),
          fc.tuple(fc.ipV6(), fc.stringMatching(/^[a-z0-9]{1,8}$/)).map(([a, z]) => `${a}%${z}`),
        ),
        (value) => {
          const canonical = canonicalClientIp(value);
          if (canonical !== undefined) {
            expect(canonical).not.toContain('%');
            expect(canonicalClientIp(canonical)).toBe(canonical);
          }
        },
      ),
      { numRuns: RUNS },
    );
  });
});
