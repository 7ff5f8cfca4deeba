import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

/**
 * Pure address helpers. Addresses are written one way only: IPv4 as four decimal parts without
 * leading zeros, IPv6 in its RFC 5952 form, IPv4-mapped IPv6 clients (`::ffff:a.b.c.d`) as IPv4.
 * The lenient forms `ipaddr.js` also reads (`010.0.0.1` as octal, `10.1`, `167772161`) are refused.
 */

const MAPPED_PREFIX = /^::ffff:/i;

/** Canonical form of a client address, or `undefined` when `value` is not an IP address. */
export function canonicalClientIp(value: string | undefined): string | undefined {
  if (value === undefined || value.length > 64) return undefined;
  // A zone id (`fe80::1%eth0`) names an interface of this host, not the client: it is dropped, so
  // a forwarded value cannot vary it to make new rate-limit keys or log text.
  const zone = value.indexOf('%');
  const address = zone === -1 ? value : value.slice(0, zone);
  const family = isIP(address);
  // node:net reads IPv4 as four decimal parts without leading zeros only: that is already the
  // canonical form, so the common case needs no parse.
  if (family === 4 && zone === -1) return address;
  if (family !== 6) return undefined;
  // An IPv4 client of a dual-stack socket (`::ffff:a.b.c.d`, how Node shows them when it listens
  // on `::`) is that IPv4 address; node:net has read its IPv4 part strictly already.
  if (MAPPED_PREFIX.test(address)) {
    const ipv4 = address.slice(7);
    if (isIP(ipv4) === 4) return ipv4;
  }
  try {
    return ipaddr.process(address).toString();
  } catch {
    return undefined;
  }
}

/** A CIDR range in canonical form: `"10.0.0.0/8"`, `"2001:db8::/32"`, `"127.0.0.1/32"`. */
export interface CidrRange {
  readonly address: string;
  readonly prefixLength: number;
  readonly kind: 'ipv4' | 'ipv6';
}

export function formatCidr(range: CidrRange): string {
  return `${range.address}/${range.prefixLength}`;
}

const PREFIX_PATTERN = /^(?:0|[1-9]\d{0,2})$/;

/**
 * Parses one whitelist entry strictly. Returns the canonical range or a reason it was refused.
 * `/0` is refused: a whitelist that admits every address is written by leaving the list out.
 */
export function parseCidrEntry(entry: unknown): CidrRange | { error: string } {
  if (typeof entry !== 'string') return { error: 'is not a string' };
  if (entry.length === 0 || entry.length > 64) return { error: 'is empty or too long' };
  if (/\s/.test(entry)) return { error: 'contains white space' };
  if (entry.includes('%')) return { error: 'has an IPv6 zone id, which cannot be matched' };
  const parts = entry.split('/');
  if (parts.length > 2) return { error: 'has more than one "/"' };
  const [addressText = '', prefixText] = parts;

  let address: ipaddr.IPv4 | ipaddr.IPv6;
  if (ipaddr.IPv4.isValidFourPartDecimal(addressText)) {
    address = ipaddr.IPv4.parse(addressText);
  } else if (/^::(?:\d+\.){3}\d+$/.test(addressText)) {
    // ipaddr.js reads the deprecated IPv4-compatible `::a.b.c.d` as the mapped `::ffff:a.b.c.d`.
    return {
      error: 'is the deprecated IPv4-compatible form ::a.b.c.d; write a.b.c.d or ::ffff:a.b.c.d',
    };
  } else if (isIP(addressText) === 6 && ipaddr.IPv6.isValid(addressText)) {
    // node:net is strict about an embedded IPv4 part; ipaddr.js also reads `::ffff:0xa.0.0.1`.
    address = ipaddr.IPv6.parse(addressText);
  } else {
    return { error: 'is not an IPv4 address in four decimal parts or an IPv6 address' };
  }
  const maxPrefix = address.kind() === 'ipv4' ? 32 : 128;
  let prefixLength = maxPrefix;
  if (prefixText !== undefined) {
    if (!PREFIX_PATTERN.test(prefixText) || Number(prefixText) > maxPrefix) {
      return { error: `has an invalid prefix length (0 to ${maxPrefix})` };
    }
    prefixLength = Number(prefixText);
  }

  if (address instanceof ipaddr.IPv6 && address.isIPv4MappedAddress()) {
    if (prefixLength < 96) return { error: 'is an IPv4-mapped range shorter than /96' };
    address = address.toIPv4Address();
    prefixLength -= 96;
  }
  if (prefixLength === 0) {
    return { error: 'admits every address (/0); leave ipWhitelist out to allow all addresses' };
  }
  const network = networkAddress(address, prefixLength);
  if (network !== address.toString()) {
    return { error: `has host bits set; did you mean ${network}/${prefixLength}?` };
  }
  return { address: network, prefixLength, kind: address.kind() };
}

function networkAddress(address: ipaddr.IPv4 | ipaddr.IPv6, prefixLength: number): string {
  const bytes = address.toByteArray();
  for (let bit = prefixLength; bit < bytes.length * 8; bit++) {
    const index = bit >> 3;
    bytes[index] = (bytes[index] ?? 0) & ~(0x80 >> (bit & 7));
  }
  return ipaddr.fromByteArray(bytes).toString();
}
