import type { NextFunction, Request, Response } from 'express';
import { ConfigurationError, IpNotWhitelistedError } from '../../lib/errors';
import { IP_WHITELIST_MEMO_SIZE, IpWhitelist, WhitelistParser } from '../../lib/model/ip-whitelist';
import { generateKey } from '../../lib/model/key-format';
import { KeyRing, sha256 } from '../../lib/keys/key-store';
import { type IpWhitelistOptions, requireWhitelistedIp } from '../../lib/express/access';
import type { AuthContext, CredentialKind } from '../../lib/types';

function parseError(entries: unknown, where?: string): ConfigurationError {
  try {
    IpWhitelist.parse(entries, where);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return error as ConfigurationError;
  }
  throw new Error(`${JSON.stringify(entries)} was accepted`);
}

describe('IpWhitelist.parse', () => {
  it.each([
    [['10.0.0.0/8', '10.0.0.0/33'], 'ipWhitelist[1] "10.0.0.0/33"'],
    [['10.0.0.256'], 'ipWhitelist[0] "10.0.0.256"'],
    [['127.0.0.1', '2001:db8::/32', ' 10.0.0.0/8'], 'ipWhitelist[2] " 10.0.0.0/8"'],
    [['10.0.0.1/8'], 'ipWhitelist[0] "10.0.0.1/8"'],
    [[null], 'ipWhitelist[0] null'],
    [['::/0'], 'ipWhitelist[0] "::/0"'],
  ])('refuses %p with a message naming the index and the entry', (entries, naming) => {
    expect(parseError(entries).message.startsWith(naming)).toBe(true);
  });

  it('names only the index of an entry that is not address-shaped: it may be a secret in the wrong place', () => {
    const secret = 'sk_test_KDMsWZsknFzS04LZbhkmsnnAUGh9HzfP_1pGNph';
    const message = parseError(['10.0.0.0/8', secret]).message;
    expect(message.startsWith('ipWhitelist[1] ')).toBe(true);
    expect(message).not.toContain('sk_test');
    expect(parseError(['garbage']).message).not.toContain('garbage');
  });

  it('names the place it was given', () => {
    expect(parseError(['10.1'], 'accounts[3].ipWhitelist').message).toMatch(
      /^accounts\[3\]\.ipWhitelist\[0\] "10\.1" /,
    );
  });

  it('refuses an empty list, which would deny everyone', () => {
    expect(parseError([]).message).toMatch(/^ipWhitelist: is empty/);
  });

  it.each([['10.0.0.0/8'], [null], [undefined], [{ 0: '10.0.0.0/8' }]])(
    'refuses %p, which is not an array',
    (value) => {
      expect(parseError(value).message).toBe('ipWhitelist: must be an array');
    },
  );

  it('keeps each canonical range once', () => {
    const whitelist = IpWhitelist.parse([
      '10.0.0.0/8',
      '::ffff:10.0.0.0/104',
      '127.0.0.1',
      '127.0.0.1/32',
      '2001:DB8::/32',
      '2001:db8:0::/32',
      '10.0.0.0/8',
    ]);
    expect(whitelist.entries()).toEqual(['10.0.0.0/8', '127.0.0.1/32', '2001:db8::/32']);
  });
});

describe('IpWhitelist.allows', () => {
  const whitelist = IpWhitelist.parse(['10.0.0.0/8', '192.168.1.7', '2001:db8::/32']);

  it.each([
    ['10.0.0.1', true, 'IPv4 inside a range'],
    ['10.255.255.255', true, 'IPv4 at the end of a range'],
    ['192.168.1.7', true, 'IPv4 equal to a single address'],
    ['11.0.0.1', false, 'IPv4 outside'],
    ['192.168.1.8', false, 'IPv4 next to a single address'],
    ['2001:db8::1', true, 'IPv6 inside'],
    ['2001:db8:ffff::1', true, 'IPv6 at the far end of the range'],
    ['2001:db9::1', false, 'IPv6 outside'],
    ['::1', false, 'IPv6 loopback'],
    ['::ffff:10.0.0.1', true, 'IPv4-mapped client inside an IPv4 range'],
    ['::ffff:11.0.0.1', false, 'IPv4-mapped client outside an IPv4 range'],
    [undefined, false, 'no address'],
    ['garbage', false, 'not an address'],
    ['167772161', false, 'an IPv4 address written as one number (10.0.0.1)'],
    ['10.1', false, 'an IPv4 address in two parts (10.0.0.1)'],
    ['10.0.0.1:443', false, 'an address with a port'],
  ] as [string | undefined, boolean, string][])('allows(%p) is %p: %s', (ip, expected) => {
    expect(whitelist.allows(ip)).toBe(expected);
  });
});

function request(auth: Partial<AuthContext> | undefined, clientIp: string | undefined): Request {
  const full =
    auth === undefined
      ? undefined
      : {
          accountId: 'acct_x',
          keyId: 'key_x',
          role: 'administrator' as const,
          credential: 'secret' as const,
          ...auth,
        };
  return { auth: full, clientIp } as unknown as Request;
}

