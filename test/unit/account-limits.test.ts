import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { GATEWAY_LIMIT_SCOPES } from '../../gateway/keys-cli/limit-scopes';
import { limitScopesOf, ScopeCounter } from '../../lib/core/limits';
import { ConfigurationError } from '../../lib/errors';
import { tollgate } from '../../lib/express/tollgate';
import { FileKeyStore, KeyRing, sha256 } from '../../lib/keys/key-store';
import { AdmissionStore } from '../../lib/rate-limit/admission-store';
import type { AuthContext } from '../../lib/types';

/**
 * Per-account limit overrides where keys are loaded and where they are counted: the
 * keys file's rules (every fault names the account and the scope), the worker-built file store,
 * the gate's check of a store's scopes, `ScopeCounter.limitFor()` and its headers, and the limit
 * engine deciding at the limit that comes with each request.
 */

function documentWith(limits: unknown): unknown {
  return {
    accounts: [
      {
        id: 'acct_big',
        limits,
        keys: [
          {
            id: 'key_big_1',
            publishableKey: 'pk_test_big_one_0123456789',
            secretKeySha256: sha256('sk_big_1').toString('hex'),
          },
          {
            id: 'key_big_2',
            publishableKey: 'pk_test_big_two_0123456789',
            secretKeySha256: sha256('sk_big_2').toString('hex'),
          },
        ],
      },
      {
        id: 'acct_small',
        keys: [
          {
            id: 'key_small',
            publishableKey: 'pk_test_small_0123456789ab',
            secretKeySha256: sha256('sk_small').toString('hex'),
          },
        ],
      },
    ],
  };
}

const load = (limits: unknown): KeyRing =>
  KeyRing.fromDocument(documentWith(limits), 'keys.json', { limitScopes: GATEWAY_LIMIT_SCOPES });

describe('limits in a keys file', () => {
  it('gives every key of the account its limits, one frozen object shared by them', () => {
    const ring = load({ payments: 6000, authenticated: 300 });
    const first = ring.findById('key_big_1')?.limits;
    expect(first).toEqual({ authenticated: 300, payments: 6000 });
    expect(Object.isFrozen(first)).toBe(true);
    expect(ring.findBySecretKey('sk_big_2')?.limits).toBe(first);
    expect(ring.findById('key_small')?.limits).toBeUndefined();
  });

  it('takes an empty object as no override', () => {
    expect(load({}).findById('key_big_1')?.limits).toBeUndefined();
  });

  it.each([
    ['an unknown scope', { refunds: 10 }, 'accounts[0].limits.refunds', 'unknown scope "refunds"'],
    [
      'the per-IP public scope',
      { public: 100 },
      'accounts[0].limits.public',
      'scope "public" is counted per client IP',
    ],
    [
      "a per-IP scope of the gateway's",
      { 'checkout-create': 100 },
      'accounts[0].limits.checkout-create',
      'scope "checkout-create" is counted per client IP',
    ],
    ['0', { payments: 0 }, 'accounts[0].limits.payments', 'scope "payments": must be a whole'],
    [
      '1,000,001',
      { payments: 1_000_001 },
      'accounts[0].limits.payments',
      'scope "payments": must be a whole number from 1 to 1000000',
    ],
    ['a fraction', { authenticated: 2.5 }, 'accounts[0].limits.authenticated', 'a whole number'],
    ['a string', { payments: '6000' }, 'accounts[0].limits.payments', 'a whole number'],
    ['null as a value', { payments: null }, 'accounts[0].limits.payments', 'a whole number'],
    ['a list', [6000], 'accounts[0].limits', 'must be an object'],
    ['a number', 6000, 'accounts[0].limits', 'must be an object'],
    ['null', null, 'accounts[0].limits', 'must be an object'],
  ])('refuses %s, naming the account and the scope', (_, limits, where, problem) => {
    let message = '';
    try {
      load(limits);
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigurationError);
      message = (error as Error).message;
    }
    expect(message).toContain(`keys.json: ${where}: account "acct_big": `);
    expect(message).toContain(problem);
  });

  it('refuses any limits when the store was given no scopes (the default)', () => {
    expect(() => KeyRing.fromDocument(documentWith({ payments: 10 }), 'keys.json')).toThrow(
      'keys.json: accounts[0].limits.payments: account "acct_big": unknown scope "payments"; scopes with per-account limits: none',
    );
  });

  it('lists the per-account scopes in the refusal of an unknown one', () => {
    expect(() => load({ paymnets: 10 })).toThrow(
      'scopes with per-account limits: payments, authenticated',
    );
  });
});

