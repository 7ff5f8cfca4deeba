-- Tollgate key store, schema version 1: accounts and their API keys (contract 13).
-- Only SHA-256 digests of secret keys are stored, never a secret.
--
-- Change tracking: every insert or update of an account or a key (other than last_used_at) takes
-- a new `version` from one sequence, and every delete leaves a row in `deletions`, so an instance
-- asks for "rows with version > V" and never reloads everything. The version trigger first takes
-- a transaction-level advisory lock, held until commit: writers are serialised, so versions become
-- visible in increasing order and a reader that saw version V has seen every version below it.
-- Each change is announced by NOTIFY tollgate_keys with a JSON payload {"table","id","version"}.

CREATE SEQUENCE tollgate_change_version AS bigint;

CREATE TABLE accounts (
  id text PRIMARY KEY
    CONSTRAINT accounts_id_format CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$'),
  -- NULL: not restricted. Never empty (that would deny every address).
  ip_whitelist text[]
    CONSTRAINT accounts_ip_whitelist_not_empty CHECK (cardinality(ip_whitelist) > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  version bigint NOT NULL
);

CREATE TABLE keys (
  id text PRIMARY KEY
    CONSTRAINT keys_id_format CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$'),
  account_id text NOT NULL REFERENCES accounts (id),
  role text NOT NULL DEFAULT 'administrator'
    CONSTRAINT keys_role_known CHECK (role IN ('level-1', 'level-2', 'level-3', 'administrator')),
  publishable_key text NOT NULL UNIQUE
    CONSTRAINT keys_publishable_key_format CHECK (
      publishable_key ~ '^[!-~]{20,200}$' AND publishable_key NOT LIKE 'sk\_%'
    ),
  secret_sha256 bytea NOT NULL UNIQUE
    CONSTRAINT keys_secret_sha256_length CHECK (octet_length(secret_sha256) = 32),
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz,
  revoked_at timestamptz,
  last_used_at timestamptz,
  version bigint NOT NULL
);

CREATE INDEX keys_account_id ON keys (account_id);
CREATE INDEX accounts_version ON accounts (version);
CREATE INDEX keys_version ON keys (version);

-- Rows deleted by hand: instances drop them when they see the deletion's version.
CREATE TABLE deletions (
  version bigint PRIMARY KEY,
  table_name text NOT NULL,
  id text NOT NULL
);

CREATE FUNCTION tollgate_next_version() RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  -- Held until commit: one writer at a time, so versions commit in increasing order.
  PERFORM pg_advisory_xact_lock(7403551201);
  RETURN nextval('tollgate_change_version');
END;
$$;

CREATE FUNCTION tollgate_versioned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.version := tollgate_next_version();
  IF TG_TABLE_NAME = 'accounts' AND TG_OP = 'UPDATE' THEN
    NEW.updated_at := now();
  END IF;
  PERFORM pg_notify('tollgate_keys',
    json_build_object('table', TG_TABLE_NAME, 'id', NEW.id, 'version', NEW.version)::text);
  RETURN NEW;
END;
$$;

CREATE FUNCTION tollgate_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v bigint := tollgate_next_version();
BEGIN
  INSERT INTO deletions (version, table_name, id) VALUES (v, TG_TABLE_NAME, OLD.id);
  PERFORM pg_notify('tollgate_keys',
    json_build_object('table', TG_TABLE_NAME, 'id', OLD.id, 'version', v, 'deleted', true)::text);
  RETURN OLD;
END;
$$;

CREATE TRIGGER accounts_versioned BEFORE INSERT OR UPDATE OF id, ip_whitelist ON accounts
  FOR EACH ROW EXECUTE FUNCTION tollgate_versioned();
-- last_used_at is left out: recording use is not a change of the key ring.
CREATE TRIGGER keys_versioned
  BEFORE INSERT OR UPDATE OF id, account_id, role, publishable_key, secret_sha256, expires_at, revoked_at
  ON keys FOR EACH ROW EXECUTE FUNCTION tollgate_versioned();
CREATE TRIGGER accounts_deleted AFTER DELETE ON accounts
  FOR EACH ROW EXECUTE FUNCTION tollgate_deleted();
CREATE TRIGGER keys_deleted AFTER DELETE ON keys
  FOR EACH ROW EXECUTE FUNCTION tollgate_deleted();
