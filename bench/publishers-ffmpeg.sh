#!/usr/bin/env bash
# Publishers as real encoders send: N ffmpeg processes (-re, -c copy, looped) publish the
# 600 kbit/s clip over RTMP, each writing every packet as it is due (sluice-bench's
# publisher writes all frames due at one instant together, so it reads as fewer, larger
# sends). Reports the server's cores over D seconds (from /proc/PID/stat, after a
# settle time) for Sluice and nginx-rtmp, rounds interleaved. `sluice-rtmps` is Sluice
# with the publishers on RTMPS (TLS 1.3, a self-signed certificate; ffmpeg's GnuTLS).
#
# Usage: bench/publishers-ffmpeg.sh [-n PUBLISHERS] [-d SECONDS] [-r ROUNDS]
#                                   [-x "sluice sluice-rtmps nginx"] [-o OUTDIR]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
n=100 dur=10 rounds=2 servers="sluice nginx" out="$root/target/bench"
while getopts n:d:r:x:o: opt; do
  case $opt in
    n) n=$OPTARG ;; d) dur=$OPTARG ;; r) rounds=$OPTARG ;; x) servers=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,11p' "$0" >&2; exit 2 ;;
  esac
done
have_nginx || servers=${servers//nginx/}
bound_run "${BENCH_MAX_S:-600}"
setup "$out"
small=$(small_clip)
ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

report=$out/publishers-ffmpeg.md
{
  echo "# $n ffmpeg RTMP publishers of the 600 kbit/s clip, one worker"
  echo
  echo "$(date '+%Y-%m-%d %H:%M'), $(nproc) cores; server on core $server_cpus, ffmpeg on core $client_cpus; $dur s measured per round."
  echo
  echo "| round | server | server cores |"
  echo "|---|---|---|"
} >"$report"
for round in $(seq "$rounds"); do
  for s in $servers; do
    case $s in
      sluice) start_sluice --workers 1; u=$(ingest_url sluice rtmp) ;;
      sluice-rtmps)
        start_sluice --workers 1 --rtmps "127.0.0.1:$S_RTMPS" --https off --tls-self-signed true
        wait_port "$S_RTMPS"; u=$(ingest_url sluice rtmps) ;;
      nginx) start_nginx; u=$(ingest_url nginx rtmp) ;;
    esac
    u=${u%/x}
    ff=()
    for i in $(seq "$n"); do
      taskset -c "$client_cpus" ffmpeg -hide_banner -loglevel error -re -stream_loop -1 -i "$small" \
        -c copy -f flv "$u/p$i" </dev/null >/dev/null 2>&1 &
      ff+=($!); pids+=($!)
    done
    sleep 8 # every ffmpeg connected and publishing
    t0=$(cpu_ticks "$srv"); sleep "$dur"; t1=$(cpu_ticks "$srv")
    cores=$(python3 -c "print(f'{($t1 - $t0) / $ticks / $dur:.3f}')")
    echo "| $round | $s | $cores |" >>"$report"
    echo "round $round $s: $cores cores" >&2
    stop "${ff[@]}"
    stop "$srv"
  done
done
cat "$report"
