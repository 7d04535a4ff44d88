#!/usr/bin/env bash
# Scenario (h), an edge: N HTTP-FLV players of the 2 Mbit/s clip on an edge that pulls
# the stream from an origin over RTMP, beside the same N players on the origin itself,
# in one run. Server CPU-seconds per GB delivered and RSS per player of the server the
# players are on; in the edge row also the origin's CPU (it serves one player: the
# pull). The server the players use is pinned to core 0; players, the publisher and
# (edge row) the origin to core 1.
# Usage: bench/edge.sh [-n PLAYERS] [-d SECONDS] [-r REPETITIONS] [-o OUTDIR]
# Writes OUTDIR/edge.md and one JSON per run (sluice-bench's report).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
n=1000 dur=20 reps=1 out="$root/target/bench"
while getopts n:d:r:o: opt; do
  case $opt in
    n) n=$OPTARG ;; d) dur=$OPTARG ;; r) reps=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,10p' "$0" >&2; exit 2 ;;
  esac
done
bound_run "${BENCH_MAX_S:-$(((dur + 30) * 2 * reps + 120))}"
setup "$out"
E_RTMP=$((base + 11)) E_HTTP=$((base + 12))
warmup=3

for rep in $(seq "$reps"); do
  for row in origin edge; do
    json=$out/edge-$row.json
    [ "$rep" = 1 ] || json=${json%.json}.r$rep.json
    if [ $row = origin ]; then
      start_sluice --workers 1
      publish "$(ingest_url sluice)" $((dur + 15)); sleep 2
      play flv "http://127.0.0.1:$S_HTTP/live/x.flv" "$n" "$srv" "$json" --ramp 500/s \
        --duration "${dur}s" --warmup "${warmup}s"
      stop "$srv" "$pub"
    else
      # The origin on the clients' core; the edge alone on the servers' core.
      server_cpus=$client_cpus start_sluice --workers 1
      origin=$srv
      publish "$(ingest_url sluice)" $((dur + 15)); sleep 2
      port_free "$E_RTMP"; port_free "$E_HTTP"
      taskset -c "$server_cpus" "$sluice" --rtmp "127.0.0.1:$E_RTMP" --http "127.0.0.1:$E_HTTP" \
        --rtsp off --srt off --webrtc-udp off --workers 1 --log warn --max-connections 0 \
        --max-connections-per-ip 0 --origin "rtmp://127.0.0.1:$S_RTMP" >"$out/edge.log" 2>&1 &
      edge=$!; pids+=("$edge")
      wait_port "$E_HTTP"
      o0=$(awk '{print $14 + $15}' "/proc/$origin/stat")
      play flv "http://127.0.0.1:$E_HTTP/live/x.flv" "$n" "$edge" "$json" --ramp 500/s \
        --duration "${dur}s" --warmup "${warmup}s"
      o1=$(awk '{print $14 + $15}' "/proc/$origin/stat")
      echo "$(( o1 - o0 ))" >"$json.origin_ticks"
      stop "$edge" "$origin" "$pub"
    fi
  done
done

python3 - "$out" "$n" "$reps" <<'PY' | tee "$out/edge.md"
import json, os, statistics, sys
out, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hz = os.sysconf("SC_CLK_TCK")
print(f"# Edge relaying, {n} HTTP-FLV players, {reps} round(s) interleaved (medians)\n")
print("| players on | players ok | Mbit/s | CPU-s/GB | RSS/player KiB | origin CPU-s (its one player) | first keyframe p50 ms | stalls |")
print("|---|---|---|---|---|---|---|---|")
for row in ["origin", "edge"]:
    runs = []
    for rep in range(1, reps + 1):
        path = f"{out}/edge-{row}.json" if rep == 1 else f"{out}/edge-{row}.r{rep}.json"
        r = json.load(open(path))
        ticks = open(path + ".origin_ticks").read().strip() if os.path.exists(path + ".origin_ticks") else None
        runs.append((r["server"]["cpu_s_per_gb"], r, ticks))
    runs.sort(key=lambda x: x[0])
    cpu, r, ticks = runs[len(runs) // 2]
    spread = f"{runs[0][0]:.3f}-{runs[-1][0]:.3f}"
    origin = f"{int(ticks) / hz:.2f}" if ticks else "-"
    print(f"| {row} | {r['ok']}/{n} | {r['mbit_s']:.0f} | {cpu:.3f} ({spread}) | {r['server']['rss_per_player_kib']:.1f} | {origin} | {r['first_keyframe_ms']['p50']:.1f} | {r['stalls']} |")
PY
