#!/usr/bin/env bash
# Scenario (c), scaling: the same load of HTTP-FLV (or -p) players on Sluice with
# --workers 1 (server pinned to core 0, clients to core 1) and --workers 2 (server on
# cores 0-1, and the clients on cores 0-1 too: a 2-core machine has no third core for
# them). Reports delivered Mbit/s, throughput per server CPU-second, and the CPU of
# the busiest server threads (is the load spread over both workers?).
# What a 2-core box can show: whether a second worker costs per-byte efficiency and
# whether connections spread evenly; not a clean "2 workers deliver >= 1.8x" figure at
# saturation, which needs two server cores plus separate client cores. With 4 cores or
# more the server gets cores 0 (1 worker) or 0-1 (2 workers) and the clients all the
# others, for both runs; give loads past one core's knee then (e.g. -l "8000 16000").
#
# Usage: bench/scaling.sh [-l "4000 10000"] [-p flv] [-d SECONDS] [-m MERGE_MS] [-o OUTDIR]
# Writes OUTDIR/scaling.md and one JSON per run.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
loads="4000 10000" proto=flv dur=10 merge=200 out="$root/target/bench"
while getopts l:p:d:m:o: opt; do
  case $opt in
    l) loads=$OPTARG ;; p) proto=$OPTARG ;; d) dur=$OPTARG ;; m) merge=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
  esac
done
bound_run "${BENCH_MAX_S:-360}"
setup "$out"
threads() { for t in /proc/"$1"/task/*; do echo "${t##*/} $(awk '{print $14 + $15}' "$t/stat")"; done; }

for n in $loads; do
  for w in 1 2; do
    if [ "$(nproc)" -ge 4 ]; then
      client_cpus=2-$(($(nproc) - 1)); if [ "$w" = 1 ]; then server_cpus=0; else server_cpus=0,1; fi
    elif [ "$w" = 1 ]; then server_cpus=0 client_cpus=1; else server_cpus=0,1 client_cpus=0,1; fi
    start_sluice --workers "$w" --merge-ms "$merge"
    publish "$(ingest_url sluice)" $((dur + 30)); sleep 2
    j=$out/scaling-w$w-$proto-$n.json
    threads "$srv" >"$j.threads0"
    play "$proto" "$(url "$proto" sluice)" "$n" "$srv" "$j" --ramp 2000/s --duration "${dur}s" --warmup 3s
    threads "$srv" >"$j.threads1"
    stop "$srv" "$pub"
  done
done

python3 "$root/bench/report.py" scaling "$out" "$proto" $loads
