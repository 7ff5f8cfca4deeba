import { createHash } from 'node:crypto';

export function sha256(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

/** Compared against when a publishable key is unknown, so that case takes the same time. */
export const ABSENT_DIGEST = sha256('tollgate: no such key');
