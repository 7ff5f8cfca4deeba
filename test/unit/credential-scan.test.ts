import fc from 'fast-check';
import {
  containsSecretOrToken,
  containsTokenLike,
  createPathRedactor,
  REDACTED,
} from '../../lib/core/credential-scan';
import { credentialsInQuery } from '../../lib/core/credentials';
import { createFixtures } from '../helpers/fixtures';

/**
 * The credential scanners: they find what the regular expressions they
 * replace found, redact every known key whatever its shape, and cost time linear in their input,
 * so a path or query full of `eyJ` or `.` costs what a plain one does.
 */

/** The backtracking expression the scanner replaces: the reference for what it must find. */
const TOKEN_LIKE = /eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\./;

describe('containsTokenLike', () => {
  it.each([
    ['a JWT', 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJrIn0.c2ln', true],
    ['a JWT with an empty signature', 'eyJhbGciOiJub25lIn0.eyJ9.', true],
    ['a JWT inside other text', 'x=1&t=abc-eyJhbG.pay.sig', true],
    ['a header and one dot only', 'eyJhbGciOiJub25lIn0.eyJ9', false],
    ['a dot too early', 'ey.Jab.c.', false],
    ['a slash between the parts', 'eyJa/b.c.', false],
    ['a slash inside the payload', 'eyJa.b/c.', false],
    ['plain text', 'wallets', false],
    ['empty', '', false],
  ])('%s: %s', (_name, text, expected) => {
    expect(containsTokenLike(text)).toBe(expected);
    expect(TOKEN_LIKE.test(text)).toBe(expected);
  });

  it('agrees with the regular expression on any text made of the characters that matter', () => {
    const text = fc.string({
      unit: fc.constantFrom('e', 'y', 'J', '.', 'a', '-', '_', '/', '%', ' '),
      maxLength: 40,
    });
    fc.assert(
      fc.property(text, (value) => containsTokenLike(value) === TOKEN_LIKE.test(value)),
      { numRuns: 2000 },
    );
  });
});

describe('containsSecretOrToken', () => {
  it('finds a typed secret key and a token, not a publishable key', () => {
    const { keys } = createFixtures();
    expect(containsSecretOrToken(`x${keys.admin.secretKey}`)).toBe(true);
    expect(containsSecretOrToken('eyJa.b.c')).toBe(true);
    expect(containsSecretOrToken(keys.admin.publishableKey)).toBe(false);
  });
});

describe('createPathRedactor', () => {
  const { keys, ring } = createFixtures();
  const redact = createPathRedactor({ keyStore: ring });

  it.each([
    ['a typed secret key', keys.admin.secretKey],
    ['a publishable key', keys.level1.publishableKey],
    ['a token', 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJrIn0.c2ln'],
    [
      'an opaque secret key of another tool, percent-encoded',
      encodeURIComponent(keys.foreign.secretKey),
    ],
  ])('redacts %s in a segment, keeping the others', (_name, segment) => {
    expect(redact(`/api/v1/${segment}/status`)).toBe(`/api/v1/${REDACTED}/status`);
  });

  it('redacts an opaque key that is not of any recognisable shape only because it is known', () => {
    const unknownOpaque = 'opaque-value-0123456789abcdef';
    expect(redact(`/api/v1/${unknownOpaque}`)).toBe(`/api/v1/${unknownOpaque}`);
  });

  it('redacts a known key holding `/`, sent raw across two segments, as one run', () => {
    expect(keys.foreign.secretKey).toContain('/');
    expect(redact(`/api/v1/${keys.foreign.secretKey}/status`)).toBe(`/api/v1/${REDACTED}/status`);
    expect(redact(`/${keys.foreign.secretKey}`)).toBe(`/${REDACTED}`);
  });

  it('keeps runs of segments that are no known key', () => {
    expect(redact('/legacy.secret/0123456789+ABCDEX=/status')).toBe(
      '/legacy.secret/0123456789+ABCDEX=/status',
    );
  });

  it('looks at nothing past the cap: a key beyond it is cut, not logged', () => {
    const path = `/${'a/'.repeat(150)}${keys.admin.secretKey}`;
    const logged = redact(path);
    expect(logged).toHaveLength(201);
    expect(logged).not.toContain(keys.admin.secretKey.slice(0, 12));
  });

  it('redacts, and never throws, when the key store cannot answer', () => {
    const failing = createPathRedactor({
      keyStore: {
        findBySecretKey: () => {
          throw new Error('store down');
        },
        findByPublishableKey: () => undefined,
        findByKeyPair: () => undefined,
        findById: () => undefined,
      },
    });
    const logged = failing('/api/v1/opaque-value-0123456789abcdef');
    expect(logged).toContain(REDACTED);
    expect(logged).not.toContain('opaque-value');
    // Too short to be a key: nothing to ask the store.
    expect(failing('/healthz')).toBe('/healthz');
  });

  it('caps the result', () => {
    expect(redact(`/${'a'.repeat(500)}`)).toHaveLength(201);
  });
});

/**
 * The fastest of `runs` samples of the time of `batch` calls of `fn`, in ms: on a shared, noisy
 * machine the fastest sample is the one least disturbed by others (and by garbage collection).
 * Many short samples rather than few long ones: a 64 KB input allocates four times what a 16 KB one
 * does, so a long batch of it meets a scavenge more often (with the whole suite running in the same
 * worker, 11 batches of 10 once measured 7.4 where the scan alone measures 4.0).
 */
function fastestMs(fn: () => unknown, runs = 40, batch = 2): number {
  let fastest = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) {
    const started = process.hrtime.bigint();
    for (let j = 0; j < batch; j++) fn();
    fastest = Math.min(fastest, Number(process.hrtime.bigint() - started) / 1e6);
  }
  return fastest;
}

describe('scan cost grows linearly with the input', () => {
  const { ring } = createFixtures();
  const redact = createPathRedactor({ keyStore: ring, maxLength: Number.MAX_SAFE_INTEGER });
  const scanners: [string, (text: string) => unknown][] = [
    ['the path redactor', (text) => redact(`/${text}`)],
    ['the query-credential detector', (text) => credentialsInQuery(`/healthz?q=${text}`)],
    ['containsTokenLike', containsTokenLike],
  ];
  const inputs: [string, (length: number) => string][] = [
    ['eyJ repeated', (length) => 'eyJ'.repeat(Math.ceil(length / 3)).slice(0, length)],
    ['. repeated', (length) => '.'.repeat(length)],
    ['eyJ. repeated', (length) => 'eyJ.'.repeat(Math.ceil(length / 4)).slice(0, length)],
  ];

  for (const [scanner, scan] of scanners) {
    it.each(inputs)(`${scanner}: 64 KB of %s costs at most 6 times 16 KB of it`, (_input, make) => {
      const small = make(16 * 1024);
      const large = make(64 * 1024);
      // Warm up, so the first measurement does not pay for compilation.
      for (let i = 0; i < 3; i++) {
        scan(small);
        scan(large);
      }
      // Noise on a shared machine only ever adds time: the best of three measured ratios is the
      // one least disturbed. Quadratic growth would give about 16 in every one of them.
      const ratios = [0, 1, 2].map(
        () =>
          fastestMs(() => scan(large)) /
          Math.max(
            fastestMs(() => scan(small)),
            0.001,
          ),
      );
      const ratio = Math.min(...ratios);
      expect(ratio).toBeLessThanOrEqual(6);
    });
  }
});
