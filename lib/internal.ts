/**
 * The kit's internal entry, for the sample gateway, its key command, the benchmarks and the tests:
 * pieces they share with the kit that users do not get. It is not among the package's exports, so
 * nothing here is a promise to users; change it with the code that uses it.
 */
export { faultName } from './errors';
export type { CompiledPolicy } from './core/gate';
export {
  accountKey,
  admitAll,
  readUsage,
  ScopeCounter,
  type LimitFinding,
  type LimitUse,
} from './core/limits';
export {
  AdmissionStore,
  ADMIT_SCRIPT,
  READ_SCRIPT,
  LocalCounters,
  type AdmissionOutcome,
  type AdmissionStoreOptions,
  type CounterRequest,
} from './rate-limit/admission-store';
export {
  presentedCredential,
  credentialResolver,
  refuseCredentialsInQuery,
  hasBrowserSignals,
  QUERY_CREDENTIAL_PARAMS,
  HEADER_NAME_PATTERN,
  type PresentedCredential,
} from './core/credentials';
export { keyPairResolver, type KeyPairResolverOptions } from './core/key-pair';
export { isKnownKey } from './core/credential-scan';
export { FULL_LOAD_ROWS } from './keys/pg-key-store';
export { DEFAULT_TOKEN_TTL_SECONDS, MIN_TOKEN_SECRET_BYTES } from './tokens/tokens';
export { retryAfterSeconds } from './rate-limit/window';
export { redisCommandFn, scriptSha1, type RedisCommandFn } from './rate-limit/redis-commands';
export { parseHostPort } from './rate-limit/redis-client';
export { CommandBatch } from './rate-limit/command-batch';
export { headersTruncated } from './express/request-shape';
export { parseJsonObject } from './express/json-body';
