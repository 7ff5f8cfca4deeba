import type { IdempotencyStore, IdempotencyStoreState } from '../idempotency/store';
import {
  checkOptions,
  isNonEmptyString,
  objectWith,
  type OptionChecks,
  required,
  wholeNumber,
} from '../options';
import type { HostClient } from './host-client';

/**
 * Idempotency records kept on the host thread, shared by every worker of the process that names
 * the same store: each operation runs there in one synchronous step in a `MemoryIdempotencyStore`,
 * so one claim of a name wins across all of them. The host's `IdempotencyStoreError('full')`
 * arrives as the same error; a host that cannot be reached fails with `HostUnavailableError`.
 */

export interface HostIdempotencyStoreOptions {
  readonly host: HostClient;
  /** The store's name on the host: the workers that give the same name share its records. */
  readonly name: string;
  /** Records kept at most; the first worker to name the store decides. Defaults to 100 000. */
  readonly maxRecords?: number | undefined;
  /** Characters of records kept at most; the first worker decides. Defaults to 64 MiB. */
  readonly maxCharacters?: number | undefined;
}

const HOST_IDEMPOTENCY_STORE_OPTION_CHECKS: OptionChecks<HostIdempotencyStoreOptions> = {
  host: required(objectWith('a HostClient', ['claim', 'settle', 'release', 'registerRecords'])),
  name: required(isNonEmptyString),
  maxRecords: wholeNumber(1),
  maxCharacters: wholeNumber(1),
};

export class HostIdempotencyStore implements IdempotencyStore {
  private readonly host: HostClient;
  /** The store's number on this worker's port. */
  private readonly records: number;

  constructor(options: HostIdempotencyStoreOptions) {
    checkOptions('HostIdempotencyStore', options, HOST_IDEMPOTENCY_STORE_OPTION_CHECKS);
    this.host = options.host;
    this.records = options.host.registerRecords(options.name, {
      maxRecords: options.maxRecords,
      maxCharacters: options.maxCharacters,
    });
  }

  /** The records are in the process's memory, as a `MemoryIdempotencyStore`'s. */
  state(): IdempotencyStoreState {
    return 'memory';
  }

  claim(name: string, claim: string, ttlMs: number): Promise<string | undefined> {
    return this.host.claim(this.records, name, claim, ttlMs);
  }

  settle(name: string, claim: string, record: string, ttlMs: number): Promise<boolean> {
    return this.host.settle(this.records, name, claim, record, ttlMs);
  }

  release(name: string, claim: string): Promise<void> {
    return this.host.release(this.records, name, claim);
  }
}
