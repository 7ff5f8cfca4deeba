import ipRangeCheck from 'ip-range-check';
import { ConfigurationError } from '../errors';
import { type CidrRange, canonicalClientIp, formatCidr, parseCidrEntry } from './ip-address';

/**
 * How many decisions one whitelist remembers. Past that, the oldest is forgotten first, so a flood
 * of distinct client addresses costs at most this many entries (about 100 bytes each) per whitelist.
 */
export const IP_WHITELIST_MEMO_SIZE = 2048;

/**
 * A list of addresses and CIDR ranges, validated and canonicalised once, matched per request.
 *
 * ip-range-check is the matcher; it parses every range it is given on every call, so each
 * whitelist remembers its decisions by canonical client address (at most `IP_WHITELIST_MEMO_SIZE`,
 * oldest forgotten first). A whitelist never changes: a reloaded key file builds new `IpWhitelist`
 * objects, whose memos start empty, so a changed whitelist decides anew at once.
 */
export class IpWhitelist {
  private readonly ranges: readonly string[];
  /** The ranges by family: a client is matched against its own family only, which spares
   * ip-range-check a parse (and a thrown mismatch) per entry of the other family. */
  private readonly ipv4: string[];
  private readonly ipv6: string[];
  /** Decisions by canonical client address, oldest first (a `Map` iterates in insertion order). */
  private readonly decisions = new Map<string, boolean>();

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
        throw new ConfigurationError(`${where}[${index}] ${shownEntry(entry)}${parsed.error}`);
      }
      return parsed;
    });
    return new IpWhitelist(ranges);
  }

  /**
   * `ip` is read strictly (see `canonicalClientIp`); anything that is not one IP address is denied.
   * An address already in canonical form (`req.clientIp`, `RequestFacts.clientIp`) that was seen
   * before is answered from the memo, with neither a second canonicalisation nor a parse.
   */
  allows(ip: string | undefined): boolean {
    if (ip === undefined) return false;
    // Only canonical addresses are keys, and canonicalising one gives it back: a hit is the
    // decision the strict reading below would make.
    const known = this.decisions.get(ip);
    if (known !== undefined) return known;
    // ip-range-check alone would read `167772161` and `10.1` as 10.0.0.1.
    const canonical = canonicalClientIp(ip);
    if (canonical === undefined) return false;
    return this.decisions.get(canonical) ?? this.decide(canonical);
  }

  /** Matches a canonical address with ip-range-check and remembers the decision. */
  private decide(canonical: string): boolean {
    const sameFamily = canonical.includes(':') ? this.ipv6 : this.ipv4;
    const decision = sameFamily.length > 0 && ipRangeCheck(canonical, sameFamily);
    if (this.decisions.size >= IP_WHITELIST_MEMO_SIZE) {
      const oldest = this.decisions.keys().next();
      if (oldest.done !== true) this.decisions.delete(oldest.value);
    }
    this.decisions.set(canonical, decision);
    return decision;
  }

  /** How many decisions are remembered now (at most `IP_WHITELIST_MEMO_SIZE`), for tests. */
  memoSize(): number {
    return this.decisions.size;
  }

  /** The canonical entries, for logs at start-up and tests. */
  entries(): readonly string[] {
    return this.ranges;
  }
}

/**
 * Parses the whitelists of one load, sharing one `IpWhitelist` between equal lists: a ring of a
 * million accounts where many carry the same list parses each distinct list once. Only lists that
 * parsed are kept, so a bad list is refused, naming its own position, wherever it appears.
 */
export class WhitelistParser {
  private readonly parsed = new Map<string, IpWhitelist>();

  /**
   * `remembered`: how many distinct lists are kept at most; past it the memory starts afresh, so
   * a million accounts with lists of their own never hold a million parsed lists.
   */
  constructor(private readonly remembered = Number.POSITIVE_INFINITY) {}

  parse(entries: unknown, where?: string): IpWhitelist {
    if (!Array.isArray(entries)) return IpWhitelist.parse(entries, where);
    const text = JSON.stringify(entries);
    let list = this.parsed.get(text);
    if (list === undefined) {
      list = IpWhitelist.parse(entries, where);
      if (this.parsed.size >= this.remembered) this.parsed.clear();
      this.parsed.set(text, list);
    }
    return list;
  }
}

/**
 * A bad entry as an error message may show it: quoted when it is made of the characters of an
 * address or a range (spaces included), left out otherwise, since a string of another shape may be
 * a secret pasted into the wrong field.
 */
function shownEntry(entry: unknown): string {
  if (typeof entry === 'string') {
    return /^[0-9A-Fa-f:./% ]{1,64}$/.test(entry) ? `${JSON.stringify(entry)} ` : '';
  }
  return typeof entry === 'object' && entry !== null ? '' : `${String(entry)} `;
}