function outcome(
  middleware: ReturnType<typeof requireWhitelistedIp>,
  req: Request,
): 'next' | 'denied' {
  const next = jest.fn<unknown, unknown[]>();
  void middleware(req, {} as unknown as Response, next as NextFunction);
  expect(next).toHaveBeenCalledTimes(1);
  const [error] = next.mock.calls[0] ?? [];
  if (error === undefined) return 'next';
  expect(error).toBeInstanceOf(IpNotWhitelistedError);
  expect(error).toMatchObject({
    status: 403,
    code: 'ip_not_whitelisted',
    message: 'Access denied: IP not whitelisted.',
  });
  return 'denied';
}

describe('requireWhitelistedIp', () => {
  const accountWhitelist = IpWhitelist.parse(['127.0.0.2', '2001:db8::/32']);

  describe("with the account's whitelist (req.auth.ipWhitelist)", () => {
    const middleware = requireWhitelistedIp();
    it.each([
      ['secret', '127.0.0.2', 'next'],
      ['secret', '127.0.0.1', 'denied'],
      ['token', '127.0.0.2', 'next'],
      ['token', '2001:db8::5', 'next'],
      ['token', '127.0.0.3', 'denied'],
      ['secret', undefined, 'denied'],
      ['publishable', '203.0.113.9', 'next'],
    ] as [CredentialKind, string | undefined, 'next' | 'denied'][])(
      'a %s credential from %p: %s',
      (credential, clientIp, expected) => {
        expect(
          outcome(middleware, request({ credential, ipWhitelist: accountWhitelist }, clientIp)),
        ).toBe(expected);
      },
    );

    it('does not restrict an account without a whitelist', () => {
      expect(
        outcome(
          middleware,
          request({ credential: 'secret', ipWhitelist: undefined }, '203.0.113.9'),
        ),
      ).toBe('next');
    });
  });

  describe('with a fixed list', () => {
    const middleware = requireWhitelistedIp({ whitelist: ['10.0.0.0/8'] });
    it.each([
      ['10.1.2.3', 'next'],
      ['::ffff:10.1.2.3', 'next'],
      ['127.0.0.2', 'denied'],
    ])('a secret-key request from %p: %s, whatever the account list says', (clientIp, expected) => {
      expect(
        outcome(
          middleware,
          request({ credential: 'secret', ipWhitelist: accountWhitelist }, clientIp),
        ),
      ).toBe(expected);
    });

    it('restricts requests that are not authenticated', () => {
      expect(outcome(middleware, request(undefined, '127.0.0.1'))).toBe('denied');
      expect(outcome(middleware, request(undefined, '10.0.0.1'))).toBe('next');
    });

    it('does not restrict a publishable credential', () => {
      expect(outcome(middleware, request({ credential: 'publishable' }, '127.0.0.1'))).toBe('next');
    });

    it('accepts an IpWhitelist instance too', () => {
      const fromInstance = requireWhitelistedIp({ whitelist: IpWhitelist.parse(['10.0.0.0/8']) });
      expect(outcome(fromInstance, request({ credential: 'token' }, '10.9.9.9'))).toBe('next');
      expect(outcome(fromInstance, request({ credential: 'token' }, '11.9.9.9'))).toBe('denied');
    });
  });

  it('restricts publishable credentials when told to', () => {
    const middleware = requireWhitelistedIp({
      whitelist: ['10.0.0.0/8'],
      credentials: ['publishable'],
    });
    expect(outcome(middleware, request({ credential: 'publishable' }, '127.0.0.1'))).toBe('denied');
    expect(outcome(middleware, request({ credential: 'secret' }, '127.0.0.1'))).toBe('next');
  });

  it('throws at creation for a bad fixed entry, naming it', () => {
    expect(() => requireWhitelistedIp({ whitelist: ['10.0.0.0/8', '10.0.0.0/33'] })).toThrow(
      new ConfigurationError(
        'requireWhitelistedIp({ whitelist })[1] "10.0.0.0/33" has an invalid prefix length (0 to 32)',
      ),
    );
  });

  it('does not mutate the options passed', () => {
    const options: IpWhitelistOptions = {
      whitelist: ['10.0.0.1', '10.0.0.1/32'],
      credentials: ['secret'],
    };
    const before = structuredClone(options);
    Object.freeze(options.whitelist);
    Object.freeze(options.credentials);
    Object.freeze(options);
    const middleware = requireWhitelistedIp(options);
    expect(outcome(middleware, request({ credential: 'secret' }, '10.0.0.1'))).toBe('next');
    expect(options).toEqual(before);
  });
});

