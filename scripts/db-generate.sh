#!/usr/bin/env bash
# Until the first release the schema is one migration regenerated whole from src/db/tables (no deployed
# database has run an older one), followed by the hand-written SQL drizzle-kit cannot express
# (src/db/custom/*.sql: triggers), each as a drizzle "custom" migration so the journal tracks it.
# After the first release, switch to plain `drizzle-kit generate` (incremental).
# flock keeps two developers on one machine from generating at once.
set -euo pipefail
cd "$(dirname "$0")/.."
exec flock /tmp/svc-drizzle.lock bash -c '
  set -euo pipefail
  rm -rf migrations
  npx drizzle-kit generate --name init
  for f in src/db/custom/*.sql; do
    name=$(basename "$f" .sql | tr - _)
    npx drizzle-kit generate --custom --name "$name" >/dev/null
    cat "$f" > "$(ls migrations/*_"$name".sql)"
  done
'
