/**
 * `tollgate/core`: the framework-free decision core, for a door of another framework
 * (docs/core.md writes one on `node:http`). A door builds `RequestFacts` from its request, asks
 * `createGate()`'s gate to decide against a compiled route policy, and answers with the decision:
 * its headers and `req.auth`'s identity, or the error to render with `errorBody()` (root entry).
 * Besides: route matching, client addresses, identity headers for an upstream, log redaction.
 * The gate's options and the errors are the root entry's types.
 */
export {
  createGate,
  type Gate,
  type RoutePolicy,
  type CompiledPolicy,
  type Decision,
  type IdempotencyPass,
} from '../core/gate';
export type { IdempotencyClaim, IdempotencyStep } from '../core/idempotency';
export type { StoredAnswer } from '../idempotency/answer';
export { IDEMPOTENCY_HEADER, REPLAYED_HEADER } from '../idempotency/key';
export type { RequestFacts } from '../core/facts';
export type { RequestSpan } from '../core/tracing';
export type { ScopeUsage, HeaderPair } from '../core/limits';
export { DEFAULT_PUBLIC_KEY_HEADER } from '../core/credentials';
export { identityHeaders, type IdentityHeader } from '../core/identity';
export {
  RouteTable,
  type ParameterMatcher,
  type RouteLookup,
  type RouteTableEntry,
} from '../core/route-table';
export { canonicalClientIp } from '../model/ip-address';
export { createPathRedactor, type PathRedactorOptions } from '../core/credential-scan';
