#!/usr/bin/env bash
# WHIP publishers per core (issue 28): N WebRTC publishers of a ~600 kbit/s clip
# (640x360 constrained-baseline H.264 at 500k + 64k Opus: lib.sh whip_media) on one
# worker thread, sent by bench/whipload (pion, a client that is not ours). Sluice on
# core 0 (--workers 1, no connection, stream or per-address publisher limits), whipload
# on core 1; a fresh server for every run, the N list repeated in interleaved rounds,
# medians. The server's CPU and RSS are whipload's -pid view over its window.
# On 2 cores the publishers' own work (pion's SRTP, timers, the kernel's UDP sends)
# runs beside the server's on the same machine: past a few hundred publishers the
# client's core, not the server's, sets the pace (see "connected" and Mbit/s).
#
# Usage: bench/whip-publishers.sh [-n "100 200 400 800"] [-r ROUNDS] [-d SECONDS] [-R RAMP] [-o OUTDIR]
# Writes OUTDIR/whip-publishers.md and one JSON per run. WHIPLOAD=PATH runs another
# whipload binary (default: bench/whipload/whipload, built with go when missing).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ns="100 200 400 800" rounds=3 dur=10 ramp=100 out="$root/target/bench"
while getopts n:r:d:R:o: opt; do
  case $opt in
    n) ns=$OPTARG ;; r) rounds=$OPTARG ;; d) dur=$OPTARG ;; R) ramp=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
  esac
done
bound_run "${BENCH_MAX_S:-1800}"
setup "$out"
whip_media
whipload=${WHIPLOAD:-$root/bench/whipload/whipload}
[ -x "$whipload" ] || (cd "$root/bench/whipload" && go build)
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

for r in $(seq "$rounds"); do
  for n in $ns; do
    # --max-udp-sessions 0 beside start_sluice's own: WebRTC sessions count there too.
    start_sluice --workers 1 --max-udp-sessions 0
    taskset -c "$client_cpus" "$whipload" -url "http://127.0.0.1:$S_HTTP/live/w{i}/whip" -n "$n" \
      -ramp "$ramp" -duration "${dur}s" -pid "$srv" -json "$out/whip-$n-r$r.json" \
      -h264 "$out/media/whip.h264" -ogg "$out/media/whip.ogg" &
    p=$!; pids+=("$p")
    wait "$p" || echo "$0: whipload n=$n round $r failed" >&2
    stop "$srv"
  done
done

python3 - "$out" "$rounds" $ns <<'EOF' | tee "$out/whip-publishers.md"
import json, statistics, sys
out, rounds, ns = sys.argv[1], int(sys.argv[2]), [int(n) for n in sys.argv[3:]]
print("| N | connected | connect p50/p99 ms | Mbit/s per publisher | server CPU-s/GB | cores used | publishers per core | per core at 0.6 Mbit/s | RSS MB |")
print("|---|---|---|---|---|---|---|---|---|")
for n in ns:
    runs = []
    for r in range(1, rounds + 1):
        try:
            runs.append(json.load(open(f"{out}/whip-{n}-r{r}.json")))
        except (OSError, ValueError):
            pass
    if not runs:
        print(f"| {n} | no run | | | | | | | |")
        continue
    med = lambda k: statistics.median(j.get(k, 0) for j in runs)
    cores = med("server_cores")
    gb = med("server_cpu_s_per_gb")
    # What one core takes of publishers at 0.6 Mbit/s, by the cost of a byte.
    full = 1 / (gb * 0.6e6 / 8 / 1e9) if gb else 0
    spread = lambda k: f"{min(j.get(k, 0) for j in runs):.3f}-{max(j.get(k, 0) for j in runs):.3f}"
    print(f"| {n} | {med('connected'):.0f} | {med('connected_ms_p50'):.0f}/{med('connected_ms_p99'):.0f} "
          f"| {med('mbit_s_per_session'):.3f} | {med('server_cpu_s_per_gb'):.1f} "
          f"| {cores:.3f} ({spread('server_cores')}) | {med('connected') / cores if cores else 0:.0f} "
          f"| {full:.0f} | {med('server_rss_kb_end') / 1024:.0f} |")
print(f"\n{len(ns)} sizes x {rounds} interleaved rounds, medians (cores: min-max over rounds); "
      "publishers per core: connected / cores used; at 0.6 Mbit/s: 1 / (CPU-s per GB x 0.6 Mbit/s), "
      "an estimate that reads low where they fall short of it (a session's own costs over fewer bytes).")
EOF
