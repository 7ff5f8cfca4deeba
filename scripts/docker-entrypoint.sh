#!/bin/sh
# The image's entry point. Started as root (the default), it runs the command as the owner of the
# keys file (TOLLGATE_KEYS_FILE, or the folder that holds it), so a file the key command wrote on
# the host (mode 0600, owned by whoever ran it) is readable whatever that user's id:
#   - owned by a user other than root: run as that user and group;
#   - owned by root but readable by the image's `node` user (1000), or no keys file: run as node;
#   - owned by root and readable by root only: run as root with no capability at all (it can read
#     the files root owns, and nothing more than an unprivileged user can).
# Always with no_new_privs. Started as another user (docker run --user, Kubernetes runAsUser), it
# runs the command as it is.
set -eu

if [ "$(id -u)" != 0 ]; then
  exec "$@"
fi

as_node='--reuid=1000 --regid=1000 --clear-groups'
keys="${TOLLGATE_KEYS_FILE:-}"
owner_of="$keys"
if [ -n "$keys" ] && [ ! -e "$keys" ]; then owner_of="$(dirname "$keys")"; fi

# exec keeps the command as PID 1, so `docker compose kill -s SIGHUP` (reload) and SIGTERM (drain)
# reach the gateway itself.
if [ -n "$owner_of" ] && [ -e "$owner_of" ] && [ "$(stat -c %u "$owner_of")" != 0 ]; then
  exec setpriv --reuid="$(stat -c %u "$owner_of")" --regid="$(stat -c %g "$owner_of")" \
    --clear-groups --no-new-privs -- "$@"
fi
# shellcheck disable=SC2086
if [ -z "$keys" ] || [ ! -e "$keys" ] || setpriv $as_node -- test -r "$keys"; then
  exec setpriv $as_node --no-new-privs -- "$@"
fi
echo "tollgate: $keys is readable by root only: running as root without capabilities" >&2
exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
