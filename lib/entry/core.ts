/**
 * `tollgate/core`: the framework-free decision core, for a door of another framework. A door
 * builds `RequestFacts` from its request, asks `createGate()`'s gate to decide against a compiled
 * route policy, and answers with the decision: the `RateLimit` headers, `req.auth`'s identity, or
 * the error to render with `errorBody()` (root entry). The pieces below are what such a door needs
 * besides: route matching, client addresses, identity headers for an upstream, log redaction.
 */
export {
  createGate,
  type Gate,
  type GateOptions,
  type RoutePolicy,
  type CompiledPolicy,
  type Decision,
  type DecisionEvent,
  type Scopes,
  type ShadowFinding,
  type ShadowOptions,
  type IdempotencyPass,
} from '../core/gate';
export type { IdempotencyClaim, IdempotencyStep } from '../core/idempotency';
export type { StoredAnswer } from '../idempotency/answer';
export { IDEMPOTENCY_HEADER, REPLAYED_HEADER } from '../idempotency/key';
export type { RequestFacts } from '../core/facts';
export type { ScopeDefinition, ScopeUsage, HeaderPair } from '../core/limits';
export type { ScopeKey } from '../model/key-record';
export { DEFAULT_PUBLIC_KEY_HEADER, type SecurityEvent } from '../core/credentials';
export { IDENTITY_HEADERS, identityHeaders, type IdentityHeader } from '../core/identity';
export {
  RouteTable,
  DEFAULT_PARAMETER_PATTERN,
  type ParameterMatcher,
  type RouteLookup,
  type RouteTableEntry,
} from '../core/route-table';
export { canonicalClientIp, parseCidrEntry, type CidrRange } from '../model/ip-address';
export { IpWhitelist } from '../model/ip-whitelist';
export { OWNER_ROLE, isRole, parseRole, roleRank, roleSatisfies } from '../model/roles';
export { MAX_PERMISSIONS, PERMISSION_PATTERN, permissionNames } from '../model/permissions';
export { MAX_ACCOUNT_LIMIT } from '../keys/key-rules';
export { isPlausibleKey, keyShape, keyPrefixType, type KeyShape } from '../model/key-format';
export {
  createPathRedactor,
  containsSecretOrToken,
  containsTokenLike,
  REDACTED,
  type PathRedactorOptions,
} from '../core/credential-scan';
export {
  endRequestSpan,
  nameRequestSpan,
  startRequestSpan,
  traceContextHeaders,
  TRACER_NAME,
  type RequestEnd,
  type RequestSpan,
  type RequestStart,
} from '../core/tracing';
