import {
  generateKey,
  keyShape,
  type KeyEnvironment,
  type KeyType,
} from '../../lib/model/key-format';
import { docBlock } from '../helpers/doc-blocks';

/**
 * The patterns docs/secret-scanning.md tells operators to register with GitHub, read from the
 * guide itself (the block marked `secret-scanning-patterns`), so that the guide is what is tested:
 * each matches every key `generateKey()` makes of its type and environment, whole, and nothing of
 * a corpus of near misses (other providers' tokens, cut or lengthened keys, other separators).
 */

interface Pattern {
  readonly name: string;
  readonly type: KeyType;
  readonly environment: KeyEnvironment;
  readonly regex: RegExp;
}

function documentedPatterns(): Pattern[] {
  return docBlock('secret-scanning-patterns')
    .code.split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const [name = '', source = ''] = line.trim().split(/\s+/);
      const type: KeyType = name.includes('publishable') ? 'publishable' : 'secret';
      const environment: KeyEnvironment = name.includes('live') ? 'live' : 'test';
      return { name, type, environment, regex: new RegExp(source, 'g') };
    });
}

/** The whole texts each pattern finds in `text`. */
function matchesIn(pattern: Pattern, text: string): string[] {
  return [...text.matchAll(pattern.regex)].map((match) => match[0]);
}

const SAMPLES = 500;
const KINDS: readonly [KeyType, KeyEnvironment][] = [
  ['secret', 'live'],
  ['secret', 'test'],
  ['publishable', 'live'],
  ['publishable', 'test'],
];

describe('the secret-scanning patterns of docs/secret-scanning.md', () => {
  const patterns = documentedPatterns();

  it('name one pattern for each key type and environment', () => {
    expect(patterns.map(({ type, environment }) => `${type} ${environment}`).sort()).toEqual(
      KINDS.map(([type, environment]) => `${type} ${environment}`).sort(),
    );
  });

  it.each(KINDS)(
    'match every %s %s key generateKey makes, whole, and no other pattern does',
    (type, environment) => {
      for (let i = 0; i < SAMPLES; i++) {
        const key = generateKey(type, environment);
        // As it sits in a file: quoted, after `=`, at the end of a line.
        const text = `STRIPE_KEY="${key}"\nkey=${key}\n${key}`;
        for (const pattern of patterns) {
          const own = pattern.type === type && pattern.environment === environment;
          expect(matchesIn(pattern, text)).toEqual(own ? [key, key, key] : []);
        }
      }
    },
  );

  it('match nothing of a corpus of near misses', () => {
    const corpus: string[] = [
      // Other providers' tokens.
      'sk_live_51H8x2bKZ4d9TeST0123456789abcdefghijklmnopqrstuvwx',
      'rk_live_51H8x2bKZ4d9TeST0123456789abcdefghijklmnopqrstuvwx',
      'ghp_0123456789abcdefghijklmnopqrstuvwxyz',
      'github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRS',
      'AKIAIOSFODNN7EXAMPLE',
      'xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx',
      'sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789',
      'zpka_0123456789abcdef0123456789abcdef_01234567',
    ];
    for (const [type, environment] of KINDS) {
      for (let i = 0; i < 50; i++) {
        const key = generateKey(type, environment);
        const [prefix = '', env = '', body = '', check = ''] = key.split('_');
        corpus.push(
          key.slice(0, -1), // cut short
          key.slice(1), // first character lost
          `${prefix}_${env}_${body.slice(1)}_${check}`, // 31 characters
          `${prefix}_${env}_${body}x_${check}`, // 33 characters
          `${prefix}_${env}_${body}_${check.slice(1)}`, // 5-character checksum
          `${key}0`, // a character added after
          `${key}_extra`,
          `x${key}`, // a character added before
          `_${key}`,
          `${prefix.toUpperCase()}_${env.toUpperCase()}_${body}_${check}`,
          `${prefix}-${env}-${body}-${check}`,
          `${prefix}_prod_${body}_${check}`,
          `${prefix}_${env}_${body.slice(0, 10)}-${body.slice(11)}_${check}`, // not base62
          `rk_${env}_${body}_${check}`,
        );
      }
    }
    for (const pattern of patterns) {
      const found = corpus.filter((text) => matchesIn(pattern, text).length > 0);
      expect({ pattern: pattern.name, found }).toEqual({ pattern: pattern.name, found: [] });
    }
  });

  it('match a key with a wrong checksum (the shape), which the gateway then finds corrupt', () => {
    const key = generateKey('secret', 'live');
    const last = key.at(-1) === 'A' ? 'B' : 'A';
    const wrong = `${key.slice(0, -1)}${last}`;
    const secretLive = patterns.find((p) => p.type === 'secret' && p.environment === 'live');
    expect(secretLive === undefined ? [] : matchesIn(secretLive, wrong)).toEqual([wrong]);
    expect(keyShape(wrong)).toBe('corrupt');
  });
});
