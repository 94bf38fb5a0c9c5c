#!/usr/bin/env bash
# Where a join's CPU goes (issue 42): the `join_load` bench (in memory) under `perf record` with
# call graphs, one concurrency at a time, its samples sorted into the join path's stages by
# join_profile.py. A release build with frame pointers and line tables, in a target directory of
# its own (the flags would rebuild the shared one).
#
#   bash company/benches/join_profile.sh [JOINS] [LEVEL ...]     (default 20000 joins, levels 1 32)
#
# Needs `perf` (linux-perf) and permission to profile (root, or kernel.perf_event_paranoid <= 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
joins=${1:-20000}
shift || true
levels=("$@")
[ ${#levels[@]} -gt 0 ] || levels=(1 32)
target=${PAP_PROFILE_TARGET_DIR:-/var/tmp/pap-profile-target}
out=${PAP_PROFILE_OUT:-/var/tmp/pap-profile}
mkdir -p "$out"

export RUSTFLAGS="-C force-frame-pointers=yes"
export CARGO_PROFILE_BENCH_DEBUG=line-tables-only
bench=$(CARGO_TARGET_DIR="$target" cargo bench -p pap-company --bench join_load --no-run --message-format=json 2> /dev/null |
    python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "join_load"][-1])')

for level in "${levels[@]}"; do
    echo "== c=$level, $joins joins"
    # With pap-company's own log lines (`--log`: info, on stderr, here to /dev/null).
    perf record -q -F 4000 -g -o "$out/join-c$level.data" -- "$bench" "$joins" --level "$level" --log --bench 2> /dev/null
    perf script -i "$out/join-c$level.data" 2> /dev/null | python3 company/benches/join_profile.py
done