describe('FileKeyStore with limits (built in the worker)', () => {
  let directory: string;
  beforeAll(() => {
    directory = mkdtempSync(path.join(tmpdir(), 'tollgate-limits-'));
  });
  afterAll(() => {
    rmSync(directory, { recursive: true, force: true });
  });
  const file = (name: string, limits: unknown): string => {
    const where = path.join(directory, name);
    writeFileSync(where, JSON.stringify(documentWith(limits)));
    return where;
  };

  it('loads the limits of the file into the packed ring, shared by the keys of the account', async () => {
    const store = await FileKeyStore.load(file('good.json', { payments: 3 }), {
      limitScopes: GATEWAY_LIMIT_SCOPES,
    });
    const limits = store.findBySecretKey('sk_big_1')?.limits;
    expect(limits).toEqual({ payments: 3 });
    expect(store.findById('key_big_2')?.limits).toBe(limits);
    expect(store.findById('key_small')?.limits).toBeUndefined();
    expect(store.limitScopes).toEqual(GATEWAY_LIMIT_SCOPES);
  });

  it('refuses a file whose account overrides a per-IP scope, naming the account and the scope', async () => {
    const bad = file('bad.json', { 'checkout-read': 5 });
    await expect(FileKeyStore.load(bad, { limitScopes: GATEWAY_LIMIT_SCOPES })).rejects.toThrow(
      new ConfigurationError(
        `${bad}: accounts[0].limits.checkout-read: account "acct_big": scope "checkout-read" is counted per client IP and cannot be set per account`,
      ),
    );
  });

  it('keeps the keys in force when a reload finds a bad limit', async () => {
    const where = file('reloaded.json', { payments: 3 });
    const store = await FileKeyStore.load(where, { limitScopes: GATEWAY_LIMIT_SCOPES });
    writeFileSync(where, JSON.stringify(documentWith({ payments: 0 })));
    await expect(store.reload()).rejects.toThrow('account "acct_big": scope "payments"');
    expect(store.findById('key_big_1')?.limits).toEqual({ payments: 3 });
  });
});

describe('tollgate() and the scopes of its key store', () => {
  const scopes = {
    orders: { limit: 10, per: 'account' as const },
    browse: { limit: 10, per: 'ip' as const },
  };

  it('accepts a store checked against its own scopes', () => {
    const keyStore = KeyRing.fromDocument(documentWith({ orders: 50 }), 'keys', {
      limitScopes: limitScopesOf(scopes),
    });
    expect(limitScopesOf(scopes)).toEqual({ orders: 'account', browse: 'ip' });
    const gate = tollgate({ keyStore, scopes });
    gate.close();
  });

  it.each([
    [{ refunds: 'account' as const }, '"refunds" is not a declared scope'],
    [{ browse: 'account' as const }, '"browse" is counted per ip here'],
  ])('refuses a store that takes overrides of %j', (limitScopes, problem) => {
    const keyStore = KeyRing.fromDocument(documentWith(undefined), 'keys', { limitScopes });
    expect(() => tollgate({ keyStore, scopes })).toThrow(
      new ConfigurationError(
        `tollgate: keyStore limitScopes: ${problem}; the store must accept overrides of the gate's per-account scopes only`,
      ),
    );
  });
});

describe('ScopeCounter.limitFor()', () => {
  const auth = (limits?: Readonly<Record<string, number>>): AuthContext => ({
    accountId: 'acct_1',
    keyId: 'key_1',
    role: 'administrator',
    credential: 'secret',
    ...(limits === undefined ? {} : { limits }),
  });
  let counter: ScopeCounter;
  beforeEach(() => {
    counter = new ScopeCounter({
      name: 'payments',
      definition: { limit: 5 },
      windowMs: 60_000,
      prefix: 'test:',
      redis: undefined,
      expectedInstances: undefined,
    });
  });
  afterEach(() => {
    counter.store.shutdown();
  });

  it("is the account's own limit for the scope, else the scope's", () => {
    expect(counter.limitFor(auth({ payments: 3 }))).toBe(3);
    expect(counter.limitFor(auth({ authenticated: 3 }))).toBe(5);
    expect(counter.limitFor(auth())).toBe(5);
    expect(counter.limitFor(undefined)).toBe(5);
  });

  it('decides and writes both headers with it', async () => {
    const own = auth({ payments: 2 });
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await counter.admit(own, '127.0.0.1'));
    expect(answers.map((answer) => answer.admitted)).toEqual([true, true, false]);
    const headers = new Map(answers[1]?.headers);
    expect(headers.get('RateLimit')).toMatch(/^"payments"; r=0; t=\d+$/);
    expect(headers.get('RateLimit-Policy')).toMatch(/^"payments"; q=2; w=60; pk=:/);
    const other = await counter.admit(auth(), '127.0.0.1');
    expect(new Map(other.headers).get('RateLimit-Policy')).toMatch(/q=5;/);
  });
});

describe('the limit engine with the limit given per request', () => {
  it('refuses a key at the limit it comes with, counting nothing, and admits it again under a higher one', async () => {
    const store = new AdmissionStore({ windowMs: 60_000 });
    const counters = store.countersFor('rl:payments:');
    const hits = async (count: number, limit: number): Promise<number[]> => {
      const totals = [];
      for (let i = 0; i < count; i++) {
        const { readings } = await store.admit([
          { counter: counters, key: 'account:a', limit, enforced: true },
        ]);
        totals.push(readings[0]?.count ?? 0);
      }
      return totals;
    };
    // Above the limit: the count the request would have made, not counted.
    expect(await hits(3, 2)).toEqual([1, 2, 3]);
    expect(await hits(2, 2)).toEqual([3, 3]);
    // The account's limit raised to 5: counted again, from where the window is.
    expect(await hits(4, 5)).toEqual([3, 4, 5, 6]);
    expect(await hits(1, 10)).toEqual([6]);
    store.shutdown();
  });
});
