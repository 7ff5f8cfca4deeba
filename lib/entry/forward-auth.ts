/**
 * `tollgate/forward-auth`: the forward-authentication door on its own, and the building blocks of
 * the reverse proxies' dialects (Traefik and Caddy's forward auth, nginx's `auth_request`, Envoy's
 * `ext_authz`), for a door of your own. `gate.forwardAuth()` in the root entry is the usual way in.
 */
export {
  forwardAuthDoor,
  type ForwardAuthContext,
  type ForwardAuthOptions,
  type ForwardAuthRoute,
} from '../express/forward-auth';
export {
  allowAnswer,
  refusalAnswer,
  originalRequest,
  FORWARD_AUTH_DIALECTS,
  type AllowOptions,
  type AuthRequest,
  type AuthzAnswer,
  type ForwardAuthDialect,
  type OriginalRequest,
} from '../forward-auth/dialects';
