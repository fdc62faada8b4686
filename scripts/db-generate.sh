#!/usr/bin/env bash
# Until the first release there is one migration, regenerated whole from src/db/tables (no deployed
# database has run an older one). After the first release, switch to plain `drizzle-kit generate`
# (incremental). flock keeps two developers on one machine from generating at once.
set -euo pipefail
cd "$(dirname "$0")/.."
exec flock /tmp/svc-drizzle.lock bash -c 'rm -rf migrations && npx drizzle-kit generate --name init'
