#!/usr/bin/env bash
# The MCP conformance tool's server scenarios against /mcp/platform in both revisions svc serves,
# 2025-11-25 and 2026-07-28 (CONTRACT §10): every protocol scenario must pass; the scenarios that need
# the suite's own fixture tools are listed by name, with the reason, in mcp-conformance-run.ts.
# Needs Node 22 (.ci/prepare installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
.ci/prepare >/dev/null
DIR=.ci/node22/conformance
if [ ! -f "$DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js" ]; then
  flock /tmp/svc-npm.lock npm install --prefix "$DIR" --no-save --no-audit --no-fund --loglevel=error @modelcontextprotocol/conformance@0.2.0-alpha.12 >/dev/null
fi
exec timeout 900 node --import tsx .ci/extra.d/mcp-conformance-run.ts
