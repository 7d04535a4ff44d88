#!/usr/bin/env bash
# Scenario (d), memory: (1) server RSS per idle player for each protocol: the publisher
# runs 13 s first so the stream's ring is full, then N players join and play; the
# figure is (RSS with players - RSS before them) / N. Sluice (rtmp, flv, ws-flv) beside
# nginx-rtmp (rtmp) and the floor (flv, bench/floor), one fresh server each.
# (2) RSS over time with 30% of the players reading at a tenth of the bitrate
# (--slow-fraction 0.3 --slow-rate 0.1) against none: is it flat, and within 1.2x?
# Kernel TCP memory (/proc/net/sockstat, all sockets of the machine, both ends) is
# logged beside it, since a slow socket's send buffer is not in the server's RSS.
#
# Usage: bench/memory.sh [-n PLAYERS] [-d SECONDS] [-D SLOW_SECONDS] [-p "rtmp flv ws-flv"]
#                        [-s "flv"] [-x "nginx floor"] [-o OUTDIR]
# Writes OUTDIR/memory.md, memory-over-time.png and the JSON reports.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
n=1000 dur=6 sdur=30 protos="rtmp flv ws-flv" slow_protos=flv peers="nginx floor" merge=200 out="$root/target/bench"
while getopts n:d:D:p:s:x:o: opt; do
  case $opt in
    n) n=$OPTARG ;; d) dur=$OPTARG ;; D) sdur=$OPTARG ;; p) protos=$OPTARG ;; s) slow_protos=$OPTARG ;;
    x) peers=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
  esac
done
have_nginx || peers=${peers//nginx/}
bound_run "${BENCH_MAX_S:-420}"
setup "$out"
fill=${FILL_S:-13} # > the default 10 s ring (HLS keeps ~18 s: use FILL_S=20 to include it)

runs=()
for p in $protos; do runs+=("sluice:$p"); done
for s in $peers; do
  case $s in nginx) runs+=("nginx:rtmp") ;; floor) runs+=("floor:flv") ;; esac
done

for run in "${runs[@]}"; do
  s=${run%%:*} p=${run#*:}
  start_server "$s" "$merge"
  [ "$s" = floor ] || sleep $((fill - 2)) # start_server waited 2 s already
  play "$p" "$(url "$p" "$s")" "$n" "$srv" "$out/mem-idle-$s-$p.json" --ramp 1000/s --duration "${dur}s" --warmup 2s
  stop_server
done

sockstat() { # log /proc/net/sockstat's TCP line once a second until killed
  while :; do grep '^TCP:' /proc/net/sockstat; sleep 1; done >"$1"
}
for p in $slow_protos; do
  for frac in 0 0.3; do
    j=$out/mem-slow-sluice-$p-$frac.json
    start_server sluice "$merge"
    sleep $((fill - 2))
    sockstat "$j.sockstat" & ss_pid=$!; pids+=("$ss_pid")
    play "$p" "$(url "$p" sluice)" "$n" "$srv" "$j" --ramp 1000/s --duration "${sdur}s" --warmup 3s \
      --slow-fraction "$frac" --slow-rate 0.1
    stop "$ss_pid"
    stop_server
  done
done

python3 "$root/bench/report.py" memory "$out" "$n" "${runs[@]}"
