#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 10), from its committed seeds
# (crates/*/fuzz/seeds/<target>, made by scripts/fuzz-seeds.py) plus what earlier runs
# found (target/fuzz-corpus). Needs a nightly toolchain; installs cargo-fuzz from the
# crate registry when missing. Prints how long each fuzz crate took to build and the
# executions per target; a crash fails the run and leaves its input in
# crates/<crate>/fuzz/artifacts/<target>/.
#
#   bash scripts/fuzz.sh [SECONDS] [FILTER]   (FILTER: part of "crate/target", e.g. webrtc/)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
filter=${2:-}

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "scripts/fuzz.sh: a nightly toolchain is needed (rustup toolchain install nightly)" >&2
  exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi

root=$PWD
# One target directory for every fuzz crate: shared dependencies build once.
export CARGO_TARGET_DIR=$root/target/fuzz
failed=()
total=0
printf '%-34s %12s %8s\n' target executions seconds
built=0
for dir in crates/*/fuzz; do
  crate=$(basename "$(dirname "$dir")")
  targets=()
  for target in $(cd "$dir/.." && cargo +nightly fuzz list --fuzz-dir fuzz); do
    if [ -z "$filter" ] || [[ $crate/$target == *$filter* ]]; then targets+=("$target"); fi
  done
  # A crate none of whose targets the filter takes is not built.
  [ ${#targets[@]} -gt 0 ] || continue
  start=$(date +%s)
  (cd "$dir/.." && cargo +nightly fuzz build -a --fuzz-dir fuzz >/dev/null 2>&1) || {
    echo "build of $dir failed:" >&2
    (cd "$dir/.." && cargo +nightly fuzz build -a --fuzz-dir fuzz) >&2 || true
    exit 1
  }
  took=$(($(date +%s) - start))
  built=$((built + took))
  # Where CI's fuzz step spends its time: the build of each fuzz crate, in seconds.
  printf '%-34s %12s %8s\n' "$crate (build)" - "$took"
  for target in "${targets[@]}"; do
    corpus=$root/target/fuzz-corpus/$crate/$target
    mkdir -p "$corpus"
    seeds=$dir/seeds/$target
    [ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
    log=$root/target/fuzz-corpus/$crate-$target.log
    start=$(date +%s)
    if (cd "$dir/.." && cargo +nightly fuzz run -a --fuzz-dir fuzz "$target" "$corpus" -- \
          -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
          -print_final_stats=1) >"$log" 2>&1; then
      status=ok
    else
      status=CRASH
      failed+=("$crate/$target")
    fi
    runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    runs=${runs:-0}
    total=$((total + runs))
    printf '%-34s %12s %8s %s\n' "$crate/$target" "$runs" "$(($(date +%s) - start))" \
      "$([ $status = ok ] || echo "CRASH: see $log")"
  done
done
echo "executions in all: $total; builds took $built s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "scripts/fuzz.sh: crashes in: ${failed[*]}" >&2
  for f in "${failed[@]}"; do
    grep -m5 -E 'panicked|ERROR: AddressSanitizer|SUMMARY|Test unit written' \
      "$root/target/fuzz-corpus/${f/\//-}.log" >&2 || true
  done
  exit 1
fi
