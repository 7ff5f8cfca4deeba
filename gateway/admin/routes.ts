/** The key-management routes: method, path, the action audited, and whether it writes. */
export const ADMIN_ROUTES = [
  { method: 'GET', path: '/admin/v1/accounts', action: 'accounts.list', writes: false },
  { method: 'POST', path: '/admin/v1/accounts', action: 'accounts.create', writes: true },
  { method: 'GET', path: '/admin/v1/accounts/:id/usage', action: 'accounts.usage', writes: false },
  {
    method: 'GET',
    path: '/admin/v1/accounts/:id/decisions',
    action: 'accounts.decisions',
    writes: false,
  },
  {
    method: 'PUT',
    path: '/admin/v1/accounts/:id/ip-whitelist',
    action: 'accounts.set_ip_whitelist',
    writes: true,
  },
  {
    method: 'PUT',
    path: '/admin/v1/accounts/:id/limits',
    action: 'accounts.set_limits',
    writes: true,
  },
  { method: 'POST', path: '/admin/v1/accounts/:id/keys', action: 'keys.create', writes: true },
  { method: 'PATCH', path: '/admin/v1/keys/:id', action: 'keys.update', writes: true },
  { method: 'POST', path: '/admin/v1/keys/:id/roll', action: 'keys.roll', writes: true },
  { method: 'POST', path: '/admin/v1/keys/:id/revoke', action: 'keys.revoke', writes: true },
] as const;

export type AdminAction = (typeof ADMIN_ROUTES)[number]['action'];

/** The actions served by the key store; usage and decisions are read from this instance. */
export type StoreAction = Exclude<AdminAction, 'accounts.usage' | 'accounts.decisions'>;
