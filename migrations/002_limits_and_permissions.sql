-- Tollgate key store, schema version 2: per-account limit overrides and restricted keys
-- (contract 16).
--
-- accounts.limits: NULL, the gateway's defaults; otherwise a JSON object of scope name to a whole
-- number of requests per window, from 1 to 1,000,000. Which scope names exist is the gateway's
-- to say (an unknown or per-IP scope is refused by the write API and by the loader), so the column
-- checks only the shape.
--
-- keys.permissions: NULL, the key may do all its role allows; otherwise the permissions it holds
-- (`wallets:read`, `payouts:write`, ...), never empty (revoke a key that should do nothing). The
-- names are checked by the write API and the loader against the known permissions.

ALTER TABLE accounts ADD COLUMN limits jsonb
  CONSTRAINT accounts_limits_object CHECK (jsonb_typeof(limits) = 'object');

ALTER TABLE keys ADD COLUMN permissions text[]
  CONSTRAINT keys_permissions_not_empty CHECK (cardinality(permissions) > 0)
  CONSTRAINT keys_permissions_format CHECK (
    cardinality(permissions) = 0 OR array_to_string(permissions, ' ') ~ '^[a-z][a-z0-9_-]{0,31}:[a-z][a-z0-9_-]{0,31}( [a-z][a-z0-9_-]{0,31}:[a-z][a-z0-9_-]{0,31})*$'
  );

-- A change of either is a change of the key ring: versioned and announced like the others.
DROP TRIGGER accounts_versioned ON accounts;
CREATE TRIGGER accounts_versioned BEFORE INSERT OR UPDATE OF id, ip_whitelist, limits ON accounts
  FOR EACH ROW EXECUTE FUNCTION tollgate_versioned();
DROP TRIGGER keys_versioned ON keys;
CREATE TRIGGER keys_versioned
  BEFORE INSERT OR UPDATE OF id, account_id, role, publishable_key, secret_sha256, expires_at,
    revoked_at, permissions
  ON keys FOR EACH ROW EXECUTE FUNCTION tollgate_versioned();
