#!/usr/bin/env bash
# One language pairing of the PAP browser-session conformance cases, over real TLS on 127.0.0.1.
#
#   conformance/interop/pairing.sh PAIRING PYTHON TARGET_DIR OUT_DIR
#
# PAIRING: rust-agent-x-rust-company | python-agent-x-rust-company | rust-agent-x-python-company
#          | rust-agent-x-rust-replicas | python-agent-x-rust-replicas (two company replicas sharing
#          one redis-server the script starts: the Rust agent's API calls go to one replica and its
#          Chromium to the other; the Python agent reaches them through a round-robin balancer)
# PYTHON:  a venv python with conformance/interop/peer/requirements.txt
# TARGET_DIR: where pap-company and pap-conformance were built (debug)
# Writes OUT_DIR/junit.xml, the report and the logs; prints the runner's `N passed, N failed`
# line; exits with the runner's status. Every process it starts is stopped on exit.
set -euo pipefail

pairing=$1 python=$(realpath -s "$2") target=$(realpath -m "$3") out=$(realpath -m "$4")
repo=$(cd "$(dirname "$0")/../.." && pwd)
interop="$repo/conformance/interop/peer"
company_bin="$target/debug/pap-company"
runner_bin="$target/debug/pap-conformance"
mkdir -p "$out"
password="correct horse battery staple"
web_cases=(lifecycle.browser-joins-session lifecycle.browser-assertion-refused operations.web-confirm-at-most-once)

# Free loopback ports, chosen by the kernel.
read -r company_port admin_port agent_port company_port_b admin_port_b redis_port balance_port < <("$python" - <<'PY'
import socket
socks = [socket.socket() for _ in range(7)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)

pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; fi
    done
}
trap cleanup EXIT

# Waits (30 s at most) for LOG to show PATTERN while process PID lives. The caller creates LOG
# before it starts the process: a background job's redirection may open it after tail looks.
ready() {
    local pid=$1 log=$2 pattern=$3
    if ! timeout 30 grep -q -m1 "$pattern" <(tail -n +1 -f "$log" --pid "$pid"); then
        echo "not ready: $log" >&2
        cat "$log" >&2
        exit 2
    fi
}

# Starts pap-company: NAME (its log is company-NAME.log, or company.log without one), its HTTPS
# and operator ports, and a --store URL when it keeps its state in Redis. The agent's documents
# are at atlas.example = 127.0.0.1:$agent_port.
start_rust_company() {
    local name=${1:-} port=${2:-$company_port} admin=${3:-$admin_port} store=${4:-}
    local log="$out/company${name:+-$name}.log" credential="$out/operator${name:+-$name}.credential"
    [ -e "$out/certs/cert.pem" ] || "$company_bin" dev-certs "$out/certs" shop.example atlas.example
    local store_args=()
    [ -z "$store" ] || store_args=(--store "$store")
    : > "$log"
    # Each join's own line is at debug (a line per join at info cost 3 % of the company's CPU,
    # issue 42); the runs below count the joins each replica served by it.
    RUST_LOG="${RUST_LOG:-info,pap_company::browser_session=debug}" "$company_bin" serve --config "$repo/company/shop/shop.example.toml" \
        --listen "127.0.0.1:$port" --cert "$out/certs/cert.pem" --key "$out/certs/key.pem" \
        --admin-listen "127.0.0.1:$admin" --admin-credential-file "$credential" \
        --trust-ca "$out/certs/ca.pem" "${store_args[@]}" \
        --resolve "atlas.example=127.0.0.1:$agent_port" > "$log" 2>&1 &
    pids+=($!)
    ready "$!" "$log" "serving the operator API"
    # The operator API asks for its credential (written 0600 at start), here as a Basic password.
    operator="http://operator:$(cat "$credential")@127.0.0.1:$admin"
}

# A redis-server on $redis_port and two replicas sharing it, a on $company_port and b on
# $company_port_b; $operator is a's.
start_replicas() {
    mkdir -p "$out/redis"
    : > "$out/redis.log"
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$out/redis" \
        > "$out/redis.log" 2>&1 &
    pids+=($!)
    ready "$!" "$out/redis.log" "Ready to accept connections"
    start_rust_company b "$company_port_b" "$admin_port_b" "redis://127.0.0.1:$redis_port/0"
    start_rust_company a "$company_port" "$admin_port" "redis://127.0.0.1:$redis_port/0"
}

check_company_log() {  # a compact JWS starts with the base64url of `{"`: none may be logged
    if grep -q 'eyJ' "$out"/company*.log; then
        echo "a JWT reached the company's log" >&2
        exit 1
    fi
}

case "$pairing" in
rust-agent-x-rust-company)
    start_rust_company
    status=0
    "$runner_bin" pap --company https://shop.example --connect "shop.example=127.0.0.1:$company_port" \
        --trust-ca "$out/certs/ca.pem" --scenario "$repo/conformance/interop/shop.example.scenario.json" \
        --approve device-page --username ada --password "$password" --operator "$operator" \
        --serve-agent "127.0.0.1:$agent_port" --agent-cert "$out/certs/cert.pem" --agent-key "$out/certs/key.pem" \
        --json "$out/report.json" --junit "$out/junit.xml" || status=$?
    check_company_log
    exit "$status"
    ;;