describe('IpWhitelist decisions memo', () => {
  it('answers a repeated address as the first time, and keeps the strict reading of raw text', () => {
    const whitelist = IpWhitelist.parse(['10.0.0.0/8', '2001:db8::/32']);
    for (let round = 0; round < 3; round++) {
      expect(whitelist.allows('10.0.0.1')).toBe(true);
      expect(whitelist.allows('11.0.0.1')).toBe(false);
      // Other spellings of 10.0.0.1 are never read as it, before or after it is remembered.
      expect(whitelist.allows('167772161')).toBe(false);
      expect(whitelist.allows('10.1')).toBe(false);
      expect(whitelist.allows('010.0.0.1')).toBe(false);
      expect(whitelist.allows('10.0.0.1%eth0')).toBe(false);
      expect(whitelist.allows('::ffff:10.0.0.1')).toBe(true);
      expect(whitelist.allows('2001:DB8::1')).toBe(true);
      expect(whitelist.allows('2001:db8::1')).toBe(true);
      expect(whitelist.allows(undefined)).toBe(false);
    }
    // Only canonical addresses are remembered: 10.0.0.1, 11.0.0.1 and 2001:db8::1.
    expect(whitelist.memoSize()).toBe(3);
  });

  it(`remembers at most ${IP_WHITELIST_MEMO_SIZE} addresses, forgetting the oldest first`, () => {
    const whitelist = IpWhitelist.parse(['10.0.0.0/8']);
    const distinct = 3 * IP_WHITELIST_MEMO_SIZE;
    for (let n = 0; n < distinct; n++) {
      const inside = n % 2 === 0;
      const address = `${inside ? 10 : 11}.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
      expect(whitelist.allows(address)).toBe(inside);
      expect(whitelist.memoSize()).toBeLessThanOrEqual(IP_WHITELIST_MEMO_SIZE);
    }
    expect(whitelist.memoSize()).toBe(IP_WHITELIST_MEMO_SIZE);
    // A forgotten address is decided again, the same way.
    expect(whitelist.allows('10.0.0.0')).toBe(true);
    expect(whitelist.allows('11.0.0.1')).toBe(false);
    expect(whitelist.memoSize()).toBe(IP_WHITELIST_MEMO_SIZE);
  });

  it('is held by the whitelist: a reloaded ring with a changed whitelist decides anew', () => {
    const publishableKey = generateKey('publishable', 'test');
    const document = (ipWhitelist: string[]) => ({
      accounts: [
        {
          id: 'acct_walled',
          ipWhitelist,
          keys: [
            {
              id: 'key_walled',
              publishableKey,
              secretKeySha256: sha256(generateKey('secret', 'test')).toString('hex'),
            },
          ],
        },
      ],
    });
    const before = KeyRing.fromDocument(document(['127.0.0.2', '127.0.10.0/24']));
    const whitelistBefore = before.findById('key_walled')?.ipWhitelist;
    expect(whitelistBefore?.allows('127.0.0.2')).toBe(true);
    expect(whitelistBefore?.allows('127.0.10.9')).toBe(true);
    expect(whitelistBefore?.allows('127.0.0.3')).toBe(false);

    const after = KeyRing.fromDocument(document(['127.0.0.3']));
    const whitelistAfter = after.findById('key_walled')?.ipWhitelist;
    expect(whitelistAfter).not.toBe(whitelistBefore);
    expect(whitelistAfter?.allows('127.0.0.2')).toBe(false);
    expect(whitelistAfter?.allows('127.0.10.9')).toBe(false);
    expect(whitelistAfter?.allows('127.0.0.3')).toBe(true);
  });
});

describe('WhitelistParser (one load of many accounts)', () => {
  it('parses each distinct list once: equal lists share one whitelist', () => {
    const parser = new WhitelistParser();
    const first = parser.parse(['10.0.0.0/8', '2001:db8::/32'], 'accounts[0].ipWhitelist');
    const again = parser.parse(['10.0.0.0/8', '2001:db8::/32'], 'accounts[7].ipWhitelist');
    const other = parser.parse(['10.0.0.0/8'], 'accounts[8].ipWhitelist');
    expect(again).toBe(first);
    expect(other).not.toBe(first);
    expect(other.entries()).toEqual(['10.0.0.0/8']);
  });

  it('refuses a bad list wherever it appears, naming that place', () => {
    const parser = new WhitelistParser();
    expect(() => parser.parse(['10.0.0.1/8'], 'accounts[1].ipWhitelist')).toThrow(
      /^accounts\[1\]\.ipWhitelist\[0\] "10\.0\.0\.1\/8" has host bits set/,
    );
    expect(() => parser.parse(['10.0.0.1/8'], 'accounts[2].ipWhitelist')).toThrow(
      /^accounts\[2\]\.ipWhitelist\[0\]/,
    );
    expect(() => parser.parse([], 'accounts[3].ipWhitelist')).toThrow(/accounts\[3\].*is empty/);
    expect(() => parser.parse('10.0.0.0/8', 'accounts[4].ipWhitelist')).toThrow(
      /accounts\[4\]\.ipWhitelist: must be an array/,
    );
  });
});
