import { hash } from 'node:crypto';

/** One-shot (`crypto.hash`, Node 20.12+): no `Hash` object per presented key. */
export function sha256(value: string): Buffer {
  return hash('sha256', value, 'buffer');
}

/** Compared against when a publishable key is unknown, so that case takes the same time. */
export const ABSENT_DIGEST = sha256('tollgate: no such key');
