import ipRangeCheck from 'ip-range-check';
import { ConfigurationError } from '../errors';
import { type CidrRange, canonicalClientIp, formatCidr, parseCidrEntry } from './ip-address';

/** A list of addresses and CIDR ranges, validated and canonicalised once, matched per request. */
export class IpWhitelist {
  private readonly ranges: readonly string[];
  /** The ranges by family: a client is matched against its own family only, which spares
   * ip-range-check a parse (and a thrown mismatch) per entry of the other family. */
  private readonly ipv4: string[];
  private readonly ipv6: string[];

  private constructor(ranges: readonly CidrRange[]) {
    this.ranges = [...new Set(ranges.map(formatCidr))];
    this.ipv4 = [...new Set(ranges.filter((r) => r.kind === 'ipv4').map(formatCidr))];
    this.ipv6 = [...new Set(ranges.filter((r) => r.kind === 'ipv6').map(formatCidr))];
  }

  /**
   * Parses a whitelist. Throws a `ConfigurationError` naming the first bad entry; an empty list is
   * an error too (to allow every address, have no whitelist).
   */
  static parse(entries: unknown, where = 'ipWhitelist'): IpWhitelist {
    if (!Array.isArray(entries)) throw new ConfigurationError(`${where}: must be an array`);
    if (entries.length === 0) {
      throw new ConfigurationError(
        `${where}: is empty, which would deny every address; leave it out to allow all`,
      );
    }
    const ranges = entries.map((entry: unknown, index) => {
      const parsed = parseCidrEntry(entry);
      if ('error' in parsed) {
        throw new ConfigurationError(`${where}[${index}] ${JSON.stringify(entry)} ${parsed.error}`);
      }
      return parsed;
    });
    return new IpWhitelist(ranges);
  }

  /** `ip` is read strictly (see `canonicalClientIp`); anything that is not one IP address is denied. */
  allows(ip: string | undefined): boolean {
    // ip-range-check alone would read `167772161` and `10.1` as 10.0.0.1.
    const canonical = canonicalClientIp(ip);
    if (canonical === undefined) return false;
    const sameFamily = canonical.includes(':') ? this.ipv6 : this.ipv4;
    return sameFamily.length > 0 && ipRangeCheck(canonical, sameFamily);
  }

  /** The canonical entries, for logs at start-up and tests. */
  entries(): readonly string[] {
    return this.ranges;
  }
}
