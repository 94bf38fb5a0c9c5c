#!/usr/bin/env bash
# `pap-conformance browser --mcp` against `pap-agent host serve`: the AIP-63 suite's tool hooks
# run through our MCP host by a paired device (one `install-mcp` mints: its bearer file is the
# one the suite reads). The suite serves its pages on this machine's loopback, so the host names
# http://127.0.0.1 for its browser (--name-origin); nothing else on loopback is reachable.
#
#   conformance/interop/mcp_suite.sh TARGET_DIR OUT_DIR
set -euo pipefail
target=$1
out=$(realpath -m "$2")
agent="$target/debug/pap-agent"
# Under OUT_DIR (not a 0700 temporary directory): as root, the browser's unprivileged user must
# pass through the parents of the state directory.
state="$out/state"
rm -rf "$state"
mkdir -p "$out"

"$agent" --state-dir "$state" identity init atlas.example > /dev/null
"$agent" --state-dir "$state" install-mcp --client cursor --config "$out/cursor-mcp.json"
bearer="$state/devices/cursor.bearer"

"$agent" --state-dir "$state" --name-origin http://127.0.0.1 host serve --listen 127.0.0.1:0 2> "$out/host.log" &
host=$!
trap 'kill "$host" 2> /dev/null || true' EXIT
# Readiness: the line the host prints once bound (60 s at most).
url=""
for _ in $(seq 600); do
    url=$(sed -n 's/^listening on \(http:.*\)$/\1/p' "$out/host.log")
    [ -n "$url" ] && break
    kill -0 "$host" 2> /dev/null || { cat "$out/host.log" >&2; echo "host serve ended before it listened" >&2; exit 1; }
    sleep 0.1
done
[ -n "$url" ] || { echo "host serve did not listen in 60 s" >&2; exit 1; }

status=0
"$target/debug/pap-conformance" browser --mcp "$url" --bearer-file "$bearer" \
    --json "$out/mcp-suite.json" --junit "$out/mcp-suite.xml" || status=1
kill -TERM "$host"
wait "$host" || { echo "host serve did not end cleanly" >&2; status=1; }
trap - EXIT
if pgrep -f -- "--pap-agent-browser=.*$state" > /dev/null; then
    echo "host serve left its browser running" >&2
    status=1
fi
exit "$status"
