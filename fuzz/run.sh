#!/usr/bin/env bash
# Build every cargo-fuzz target and run each for SECONDS (default 600), one after the
# other; print per target the executions, the corpus size and whether it crashed.
#
#   fuzz/run.sh [SECONDS] [TARGET...]      logs: $FUZZ_LOG_DIR/fuzz-TARGET.log (default /tmp)
#
# Runs on the stable toolchain: `--sanitizer none` leaves out `-Zsanitizer=address`, the
# only nightly-only flag cargo-fuzz passes (the coverage instrumentation is stable), and
# the decoders are safe Rust, so AddressSanitizer would have nothing to add. Crashing
# inputs land in fuzz/artifacts/TARGET/; new corpus entries in fuzz/corpus/TARGET/.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(records recording tracefs_format params usdt_notes)
logs=${FUZZ_LOG_DIR:-/tmp}

cargo fuzz build --sanitizer none
status=0
printf '%-16s %8s %14s %8s %s\n' target seconds executions corpus result
for t in "${targets[@]}"; do
    log="$logs/fuzz-$t.log"
    mkdir -p "corpus/$t"
    start=$(date +%s)
    if cargo fuzz run --sanitizer none "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        result=ok
    else
        result="CRASHED (see $log, fuzz/artifacts/$t/)"
        status=1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    printf '%-16s %8s %14s %8s %s\n' "$t" "$(($(date +%s) - start))" "${execs:-?}" \
        "$(find "corpus/$t" -type f | wc -l)" "$result"
done
exit $status
