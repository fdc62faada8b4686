#!/usr/bin/env bash
# `npm run lint`: the three checks that keep the code's shape (docs/architecture.md), each run even when
# an earlier one fails, so one pass shows every finding. Exit status 1 on any finding.
#   ESLint, typed (eslint.config.js) · Prettier's check (.prettierrc.json) · dependency-cruiser's layer
#   rules (.dependency-cruiser.cjs) · no diary words in docs/ and code comments (scripts/check-diary-words.mjs).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=node_modules/.bin
status=0
step() { # $1 = name, rest = command
  local name=$1 started=$SECONDS
  shift
  if "$@"; then echo "lint: $name ok ($((SECONDS - started)) s)"; else echo "lint: $name FAILED"; status=1; fi
}
step eslint "$bin/eslint" --max-warnings 0 .
step prettier npm run --silent format:check
step dependency-cruiser npm run --silent lint:deps
step diary-words node scripts/check-diary-words.mjs
exit $status
