#!/usr/bin/env bash
# The MCP conformance tool's authorization-server scenarios against our authorization server:
# metadata endpoint and authorization code grant. Needs Node 22 (.ci/prepare installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
.ci/prepare >/dev/null
DIR=.ci/node22/conformance
if [ ! -f "$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js" ]; then
  flock /tmp/svc-npm.lock npm install --prefix "$DIR" --no-save --no-audit --no-fund --loglevel=error @modelcontextprotocol/conformance@0.2.0-alpha.12 >/dev/null
fi
exec timeout 300 node --import tsx .ci/extra.d/oauth-conformance-run.ts
