import { createPublicKey, type KeyObject, verify } from 'node:crypto';
import { readFile } from 'node:fs/promises';

/**
 * The public keys a secret-scanning programme signs its reports with, read from its public-keys
 * document (`{"public_keys": [{"key_identifier", "key", "is_current"}]}`, `key` a PEM ECDSA P-256
 * public key), from a URL, a local file, or both.
 *
 * The keys are read on the first report and kept. A report signed with an identifier not among
 * them, shaped as the programme's are (64 hex digits), reads the document again, at most once per `refreshIntervalMs` after that first read,
 * whoever asks and however often: an attacker sending made-up identifiers cannot make the gateway hammer the programme's
 * server. Reports arriving while a read is under way wait for that one read.
 *
 * An identifier not among the keys is `unknown_key` when the sources were read: the programme does
 * not list it. When the last read of a source failed (no answer, a status other than 200, a
 * document that does not parse), the key may well be listed there: such a report cannot be checked
 * now, `keys_unavailable`, for the programme to send it again rather than drop it.
 */

export interface VerificationKeySources {
  /** The public-keys document's URL (GitHub's by default); `undefined`: none. */
  readonly url?: string | undefined;
  /** A local copy of the document (tests, air-gapped setups); `undefined`: none. */
  readonly file?: string | undefined;
  /** The shortest time between two reads of the sources. Defaults to 60 s. */
  readonly refreshIntervalMs?: number;
  /** How long one read of the URL may take. Defaults to 5 s. */
  readonly timeoutMs?: number;
}

/** The largest public-keys document read: GitHub's is about 2 KB. */
const MAX_DOCUMENT_BYTES = 256 * 1024;
const DEFAULT_REFRESH_INTERVAL_MS = 60_000;

/** What the gateway logs of each read of the keys (never a key). */
export type KeysRead =
  | { readonly outcome: 'done'; readonly keys: number }
  | { readonly outcome: 'failed'; readonly reason: string }
  /** An entry that is not an ECDSA P-256 key: not one the programme signs with today, left out. */
  | { readonly outcome: 'skipped'; readonly identifier: string };

/** A signature's check: only `verified` lets a report be read. */
export type SignatureCheck = 'verified' | 'unknown_key' | 'bad_signature' | 'keys_unavailable';

/** The programme's key identifiers: the hex SHA-256 of the key. Others never cause a read. */
const IDENTIFIER_SHAPE = /^[0-9a-f]{64}$/i;

export class VerificationKeys {
  private keys = new Map<string, KeyObject>();
  private reading: Promise<void> | undefined;
  private readOnce = false;
  private lastRefreshAt = Number.NEGATIVE_INFINITY;
  /** Whether a source failed at the last read: the keys known may then lack some listed. */
  private lastReadFailed = false;
  private readonly refreshIntervalMs: number;
  /** Entries skipped as not ECDSA P-256, logged once each. */
  private readonly skipped = new Set<string>();

  constructor(
    private readonly sources: VerificationKeySources,
    private readonly onRead: (read: KeysRead) => void = () => undefined,
  ) {
    if (sources.url === undefined && sources.file === undefined) {
      throw new TypeError('VerificationKeys: a URL or a file is required');
    }
    this.refreshIntervalMs = sources.refreshIntervalMs ?? DEFAULT_REFRESH_INTERVAL_MS;
  }

  /**
   * Whether `signature` (base64 DER ECDSA) over `body` verifies with the key named `identifier`.
   * The first check reads the sources; after that, an unknown identifier shaped as the
   * programme's reads them again first, unless they were read less than `refreshIntervalMs` ago.
   */
  async check(identifier: string, signature: string, body: Buffer): Promise<SignatureCheck> {
    let key = this.keys.get(identifier);
    if (key === undefined && (!this.readOnce || IDENTIFIER_SHAPE.test(identifier))) {
      await this.refresh();
      key = this.keys.get(identifier);
    }
    if (key === undefined) {
      // Only an identifier of the programme's shape can be listed in a document not read.
      return this.lastReadFailed && IDENTIFIER_SHAPE.test(identifier)
        ? 'keys_unavailable'
        : 'unknown_key';
    }
    const der = Buffer.from(signature, 'base64');
    try {
      return der.length > 0 && verify('sha256', body, { key, dsaEncoding: 'der' }, der)
        ? 'verified'
        : 'bad_signature';
    } catch {
      // A signature that is not DER at all.
      return 'bad_signature';
    }
  }

