#!/usr/bin/env bash
# Scenario (b), players per core: ramp players of one protocol against one worker
# thread (server pinned to core 0, players and publisher to core 1) in steps, until
# players stall, fail, fall short of the stream's bitrate, or the server core is
# saturated. Reports the knee and a curve of server CPU (cores) vs players, for
# Sluice and, beside it in the same run, the floor (bench/floor, HTTP-FLV) or nginx-rtmp
# (RTMP).
#
# Usage: bench/players-per-core.sh [-p flv|rtmp|ws-flv] [-x "sluice floor"] [-s "1000 2000 ..."]
#                                  [-d SECONDS] [-m MERGE_MS] [-o OUTDIR]
# Writes OUTDIR/players-per-core.md, players-per-core.png and one JSON per step.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
proto=flv servers="" steps="1000 2000 4000 6000 8000 10000 12000" dur=6 merge=200 out="$root/target/bench"
while getopts p:x:s:d:m:o: opt; do
  case $opt in
    p) proto=$OPTARG ;; x) servers=$OPTARG ;; s) steps=$OPTARG ;; d) dur=$OPTARG ;;
    m) merge=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
  esac
done
if [ -z "$servers" ]; then
  case $proto in flv) servers="sluice floor" ;; rtmp) servers="sluice nginx" ;; *) servers=sluice ;; esac
fi
have_nginx || servers=${servers//nginx/}
bound_run "${BENCH_MAX_S:-420}"
setup "$out"
ramp=3000/s warmup=2

for s in $servers; do
  u=$(url "$proto" "$s")
  [ -n "$u" ] || { echo "skip: $s does not serve $proto" >&2; continue; }
  PUB_S=600 start_server "$s" "$merge"
  for n in $steps; do
    j=$out/ppc-$s-$proto-$n.json
    play "$proto" "$u" "$n" "$srv" "$j" --ramp "$ramp" --duration "${dur}s" --warmup "${warmup}s"
    # Stop at the first step past the knee: stalls, failures, or a saturated core.
    python3 "$root/bench/report.py" past-knee "$j" && break
    sleep 1
  done
  stop_server
done

python3 "$root/bench/report.py" players-per-core "$out" "$proto" "$merge" $servers
