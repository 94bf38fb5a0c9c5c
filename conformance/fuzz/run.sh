#!/usr/bin/env bash
# Runs fuzz targets under libFuzzer (nightly, cargo-fuzz), each on a scratch copy of its committed
# corpus (`corpus/TARGET.b64`, unpacked by `corpus.py`), and prints one line a target: executions, executions a second, coverage (edges), crashes.
# A crash's input is kept under $PAP_FUZZ_WORK/artifacts/ and fails the run: fix it at its root,
# then copy the input to conformance/fuzz/regressions/TARGET/ (the stable replay test keeps it fixed).
#
#   bash conformance/fuzz/run.sh [--seconds S | --runs N | --goal] [TARGET...]   (default: every target, 20 s)
#
# --goal runs the README's goal: 10 million executions of each company-side target, 1 million
# of each agent-side one. The build is release with debug assertions (overflow checks on) and
# no sanitizer: the code is safe Rust (`unsafe_code = "forbid"`), so ASan would find nothing a
# panic does not, at several times the cost.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=(-max_total_time=20)
goal=false
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) limit=(-max_total_time="$2"); shift 2 ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    --goal) goal=true; shift ;;
    *) break ;;
    esac
done
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(ls conformance/fuzz/corpus | sed -n 's/\.b64$//p')
work=${PAP_FUZZ_WORK:-/var/tmp/pap-fuzz-work}
fuzz_target=${PAP_FUZZ_TARGET_DIR:-/var/tmp/pap-fuzz-target}
mkdir -p "$work/artifacts"

cargo +nightly fuzz build --fuzz-dir conformance/fuzz/libfuzzer --target-dir "$fuzz_target" -s none -a > "$work/build.log" 2>&1 ||
    { tail -n 30 "$work/build.log" >&2; exit 1; }
bin="$fuzz_target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"

# The company-side targets (the first part of pap_fuzz::TARGETS) have the larger goal.
company_side=" browser_session_form browser_assertion compact_jws browser_claims return_to dpop_proof client_assertion client_metadata jwks "
status=0
printf '%-22s %12s %10s %8s %s\n' target executions "exec/s" edges crashes
for name in "${targets[@]}"; do
    run_limit=("${limit[@]}")
    if $goal; then
        case "$company_side" in *" $name "*) run_limit=(-runs=10000000) ;; *) run_limit=(-runs=1000000) ;; esac
    fi
    corpus="$work/corpus/$name"
    mkdir -p "$corpus"
    python3 conformance/fuzz/corpus.py unpack conformance/fuzz/corpus/"$name".b64 "$corpus"
    log="$work/$name.log"
    crashed=0
    "$bin/$name" "$corpus" "${run_limit[@]}" -print_final_stats=1 -artifact_prefix="$work/artifacts/$name-" \
        > "$log" 2>&1 || crashed=1
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    edges=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    printf '%-22s %12s %10s %8s %s\n' "$name" "${runs:-?}" "${speed:-?}" "${edges:-?}" "$crashed"
    if [ "$crashed" -ne 0 ]; then
        grep -m 5 -E 'panicked|ERROR|Test unit written' "$log" >&2 || tail -n 20 "$log" >&2
        status=1
    fi
done
exit "$status"
