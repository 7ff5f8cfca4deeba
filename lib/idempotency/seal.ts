import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  hkdfSync,
  randomBytes,
} from 'node:crypto';

/**
 * What the idempotency store holds is unreadable without the secret: a key's record is named by
 * a SHA-256 digest of the account and the key, a request's fingerprint is an HMAC of its method,
 * routed path and body digest (a guessable body cannot be confirmed from it), and a stored answer
 * is sealed with AES-256-GCM. Both keys are derived (HKDF-SHA-256) from one secret, the token
 * secret in the gateway. The sealed bytes are bound to the record's name and fingerprint, so an
 * answer copied to another account's or another request's record fails to open and is never
 * replayed.
 *
 * A record's name does not depend on the secret: after the secret changes, a retry still finds
 * its key's record, whose outcome is then unknown (never replayed, never forwarded again). Records
 * carry the secret's tag, so that the rule tells a record written under another secret from a
 * key reused with another request.
 */

const SALT = Buffer.from('tollgate idempotency', 'utf8');
const IV_BYTES = 12;
export const SECRET_TAG_LENGTH = 8;
const TAG_BYTES = 16;

export class IdempotencySeal {
  private readonly sealKey: Buffer;
  private readonly nameKey: Buffer;

  constructor(secret: string | Buffer) {
    const material = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : secret;
    this.sealKey = Buffer.from(hkdfSync('sha256', material, SALT, 'answers', 32));
    this.nameKey = Buffer.from(hkdfSync('sha256', material, SALT, 'names', 32));
    this.secretTag = createHmac('sha256', this.nameKey)
      .update('secret tag', 'utf8')
      .digest('base64url')
      .slice(0, SECRET_TAG_LENGTH);
  }

  /** A short tag of the secret (8 base64url characters), the same under the same secret. */
  readonly secretTag: string;

  /** A record's name: 43 base64url characters, one per account and key, whatever the secret. */
  recordName(accountId: string, key: string): string {
    return createHash('sha256').update(`key\0${accountId}\0${key}`, 'utf8').digest('base64url');
  }

  /**
   * The fingerprint of a request (its method, routed path and body): 43 base64url characters. A
   * trailing slash of the path does not count: a route answers with or without it.
   */
  fingerprint(method: string, path: string, body: Buffer | undefined): string {
    const routed = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
    const bodyDigest = createHash('sha256')
      .update(body ?? EMPTY)
      .digest();
    return createHmac('sha256', this.nameKey)
      .update(`request\0${method}\0${routed}\0`, 'utf8')
      .update(bodyDigest)
      .digest('base64url');
  }

  /** `plain` sealed and bound to `context`, as base64: IV, tag, ciphertext. */
  seal(plain: Buffer, context: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.sealKey, iv);
    cipher.setAAD(Buffer.from(context, 'utf8'));
    const sealed = Buffer.concat([cipher.update(plain), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64');
  }

  /** What `seal` sealed under the same secret and `context`; `undefined` otherwise. */
  open(sealed: string, context: string): Buffer | undefined {
    const bytes = Buffer.from(sealed, 'base64');
    if (bytes.length < IV_BYTES + TAG_BYTES) return undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.sealKey, bytes.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(context, 'utf8'));
      decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
      return Buffer.concat([
        decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)),
        decipher.final(),
      ]);
    } catch {
      return undefined;
    }
  }
}

const EMPTY = Buffer.alloc(0);
