import { createHash } from 'node:crypto';

/**
 * What the tables the threads of one process keep in a SharedArrayBuffer have in common: a key
 * stored as its bytes and found by comparing them, and a lock taken around each step.
 */

/** The longest key stored as it is; a longer one is stored as its digest. */
export const KEY_BYTES = 47;
const DIGEST_BYTES = 32;
/** A stored key's kind: empty, a key of `kind - 1` ASCII bytes, or a digest. */
export const EMPTY_KIND = 0;
const DIGEST_KIND = 255;

/**
 * One thread's encoder of keys into a table's stored form: a kind byte, then the key's bytes. An
 * ASCII key of at most `KEY_BYTES` is stored as it is; any other as the SHA-256 digest of its
 * UTF-8 text, marked apart by its kind, so distinct keys stay distinct. The last key encoded is
 * kept (reused, so a call allocates nothing, and a key read then counted is encoded once).
 */
export class KeyBytes {
  private readonly scratch = new Uint8Array(KEY_BYTES);
  private kind = EMPTY_KIND;
  private lastKey: string | undefined;
  private lastHash = 0;

  /** `seed`, unknown to clients, keeps them from picking keys that all hash alike. */
  constructor(private readonly seed: number) {}

  /** Encodes `key` and returns its seeded hash: FNV-1a, then a final mix of its bits. */
  hash(key: string): number {
    if (key === this.lastKey) return this.lastHash;
    this.encode(key);
    const { scratch } = this;
    const length = keyLength(this.kind);
    let hash = (this.seed ^ 0x811c9dc5 ^ this.kind) >>> 0;
    for (let i = 0; i < length; i++) hash = Math.imul(hash ^ (scratch[i] ?? 0), 0x01000193);
    hash ^= hash >>> 16;
    hash = Math.imul(hash, 0x85ebca6b);
    hash ^= hash >>> 13;
    hash = Math.imul(hash, 0xc2b2ae35);
    hash ^= hash >>> 16;
    this.lastKey = key;
    this.lastHash = hash >>> 0;
    return this.lastHash;
  }

  /** Whether `memory` holds the encoded key: its kind at `at`, its bytes after it. */
  storedAt(memory: Uint8Array, at: number): boolean {
    if (memory[at] !== this.kind) return false;
    const { scratch } = this;
    const length = keyLength(this.kind);
    for (let i = 0; i < length; i++) {
      if (memory[at + 1 + i] !== scratch[i]) return false;
    }
    return true;
  }

  /** Stores the encoded key in `memory`: its kind at `at`, its bytes after it. */
  storeAt(memory: Uint8Array, at: number): void {
    memory[at] = this.kind;
    const length = keyLength(this.kind);
    for (let i = 0; i < length; i++) memory[at + 1 + i] = this.scratch[i] ?? 0;
  }

  private encode(key: string): void {
    const { scratch } = this;
    if (key.length <= KEY_BYTES) {
      let ascii = true;
      for (let i = 0; i < key.length; i++) {
        const code = key.charCodeAt(i);
        if (code > 0x7f) {
          ascii = false;
          break;
        }
        scratch[i] = code;
      }
      if (ascii) {
        this.kind = key.length + 1;
        return;
      }
    }
    scratch.set(createHash('sha256').update(key, 'utf8').digest());
    this.kind = DIGEST_KIND;
  }
}

/** How many key bytes a stored key of `kind` holds. */
function keyLength(kind: number): number {
  return kind === DIGEST_KIND ? DIGEST_BYTES : kind - 1;
}

/** Lock attempts by spinning before the thread sleeps. */
const SPINS = 64;
/** How long a waiting thread sleeps before it looks at the lock again, in milliseconds. */
const WAIT_MS = 2;
/**
 * A lock waited for this long is taken over: its holder is taken to have ended while holding it
 * (a thread stopped in the middle of a step), since a step holds it for microseconds.
 */
export const STALE_LOCK_MS = 1000;

/**
 * Takes the lock at `words[index]`: 0 is free, 1 held, 2 held with threads (maybe) waiting. A
 * thread spins a little, the holder being a few microseconds from done, then sleeps in
 * `Atomics.wait`, woken by the release or after `WAIT_MS`, and marks the lock 2 so that the
 * holder wakes it. After `STALE_LOCK_MS` it takes the lock as it is: a holder that ended holding
 * it would otherwise stop every thread that meets that lock, for good.
 */
export function lock(words: Int32Array, index: number): void {
  let state = Atomics.compareExchange(words, index, 0, 1);
  if (state === 0) return;
  for (let spin = 0; spin < SPINS; spin++) {
    if (Atomics.load(words, index) === 0) {
      state = Atomics.compareExchange(words, index, 0, 1);
      if (state === 0) return;
    }
  }
  if (state !== 2) state = Atomics.exchange(words, index, 2);
  const staleAt = performance.now() + STALE_LOCK_MS;
  while (state !== 0) {
    if (performance.now() > staleAt) return;
    Atomics.wait(words, index, 2, WAIT_MS);
    state = Atomics.exchange(words, index, 2);
  }
}

/** Releases the lock at `words[index]`, waking one waiting thread if any may wait. */
export function unlock(words: Int32Array, index: number): void {
  if (Atomics.sub(words, index, 1) !== 1) {
    Atomics.store(words, index, 0);
    Atomics.notify(words, index, 1);
  }
}