  /** Seconds until the sources may be read again (at least 1): when to send a report again. */
  retryAfterSeconds(now = Date.now()): number {
    return Math.max(1, Math.ceil((this.lastRefreshAt + this.refreshIntervalMs - now) / 1000));
  }

  /**
   * Reads the sources: the first time at once, then at most once per `refreshIntervalMs`, so that
   * the keys can be read at start and still once right after the programme adds a key.
   */
  private refresh(): Promise<void> {
    if (this.reading !== undefined) return this.reading;
    if (this.readOnce && Date.now() - this.lastRefreshAt < this.refreshIntervalMs) {
      return Promise.resolve();
    }
    if (this.readOnce) this.lastRefreshAt = Date.now();
    this.readOnce = true;
    this.reading = this.read().finally(() => {
      this.reading = undefined;
    });
    return this.reading;
  }

  /**
   * The keys of the sources, in place of those known: a key the programme withdrew is no longer
   * trusted. When a source fails, the keys already known are kept along with what was read.
   */
  private async read(): Promise<void> {
    const documents = await Promise.allSettled([
      ...(this.sources.url === undefined ? [] : [this.fetchDocument(this.sources.url)]),
      ...(this.sources.file === undefined ? [] : [readFile(this.sources.file, 'utf8')]),
    ]);
    const read = new Map<string, KeyObject>();
    let failed = false;
    for (const document of documents) {
      try {
        if (document.status === 'rejected') throw document.reason;
        const parsed = parseKeysDocument(document.value);
        for (const identifier of parsed.skipped) this.skip(identifier);
        for (const [identifier, key] of parsed.keys) read.set(identifier, key);
      } catch (error) {
        failed = true;
        this.onRead({ outcome: 'failed', reason: reasonOf(error) });
      }
    }
    const keys = failed ? new Map([...this.keys, ...read]) : read;
    this.keys = keys;
    this.lastReadFailed = failed;
    this.onRead({ outcome: 'done', keys: keys.size });
  }

  private skip(identifier: string): void {
    if (this.skipped.has(identifier)) return;
    this.skipped.add(identifier);
    this.onRead({ outcome: 'skipped', identifier });
  }

  private async fetchDocument(url: string): Promise<string> {
    const response = await fetch(url, {
      headers: { accept: 'application/json' },
      redirect: 'error',
      signal: AbortSignal.timeout(this.sources.timeoutMs ?? 5000),
    });
    if (!response.ok) throw new Error(`the keys URL answered ${String(response.status)}`);
    const text = await response.text();
    if (Buffer.byteLength(text) > MAX_DOCUMENT_BYTES) {
      throw new Error(`the keys document is over ${String(MAX_DOCUMENT_BYTES)} bytes`);
    }
    return text;
  }
}

/** A public-keys document's ECDSA P-256 keys, and the identifiers of its entries of other types. */
export interface KeysDocument {
  readonly keys: Map<string, KeyObject>;
  readonly skipped: readonly string[];
}

/**
 * The document's keys by identifier; throws when it is not a public-keys document. An entry of
 * another key type is skipped, not fatal: a key type the programme adds later must not stop the
 * gateway from learning its new P-256 keys.
 */
export function parseKeysDocument(text: string): KeysDocument {
  const document = JSON.parse(text) as unknown;
  const entries = (document as { public_keys?: unknown } | null)?.public_keys;
  if (!Array.isArray(entries)) throw new Error('the keys document has no public_keys list');
  const keys = new Map<string, KeyObject>();
  const skipped: string[] = [];
  for (const entry of entries as unknown[]) {
    const { key_identifier: identifier, key: pem } = (entry ?? {}) as Record<string, unknown>;
    if (typeof identifier !== 'string' || typeof pem !== 'string') {
      throw new Error('a public_keys entry lacks key_identifier or key');
    }
    const key = p256KeyOf(pem);
    if (key === undefined) {
      skipped.push(identifier);
      continue;
    }
    keys.set(identifier, key);
  }
  return { keys, skipped };
}

/** The programme signs with ECDSA P-256: any other key, or a PEM not read, is not one of its keys. */
function p256KeyOf(pem: string): KeyObject | undefined {
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch {
    return undefined;
  }
  return key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1'
    ? key
    : undefined;
}

function reasonOf(error: unknown): string {
  return error instanceof Error ? error.message : 'unreadable';
}
