import { checkOptions, KEY_STORE, type OptionChecks, wholeNumber } from '../options';
import { isPlausibleKey, KEY_MAX_LENGTH, KEY_MIN_LENGTH } from '../model/key-format';
import type { KeyStore } from '../model/key-record';

/**
 * Finding credentials in text that must not hold one (query values, path segments bound for a log
 * line), in time linear in the text: a single pass, no backtracking, so an input
 * full of `eyJ` or `.` costs what a plain one of the same length does.
 */

/** A typed secret key made by the key command: `sk_live_` or `sk_test_` and 20 or more characters. */
const TYPED_SECRET = /sk_(?:live|test)_[0-9A-Za-z]{20}/;
/** Anything starting like a secret key (`sk_` and a letter or digit), for text bound for a log. */
const SECRET_PREFIX = /(?:^|[^A-Za-z0-9])sk_[A-Za-z0-9]/i;

/**
 * True when `text` holds something shaped like a JWT: `eyJ` (a base64url JSON header), base64url
 * characters, a dot, base64url characters and a second dot. One pass: the state is whether the run
 * of base64url characters being read holds `eyJ`, and whether it follows such a run and its dot.
 */
export function containsTokenLike(text: string): boolean {
  let runHasHeader = false;
  let afterHeaderDot = false;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (isBase64Url(code)) {
      if (code === 0x65 && text.charCodeAt(i + 1) === 0x79 && text.charCodeAt(i + 2) === 0x4a) {
        runHasHeader = true;
      }
    } else if (code === 0x2e) {
      if (afterHeaderDot) return true;
      afterHeaderDot = runHasHeader;
      runHasHeader = false;
    } else {
      afterHeaderDot = false;
      runHasHeader = false;
    }
  }
  return false;
}

/** True when `text` holds a typed secret key or a token, wherever it stands in the text. */
export function containsSecretOrToken(text: string): boolean {
  return TYPED_SECRET.test(text) || containsTokenLike(text);
}

/** True when `value` is, whole, a secret or publishable key of the store (any shape of key). */
export function isKnownKey(keyStore: KeyStore, value: string): boolean {
  return (
    isPlausibleKey(value) &&
    (keyStore.findBySecretKey(value) !== undefined ||
      keyStore.findByPublishableKey(value) !== undefined)
  );
}

export interface PathRedactorOptions {
  /** Segments that are a key of this store, whatever their shape, are redacted. */
  keyStore?: KeyStore;
  /** Longer results are cut, with `…`. Defaults to 200. */
  maxLength?: number;
}

export const REDACTED = '[redacted]';

/** Keys of other tools may hold `/` (base64): runs of up to this many segments are looked up too. */
const MAX_SEGMENTS_PER_KEY = 4;

const PATH_REDACTOR_OPTION_CHECKS: OptionChecks<PathRedactorOptions> = {
  keyStore: KEY_STORE,
  maxLength: wholeNumber(1),
};

/**
 * Returns a function that makes a request path fit for a log line: each segment,
 * percent-decoded, that holds a typed secret key or a token, or that is a known key of the store
 * (looked up by digest), is replaced by `[redacted]`, and so is a run of up to four segments that
 * is a known key holding `/`. The result is capped, and nothing past the cap is looked at: the cost
 * is bounded whatever the path's length.
 */
export function createPathRedactor(options: PathRedactorOptions = {}): (path: string) => string {
  checkOptions('createPathRedactor()', options, PATH_REDACTOR_OPTION_CHECKS);
  const { keyStore } = options;
  const maxLength = options.maxLength ?? 200;
  const isKnown = (value: string): boolean => {
    if (keyStore === undefined) return false;
    const decoded = decodedSegment(value);
    try {
      return isKnownKey(keyStore, decoded) || (decoded !== value && isKnownKey(keyStore, value));
    } catch {
      // A store that cannot answer: the value may be a key, and a log line must never throw.
      return true;
    }
  };
  const isSecret = (segment: string): boolean => {
    const decoded = decodedSegment(segment);
    return SECRET_PREFIX.test(decoded) || containsTokenLike(decoded) || isKnown(segment);
  };
  /** Segments after `start` that, joined to it with `/`, make a known key; 0 when none do. */
  const knownRunAfter = (segments: readonly string[], start: number): number => {
    if (keyStore === undefined) return 0;
    let run = segments[start] ?? '';
    const last = Math.min(segments.length - 1, start + MAX_SEGMENTS_PER_KEY - 1);
    for (let end = start + 1; end <= last; end++) {
      run = `${run}/${segments[end] ?? ''}`;
      if (run.length > KEY_MAX_LENGTH) return 0;
      if (run.length >= KEY_MIN_LENGTH && isKnown(run)) return end - start;
    }
    return 0;
  };
  return function redactPath(path) {
    const segments = path.split('/');
    let redacted = '';
    for (let i = 0; i < segments.length && redacted.length <= maxLength; i++) {
      const segment = segments[i] ?? '';
      const joined = knownRunAfter(segments, i);
      const secret = joined > 0 || isSecret(segment);
      redacted += `${i === 0 ? '' : '/'}${secret ? REDACTED : segment}`;
      i += joined;
    }
    return redacted.length > maxLength ? `${redacted.slice(0, maxLength)}…` : redacted;
  };
}

function decodedSegment(segment: string): string {
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** `A-Z`, `a-z`, `0-9`, `-` and `_`. */
function isBase64Url(code: number): boolean {
  return (
    (code >= 0x61 && code <= 0x7a) ||
    (code >= 0x41 && code <= 0x5a) ||
    (code >= 0x30 && code <= 0x39) ||
    code === 0x2d ||
    code === 0x5f
  );
}
