import { ConfigurationError } from './errors';

/**
 * Loads an optional peer dependency when a feature needs it: Redis users install `ioredis`,
 * database key stores `pg`; everyone else does not pay for them. A missing one is a clear
 * configuration error, not a crash at import time.
 */
export function requireOptional(name: 'ioredis', feature: string): typeof import('ioredis');
export function requireOptional(name: 'pg', feature: string): typeof import('pg');
export function requireOptional(name: string, feature: string): unknown {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only when used
    return require(name) as unknown;
  } catch (error) {
    if ((error as { code?: unknown }).code === 'MODULE_NOT_FOUND') {
      throw new ConfigurationError(`${feature} needs the package ${name}: npm install ${name}`);
    }
    throw error;
  }
}
