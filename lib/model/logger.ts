/** The logging the kit needs; a pino logger fits. Objects logged never hold a secret. */
export interface Logger {
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
  /** Lets per-request logging skip building its fields when the level is off (pino has it). */
  isLevelEnabled?(level: 'info' | 'warn' | 'error'): boolean;
}
