import {
  canonicalClientIp,
  type CidrRange,
  formatCidr,
  parseCidrEntry,
} from '../../lib/model/ip-address';

function parsed(entry: unknown): CidrRange {
  const result = parseCidrEntry(entry);
  if ('error' in result) throw new Error(`${JSON.stringify(entry)} was refused: ${result.error}`);
  return result;
}

function refusal(entry: unknown): string {
  const result = parseCidrEntry(entry);
  if (!('error' in result))
    throw new Error(`${JSON.stringify(entry)} was accepted as ${formatCidr(result)}`);
  return result.error;
}

describe('parseCidrEntry', () => {
  it.each([
    ['10.0.0.0/8', '10.0.0.0/8', 'ipv4'],
    ['127.0.0.1', '127.0.0.1/32', 'ipv4'],
    ['192.168.1.0/24', '192.168.1.0/24', 'ipv4'],
    ['0.0.0.0/8', '0.0.0.0/8', 'ipv4'],
    ['2001:db8::/32', '2001:db8::/32', 'ipv6'],
    ['2001:DB8:0:0::/32', '2001:db8::/32', 'ipv6'],
    ['2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::1/128', 'ipv6'],
    ['::1', '::1/128', 'ipv6'],
    ['::ffff:10.0.0.0/104', '10.0.0.0/8', 'ipv4'],
    ['::ffff:1.2.3.4', '1.2.3.4/32', 'ipv4'],
    ['::ffff:a00:0/104', '10.0.0.0/8', 'ipv4'],
  ])('accepts %p as %p (%s)', (entry, canonical, kind) => {
    const range = parsed(entry);
    expect(formatCidr(range)).toBe(canonical);
    expect(range.kind).toBe(kind);
  });

  it.each([
    ['010.0.0.1', 'octal part'],
    ['10.1', 'two-part IPv4'],
    ['167772161', 'IPv4 as one number'],
    ['0x0a.0.0.1', 'hexadecimal part'],
    [' 10.0.0.0/8', 'leading space'],
    ['10.0.0.0/8 ', 'trailing space'],
    ['10.0.0.0/33', 'IPv4 prefix above 32'],
    ['2001:db8::/129', 'IPv6 prefix above 128'],
    ['10.0.0.0/0', 'IPv4 /0'],
    ['::/0', 'IPv6 /0'],
    ['::ffff:0.0.0.0/96', 'mapped /96, which is every IPv4 address'],
    ['fe80::1%eth0', 'zone id'],
    ['10.0.0.0//8', 'two slashes'],
    ['10.0.0.0/8/8', 'two prefixes'],
    ['10.0.0.0/', 'empty prefix'],
    ['', 'empty string'],
    [null, 'null'],
    [123, 'number'],
    [undefined, 'undefined'],
    [['10.0.0.0/8'], 'array'],
    ['1.2.3.4/08', 'prefix with a leading zero'],
    ['1.2.3.4/+8', 'signed prefix'],
    ['::ffff:10.0.0.0/95', 'mapped prefix shorter than /96'],
    ['::ffff:010.0.0.1', 'mapped address with a zero-padded part'],
    ['::ffff:0xa.0.0.1', 'mapped address with a hexadecimal part'],
    ['::1.2.3.4', 'deprecated IPv4-compatible form'],
    ['garbage', 'not an address'],
    ['256.0.0.0/8', 'part above 255'],
    ['1:2:3:4:5:6:7:8:9', 'nine IPv6 groups'],
    [`${'1.'.repeat(40)}1`, 'longer than 64 characters'],
  ] as [unknown, string][])('refuses %p (%s)', (entry) => {
    expect(refusal(entry)).toEqual(expect.any(String));
  });

  it.each([
    ['10.0.0.1/8', '10.0.0.0/8'],
    ['192.168.1.77/24', '192.168.1.0/24'],
    ['2001:db8::1/32', '2001:db8::/32'],
    ['::ffff:10.0.0.1/120', '10.0.0.0/24'],
  ])('refuses %p, which has host bits set, and suggests %p', (entry, suggestion) => {
    const error = refusal(entry);
    expect(error).toContain('host bits');
    expect(error).toContain(`did you mean ${suggestion}?`);
  });

  it('explains that /0 is written by leaving the whitelist out', () => {
    expect(refusal('10.0.0.0/0')).toContain('leave ipWhitelist out');
  });
});

describe('canonicalClientIp', () => {
  it.each([
    ['::ffff:10.0.0.1', '10.0.0.1'],
    ['::ffff:127.0.0.1', '127.0.0.1'],
    ['::1', '::1'],
    ['127.0.0.1', '127.0.0.1'],
    ['2001:0DB8:0:0::1', '2001:db8::1'],
    ['fe80::1%eth0', 'fe80::1'],
    ['fe80::1%2', 'fe80::1'],
  ])('writes %p as %p', (value, canonical) => {
    expect(canonicalClientIp(value)).toBe(canonical);
  });

  it.each([
    [undefined],
    [''],
    ['garbage'],
    ['1.2.3.4:80'],
    ['167772161'],
    ['10.1'],
    ['010.0.0.1'],
    [' 10.0.0.1'],
    ['[::1]'],
    ['10.0.0.0/8'],
    ['10.0.0.1%eth0'],
    [`::ffff:${'1'.repeat(70)}`],
  ])('gives undefined for %p, which is not one IP address', (value) => {
    expect(canonicalClientIp(value)).toBeUndefined();
  });
});
