#!/usr/bin/env bash
# Seeds conformance/fuzz/corpus/<target>.b64 from real inputs, added to what is there (each pack
# unpacked into a scratch directory first, `corpus.py`):
#   - made in Rust (`cargo run -p pap-fuzz --example seeds`): joins signed by the fixture agent,
#     the cases the tests name (alg none, a repeated assertion, lookalike return_to hosts, ...);
#   - the Python reference (a peer nobody here wrote): its agent's client metadata and JWKS, its
#     company's discovery, OAuth metadata and OAuth error bodies;
#   - our own company's documents and errors, served by `pap-company serve` over TLS;
#   - our agent's client metadata, and the ledger lines and grants.json that `pap-agent consent`
#     writes (a grant from a storage-state file and from a Chromium profile, a revoke);
#   - a real Chromium cookie database (headless Chromium given cookies by a local page);
#   - the provider manifests we ship.
# Then, where nightly and cargo-fuzz are present, each corpus is minimised to the inputs that keep
# every edge it reaches (`cargo fuzz cmin`, with `-use_counters=0`: hit counts are not kept), and
# packed back.
#
#   bash conformance/fuzz/seed-corpus.sh PYTHON     (PYTHON: a venv python with conformance/interop/peer/requirements.txt)
set -euo pipefail
cd "$(dirname "$0")/../.."
python=$(realpath -s "${1:?usage: conformance/fuzz/seed-corpus.sh PYTHON (a venv with the interop requirements)}")
repo=$PWD
packs=$repo/conformance/fuzz/corpus
interop=$repo/conformance/interop/peer
target=${CARGO_TARGET_DIR:-$repo/target}
fuzz_target=${PAP_FUZZ_TARGET_DIR:-$repo/conformance/fuzz/libfuzzer/target}
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
out=$work/corpus
for pack in "$packs"/*.b64; do
    python3 conformance/fuzz/corpus.py unpack "$pack" "$out/$(basename "$pack" .b64)"
done
put() { # TARGET NAME FILE
    mkdir -p "$out/$1"
    cp "$3" "$out/$1/$2"
}
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { timeout 30 bash -c "until (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null; do :; done"; }

echo "made in Rust"
cargo run -q --locked -p pap-fuzz --example seeds -- "$out"
cargo build -q --locked -p pap-company -p pap-agent

echo "the Python reference's agent documents"
(cd "$interop" && "$python" runner.py --agent-key "$work/peer-agent.pem" --write-agent-docs "$work/peer-docs") > /dev/null
put client_metadata python-agent.json "$work/peer-docs/agent.json"
put jwks python-jwks.json "$work/peer-docs/jwks.json"

echo "the Python reference's company documents"
"$target/debug/pap-company" dev-certs "$work/certs" manzanita.example shop.example atlas.example > /dev/null
port=$(free_port)
(cd "$interop" && exec "$python" company.py --port "$port" --cert "$work/certs/cert.pem" \
    --key "$work/certs/key.pem" --ca "$work/certs/ca.pem" --agent-domain atlas.example) > "$work/peer.log" 2>&1 &
pids+=($!)
wait_port "$port"
fetch() { # NAME PORT PATH [curl args...]
    local name=$1 port=$2 path=$3
    shift 3
    curl -s --connect-to "$name:443:127.0.0.1:$port" --cacert "$work/certs/ca.pem" "https://$name$path" "$@"
}
fetch manzanita.example "$port" /.well-known/poppy.json > "$work/d" && put discovery python-company.json "$work/d"
fetch manzanita.example "$port" /.well-known/oauth-authorization-server > "$work/m" && put oauth_metadata python-company.json "$work/m"
fetch manzanita.example "$port" /oauth/token -d grant_type=nonsense > "$work/e" && put token_response python-error.json "$work/e"
fetch manzanita.example "$port" /oauth/device -d client_id=x > "$work/e" && put token_response python-device-error.json "$work/e"

echo "our company's documents"
port=$(free_port)
admin=$(free_port)
"$target/debug/pap-company" serve --config "$repo/company/shop/shop.example.toml" --listen "127.0.0.1:$port" \
    --cert "$work/certs/cert.pem" --key "$work/certs/key.pem" --admin-listen "127.0.0.1:$admin" \
    --admin-credential-file "$work/operator.credential" --trust-ca "$work/certs/ca.pem" > "$work/company.log" 2>&1 &
pids+=($!)
wait_port "$port"
fetch shop.example "$port" /.well-known/poppy.json > "$work/d" && put discovery rust-company.json "$work/d"
fetch shop.example "$port" /.well-known/oauth-authorization-server > "$work/m" && put oauth_metadata rust-company.json "$work/m"
fetch shop.example "$port" /oauth/token -d grant_type=nonsense > "$work/e" && put token_response rust-error.json "$work/e"

echo "our agent's identity, ledger and grants"
state=$work/agent
agent() { "$target/debug/pap-agent" --state-dir "$state" "$@"; }
agent identity init atlas.example --name Atlas > "$work/agent.json"
put client_metadata rust-agent.json "$work/agent.json"
cat > "$work/storage-state.json" << 'EOF'
{"cookies":[
  {"name":"sid","value":"s3cr3t-session","domain":".shop.example","path":"/","expires":1893456000,"httpOnly":true,"secure":true,"sameSite":"Lax"},
  {"name":"pref","value":"dark","domain":"www.shop.example","path":"/","expires":-1,"httpOnly":false,"secure":false,"sameSite":"None"},
  {"name":"t","value":"tracker","domain":"tracker.example","path":"/"}],
 "origins":[{"origin":"https://shop.example:8443","localStorage":[{"name":"cart","value":"[1,2]"}]}]}
EOF
put storage_state playwright.json "$work/storage-state.json"

echo "a real Chromium cookie database"
web=$(free_port)
"$python" - "$web" > "$work/web.log" 2>&1 << 'PY' &
import http.server, sys
class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        for cookie in ("sid=s3cr3t; Domain=shop.example; Path=/; HttpOnly; Max-Age=86400; SameSite=Lax",
                       "pref=dark; Path=/account; Max-Age=86400", "session_only=1; Path=/"):
            self.send_header("Set-Cookie", cookie)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<p>cookies set</p>")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Page).serve_forever()
PY
pids+=($!)
wait_port "$web"
chromium_dir=$work/chromium
timeout 60 /usr/lib/chromium/chromium --headless --no-sandbox --disable-gpu --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --password-store=basic \
    --user-data-dir="$chromium_dir" --host-resolver-rules="MAP shop.example 127.0.0.1:$web" \
    --dump-dom http://shop.example/ > /dev/null 2> "$work/chromium.log"
cookies=$(find "$chromium_dir/Default" -name Cookies -type f | head -n 1)
[ -n "$cookies" ] || { echo "Chromium wrote no cookie database" >&2; exit 1; }
put chromium_profile chromium-cookies.sqlite "$cookies"

agent consent grant --source "$work/storage-state.json" --domain shop.example > "$work/grant.json"
agent consent grant --chromium-profile "$chromium_dir/Default" --domain shop.example > /dev/null
agent consent revoke "$(grep -o '"g_[0-9a-f]*"' "$work/grant.json" | head -n 1 | tr -d '"')" --domain shop.example > /dev/null
put grants rust-agent.json "$state/consent/grants.json"
n=0
while IFS= read -r line; do
    n=$((n + 1))
    printf '%s' "$line" > "$work/line"
    put ledger_line "rust-agent-$n" "$work/line"
done < "$state/consent/ledger.jsonl"

echo "the provider manifests"
for manifest in agent/browser/providers/*/BROWSER.md; do
    put manifest "$(basename "$(dirname "$manifest")").md" "$manifest"
done

if cargo +nightly --version > /dev/null 2>&1 && cargo +nightly fuzz --version > /dev/null 2>&1; then
    echo "minimising each corpus (cargo fuzz cmin)"
    for dir in "$out"/*/; do
        name=$(basename "$dir")
        cargo +nightly fuzz cmin --fuzz-dir conformance/fuzz/libfuzzer --target-dir "$fuzz_target" -s none -a "$name" "$dir" -- -use_counters=0 > "$work/cmin.log" 2>&1 ||
            { tail -n 20 "$work/cmin.log" >&2; exit 1; }
    done
fi
for dir in "$out"/*/; do
    python3 conformance/fuzz/corpus.py pack "$dir" "$packs/$(basename "$dir").b64"
done
