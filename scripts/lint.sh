#!/usr/bin/env bash
# `npm run lint`: the checks that keep the code's shape (docs/architecture.md), each run even when an
# earlier one fails, so one pass shows every finding. Exit status 1 on any finding.
#   eslint: ESLint, typed (eslint.config.js) · prettier: Prettier's check (.prettierrc.json) ·
#   dependency-cruiser: the layer rules (.dependency-cruiser.cjs) · diary-words: no diary words in docs/
#   and code comments (scripts/check-diary-words.mjs).
# With step names as arguments, only those run (.ci/run runs ESLint beside the others).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=node_modules/.bin
status=0
only=" $* "
step() { # $1 = name, rest = command
  local name=$1 started=$SECONDS
  shift
  [ "$only" = "  " ] || [[ "$only" == *" $name "* ]] || return 0
  if "$@"; then echo "lint: $name ok ($((SECONDS - started)) s)"; else echo "lint: $name FAILED"; status=1; fi
}
step eslint "$bin/eslint" --max-warnings 0 .
step prettier npm run --silent format:check
step dependency-cruiser npm run --silent lint:deps
step diary-words node scripts/check-diary-words.mjs
exit $status
