#!/bin/sh
# Runs a script of the build (`scripts/run-built.sh dist/gateway/keys-cli.js list --file keys.json`)
# after building the project only when dist/ is out of date, so a command on a built checkout
# starts at once. Node replaces this shell (exec), so signals such as SIGTERM reach it directly.
# With no script, it only brings dist/ up to date (npm test runs it before the tests).
#
# dist/ is current when dist/.build-stamp (touched by the last step of `npm run build`) is newer
# than every file and folder the build reads; a folder's time changes when a file in it is added,
# removed or renamed, so those count too.
set -eu
root="$(cd "$(dirname "$0")/.." && pwd)"

stamp="$root/dist/.build-stamp"
inputs='lib gateway examples bench dashboard openapi scripts/esm-entry.cjs scripts/build-dashboard.cjs
  scripts/copy-openapi.cjs
  tsconfig.json tsconfig.build.json package.json package-lock.json'

stale() {
  [ -f "$stamp" ] || return 0
  for input in $inputs; do
    [ -e "$root/$input" ] || continue
    if [ -n "$(find "$root/$input" -newer "$stamp" -print -quit)" ]; then return 0; fi
  done
  return 1
}

if stale; then
  (cd "$root" && npm run build --silent)
fi

if [ "$#" -gt 0 ]; then
  exec node "$@"
fi
