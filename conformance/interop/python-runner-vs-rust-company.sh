#!/usr/bin/env bash
# The public Python reference's conformance runner (a PAP agent nobody here wrote) against our
# reference company, over real TLS on 127.0.0.1, as ../shared/interop/README.md describes.
#
#   conformance/interop/python-runner-vs-rust-company.sh PYTHON PAP_COMPANY_BINARY OUT_DIR [CASE...]
#
# PYTHON is a venv's python with ../shared/interop/requirements.txt installed. Default cases: the
# three web cases plus security.browser-assertion-at-token-endpoint. Writes OUT_DIR/junit.xml and
# the logs; exits with the runner's status. Every process it starts is stopped on exit.
set -euo pipefail

python=$(realpath -s "$1") company_bin=$(realpath -s "$2") out=$(realpath -m "$3")
shift 3
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
interop=$(cd "$repo/../shared/interop" && pwd)
mkdir -p "$out"
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
    cases=(lifecycle.browser-joins-session lifecycle.browser-assertion-refused
           operations.web-confirm-at-most-once security.browser-assertion-at-token-endpoint)
fi

# Free loopback ports, chosen by the kernel.
read -r company_port admin_port agent_port < <("$python" - <<'PY'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)

# rcgen-made certificates: a throwaway CA and one leaf for the company and the runner's agent.
"$company_bin" dev-certs "$out/certs" shop.example atlas.example

company_pid=
cleanup() {
    if [ -n "$company_pid" ] && kill -0 "$company_pid" 2>/dev/null; then
        kill "$company_pid" && wait "$company_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT

"$company_bin" serve --config "$repo/company/shop.example.toml" \
    --listen "127.0.0.1:$company_port" --cert "$out/certs/cert.pem" --key "$out/certs/key.pem" \
    --admin-listen "127.0.0.1:$admin_port" --trust-ca "$out/certs/ca.pem" \
    --resolve "atlas.example=127.0.0.1:$agent_port" > "$out/company.log" 2>&1 &
company_pid=$!

# Ready when the company says it serves the operator API (its last start-up line), or never.
if ! timeout 30 grep -q -m1 "serving the operator API" <(tail -n +1 -f "$out/company.log" --pid "$company_pid"); then
    echo "the company did not start; its log:" >&2
    cat "$out/company.log" >&2
    exit 2
fi

case_args=()
for c in "${cases[@]}"; do case_args+=(--case "$c"); done

status=0
(cd "$interop" && "$python" peer_runner.py --company shop.example --port "$company_port" \
    --ca "$out/certs/ca.pem" --cert "$out/certs/cert.pem" --key "$out/certs/key.pem" \
    --agent-port "$agent_port" --scenario "$repo/conformance/interop/shop.example.scenario.json" \
    --approve device-page --username ada --password "correct horse battery staple" \
    --performed --operator "http://127.0.0.1:$admin_port" \
    --junit "$out/junit.xml" --json "$out/report.json" "${case_args[@]}") || status=$?
exit "$status"
