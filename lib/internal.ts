/**
 * The kit's internal entry, for the sample gateway and its key command: the few pieces they share
 * with the kit that users do not get. It is not among the package's exports, so nothing here is a
 * promise to users; change it with the code that uses it. (Tests import from lib/ paths directly.)
 */
export {
  faultName,
  AuthenticationError,
  ConflictError,
  InternalError,
  InvalidRequestError,
  KeyAlreadyRolledError,
  KeyNotRollableError,
  NotFoundError,
  PayloadTooLargeError,
  UnsupportedMediaTypeError,
} from './errors';
export { parseCidrEntry } from './model/ip-address';
export { OWNER_ROLE, parseRole } from './model/roles';
export { keyPrefixType, keyShape } from './model/key-format';
export { editDistance } from './options';
export { HEADER_NAME_PATTERN } from './core/credentials';
export { DEFAULT_TOKEN_TTL_SECONDS, MIN_TOKEN_SECRET_BYTES } from './tokens/tokens';
export { parseHostPort } from './rate-limit/redis-client';
export { routeTemplateOf, traceRequest } from './express/request-span';
export {
  injectTraceContext,
  nameRequestSpan,
  recordAdmission,
  recordFailure,
  startUpstreamSpan,
  traceIds,
  TRACER_NAME,
} from './core/tracing';
export { isExpired } from './model/key-record';
export { IDEMPOTENCY_OUTCOMES } from './core/idempotency';
export { keepsAnswer, releaseAnswer } from './express/idempotency';
export {
  accountLimits,
  expiresAt,
  expiryTime,
  type Fail,
  identifier,
  ipWhitelist,
  keyPermissions,
  role,
} from './keys/key-rules';
export { isGraceSeconds, MAX_GRACE_SECONDS } from './keys/key-roll';
export { loadSharedFileKeyStore } from './keys/key-store';
export { TableKeyStore } from './keys/table-key-store';
export { noteUsesElsewhere, openSharedPgKeyStore } from './keys/pg-key-store';
export {
  RingBroadcast,
  RingFollower,
  type RingFollowerStart,
  type RingNews,
} from './keys/ring-follower';
export type { PackedTable } from './keys/packed-table';
export { HostClient } from './host/host-client';
export { HostIdempotencyStore } from './host/host-idempotency-store';
export { HostOperationError, HostUnavailableError } from './host/host-protocol';
export { HostState } from './host/host-state';
