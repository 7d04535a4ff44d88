#!/usr/bin/env bash
# Every scenario of issue 3, (a) to (f), from one build, one after the other into one
# folder, then the targets table (report.py targets): the closing report's figures.
# Run it on a quiet machine (nothing else compiling): ~40 minutes on 2 cores.
#
# Usage: bench/all.sh [-o OUTDIR] [-n PLAYERS]   (default target/bench/all, 1000)
# Writes OUTDIR/{fanout,players-per-core,scaling,memory,publishers,latency,targets}.md
# (+ JSON, PNG) and OUTDIR/all.md with all of them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/target/bench/all n=1000
while getopts o:n: opt; do
  case $opt in
    o) out=$OPTARG ;; n) n=$OPTARG ;;
    *) sed -n '2,8p' "$0" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ "${NO_BUILD:-0}" = 1 ] || (cd "$root" && cargo build --release -q -p sluice-server -p sluice-bench)
export NO_BUILD=1
merge=200
log=$out/all.log
: >"$log"
step() { # step NAME COMMAND...: runs one scenario, its output to the log; a failure is noted, not fatal
  echo "$(date +%T) $1" | tee -a "$log"
  if ! "${@:2}" >>"$log" 2>&1; then echo "$(date +%T) $1 FAILED (see $log)" | tee -a "$log"; fi
}

# Fan-out rows vary by ~15 % from run to run on a VM: three interleaved repetitions,
# medians. The TLS rows once, in their own folder.
step "(a) fan-out" env BENCH_MAX_S=2400 bash "$root/bench/fanout.sh" -o "$out" -n "$n" -d 20 -m "$merge" -r 3 \
  -p "flv rtmp ws-flv hls ll-hls rtsp rtsp-udp"
step "(a) fan-out over TLS" env BENCH_MAX_S=900 bash "$root/bench/fanout.sh" -o "$out/tls" -n "$n" -d 20 -m "$merge" \
  -p "flv-tls hls-tls ll-hls-tls" -x nginx
step "(b) players per core" bash "$root/bench/players-per-core.sh" -o "$out" -m "$merge"
step "(c) scaling" bash "$root/bench/scaling.sh" -o "$out" -m "$merge"
step "(d) memory" env FILL_S=21 bash "$root/bench/memory.sh" -o "$out" -n "$n"
step "(e) publishers" bash "$root/bench/publishers.sh" -o "$out"
step "(f) latency" bash "$root/bench/latency.sh" -o "$out" -n "$n" -m "$merge"
python3 "$root/bench/report.py" targets "$out" "$merge" >/dev/null

{
  for f in targets fanout tls/fanout players-per-core scaling memory publishers latency; do
    if [ -s "$out/$f.md" ]; then cat "$out/$f.md"; echo; fi
  done
} >"$out/all.md"
cat "$out/targets.md"
echo "all figures: $out/all.md"