python-agent-x-rust-company)
    start_rust_company
    runner() {
        (cd "$interop" && "$python" runner.py --company shop.example --port "$company_port" \
            --ca "$out/certs/ca.pem" --cert "$out/certs/cert.pem" --key "$out/certs/key.pem" \
            --agent-port "$agent_port" --agent-key "$out/agent-key.pem" \
            --scenario "$repo/conformance/interop/shop.example.scenario.json" --approve device-page --username ada --password "$password" \
            --performed --operator "$operator" "$@")
    }
    status=0
    case_args=()
    for c in "${web_cases[@]}"; do case_args+=(--case "$c"); done
    runner --junit "$out/junit.xml" --json "$out/report.json" "${case_args[@]}" || status=$?
    # The one security case about browser assertions: refused at the token endpoint. The same
    # agent key (--agent-key) as the first run: the company may cache the agent's JWKS for 60 s.
    runner --junit "$out/junit-security.xml" --case security.browser-assertion-at-token-endpoint || status=$?
    check_company_log
    exit "$status"
    ;;
rust-agent-x-rust-replicas)
    start_replicas
    status=0
    "$runner_bin" pap --company https://shop.example --connect "shop.example=127.0.0.1:$company_port" \
        --connect-browser "shop.example=127.0.0.1:$company_port_b" \
        --trust-ca "$out/certs/ca.pem" --scenario "$repo/conformance/interop/shop.example.scenario.json" \
        --approve device-page --username ada --password "$password" --operator "$operator" \
        --serve-agent "127.0.0.1:$agent_port" --agent-cert "$out/certs/cert.pem" --agent-key "$out/certs/key.pem" \
        --json "$out/report.json" --junit "$out/junit.xml" || status=$?
    check_company_log
    # The sign-in went through replica a, the browser's joins through replica b.
    grep -q "device sign-in approved" "$out/company-a.log" || { echo "replica a approved nothing" >&2; status=1; }
    grep -q "browser joined its Session" "$out/company-b.log" || { echo "no join through replica b" >&2; status=1; }
    echo "joins through replica b: $(grep -c "browser joined its Session" "$out/company-b.log")"
    exit "$status"
    ;;
python-agent-x-rust-replicas)
    start_replicas
    : > "$out/balance.log"
    "$runner_bin" balance --listen "127.0.0.1:$balance_port" --to "127.0.0.1:$company_port" \
        --to "127.0.0.1:$company_port_b" --cert "$out/certs/cert.pem" --key "$out/certs/key.pem" \
        --ca "$out/certs/ca.pem" > "$out/balance.log" 2>&1 &
    pids+=($!)
    ready "$!" "$out/balance.log" "balancing"
    status=0
    case_args=()
    for c in "${web_cases[@]}"; do case_args+=(--case "$c"); done
    (cd "$interop" && "$python" runner.py --company shop.example --port "$balance_port" \
        --ca "$out/certs/ca.pem" --cert "$out/certs/cert.pem" --key "$out/certs/key.pem" \
        --agent-port "$agent_port" --agent-key "$out/agent-key.pem" \
        --scenario "$repo/conformance/interop/shop.example.scenario.json" --approve device-page --username ada --password "$password" \
        --performed --operator "$operator" --junit "$out/junit.xml" --json "$out/report.json" "${case_args[@]}") || status=$?
    check_company_log
    for name in a b; do
        echo "joins through replica $name: $(grep -c "browser joined its Session" "$out/company-$name.log" || true)"
    done
    exit "$status"
    ;;
rust-agent-x-python-company)
    "$company_bin" dev-certs "$out/certs" manzanita.example atlas.example
    : > "$out/company.log"
    (cd "$interop" && exec "$python" company.py --port "$company_port" --cert "$out/certs/cert.pem" \
        --key "$out/certs/key.pem" --ca "$out/certs/ca.pem" --agent-domain atlas.example \
        --agent-port "$agent_port") > "$out/company.log" 2>&1 &
    pids+=($!)
    # The peer prints its line once it accepts connections.
    ready "$!" "$out/company.log" "serving https://manzanita.example"
    status=0
    "$runner_bin" pap --company https://manzanita.example --connect "manzanita.example=127.0.0.1:$company_port" \
        --trust-ca "$out/certs/ca.pem" --scenario "$repo/conformance/interop/manzanita.scenario.json" \
        --approve device-page --username ada --password "$password" \
        --serve-agent "127.0.0.1:$agent_port" --agent-cert "$out/certs/cert.pem" --agent-key "$out/certs/key.pem" \
        --json "$out/report.json" --junit "$out/junit.xml" || status=$?
    exit "$status"
    ;;
*)
    echo "unknown pairing $pairing" >&2
    exit 2
    ;;
esac
