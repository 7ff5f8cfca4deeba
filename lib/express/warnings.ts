import type { Logger } from '../types';

/**
 * A misconfiguration found while serving (a middleware mounted in the wrong order, a setting that
 * trusts every client): told to the logger when there is one, else written once to stderr as a
 * Node process warning with a `TOLLGATE_…` code, so that an app without a logger still hears of it.
 * The caller says each distinct problem once; the message never holds a secret.
 */
export function warnMisconfiguration(
  logger: Logger | undefined,
  problem: string,
  fields: object,
  message: string,
): void {
  if (logger === undefined) {
    process.emitWarning(message, { code: warningCode(problem) });
  } else {
    logger.warn({ event: 'tollgate.misconfiguration', ...fields }, message);
  }
}

/** `requireRole_before_authenticate` -> `TOLLGATE_REQUIREROLE_BEFORE_AUTHENTICATE`. */
export function warningCode(problem: string): string {
  return `TOLLGATE_${problem.replace(/[^A-Za-z0-9]+/g, '_').toUpperCase()}`;
}

/**
 * Remembers which problems were told, so each is told once; bounded, as problem names come from
 * the kit's own errors but an unexpected error's name is not the kit's to choose.
 */
export class ToldOnce {
  private readonly told = new Set<string>();

  constructor(private readonly capacity = 64) {}

  /** `true` the first time `problem` is seen (while fewer than `capacity` were). */
  first(problem: string): boolean {
    if (this.told.has(problem) || this.told.size >= this.capacity) return false;
    this.told.add(problem);
    return true;
  }
}
