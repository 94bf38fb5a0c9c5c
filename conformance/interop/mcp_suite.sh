#!/usr/bin/env bash
# `pap-conformance browser --mcp` against `pap-agent host serve`: the AIP-63 suite's tool hooks
# run through our MCP host by a paired device (one `install-mcp` mints: its bearer file is the
# one the suite reads). The suite serves its pages on this machine's loopback, on ports of one
# range, which the host names for its browser (--name-origin takes explicit ports, review N17);
# nothing else on loopback is reachable.
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

# The host's stderr comes through a pipe: the line it prints once bound is the readiness signal
# (60 s at most), and the rest is kept in host.log.
pages=47100-47199
coproc HOST { exec "$agent" --state-dir "$state" --name-origin "http://127.0.0.1:$pages" host serve --listen 127.0.0.1:0 2>&1 > /dev/null; }
host=$HOST_PID
# A descriptor of our own: bash does not pass a coprocess's to background jobs.
exec {from_host}<&"${HOST[0]}"
: > "$out/host.log"
trap 'kill "$host" 2> /dev/null || true' EXIT
url=""
while IFS= read -r -t 60 line <&"$from_host"; do
    echo "$line" >> "$out/host.log"
    case "$line" in
        "listening on "*) url=${line#listening on }; break ;;
    esac
done
[ -n "$url" ] || { cat "$out/host.log" >&2 2> /dev/null; echo "host serve did not listen in 60 s" >&2; exit 1; }
cat <&"$from_host" >> "$out/host.log" &

status=0
"$target/debug/pap-conformance" browser --mcp "$url" --bearer-file "$bearer" --pages-ports "$pages" \
    --json "$out/mcp-suite.json" --junit "$out/mcp-suite.xml" || status=1
kill -TERM "$host"
wait "$host" || { echo "host serve did not end cleanly" >&2; status=1; }
trap - EXIT
if pgrep -f -- "--pap-agent-browser=.*$state" > /dev/null; then
    echo "host serve left its browser running" >&2
    status=1
fi
exit "$status"
