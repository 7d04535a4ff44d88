#!/usr/bin/env bash
# Scale runs for a many-core machine (the lent 16-core `device`), from binaries built
# elsewhere: DIR holds sluice, sluice-bench and clip.flv (the 600 kbit/s clip:
# bench/lib.sh small_clip), and may hold `whepload`, a WHEP load client on pion (Go's
# WebRTC stack; flags -url -n -ramp -duration -pid -json), the players of the WebRTC
# run when present; without it sluice-bench's own WHEP players (str0m) play. With
# `whipload` (bench/whipload, pion) and its media (whip.h264, whip.ogg: bench/lib.sh
# whip_media) DIR also gets a WHIP run.
#
# 1. WebRTC viewers per core: Sluice on core 0 (one worker; the stream's AAC-to-Opus
#    thread there too), the RTMP publisher on core 1, pion WHEP players on the other
#    cores, so that their kernel and user work is not the server's. N players per run
#    (WHEP_N), the server's CPU-s/GB, cores used, RSS and first-packet times from
#    whepload's -pid view of the server.
# 2. WHIP publishers per core (when DIR has whipload): Sluice on core 0 (one worker),
#    N pion publishers of their own streams (600 kbit/s each) on cores 2-15, a fresh
#    server for each N (WHIP_N, default "1000 2000"); the server's CPU-s/GB, cores used
#    and RSS from whipload's -pid view.
# 3. One hot stream on many cores: Sluice with W workers on cores 0..W-1, HTTP-FLV
#    players (sluice-bench) on the rest, FLV_N players each run; CPU-s/GB and players
#    per core.
#
#   bash bench/device.sh DIR OUT [WHEP_N...]     (OUT: where the JSON reports go)
set -euo pipefail
dir=$1 out=$2; shift 2
whep_n=${*:-1000 2000 3000}
mkdir -p "$out"
cores=$(nproc)
last=$((cores - 1))
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2
  exit 3
}

# cpu_s PID: the process's user + system CPU seconds so far.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"; }

# sluice CPUS WORKERS [PUBLISHER_CPU]: a server with no connection, stream, publisher
# or UDP session limits, and (given a core) the RTMP publisher of live/x; sets $srv.
sluice() {
  taskset -c "$1" "$dir/sluice" --workers "$2" --rtmp 127.0.0.1:19350 --http 127.0.0.1:18080 \
    --rtsp off --srt off --webrtc-udp 127.0.0.1:18189 --log warn --max-connections 0 \
    --max-connections-per-ip 0 --max-publishers-per-ip 0 --max-streams 0 \
    --max-udp-sessions 0 >"$out/sluice.log" 2>&1 &
  srv=$!; pids+=("$srv")
  wait_port 19350; wait_port 18080
  [ -n "${3:-}" ] || return 0
  taskset -c "$3" "$dir/sluice-bench" publish --url rtmp://127.0.0.1:19350/live/x \
    --clip "$dir/clip.flv" --duration 900s --quiet >/dev/null 2>&1 &
  pids+=("$!")
  sleep 3
}

echo "== WebRTC: one worker on core 0, players on cores 2-$last"
sluice 0 1 1
for n in $whep_n; do
  if [ -x "$dir/whepload" ]; then
    taskset -c "2-$last" "$dir/whepload" -url http://127.0.0.1:18080/live/x/whep -n "$n" \
      -ramp "${WHEP_RAMP:-200}" -duration 20s -pid "$srv" -json "$out/whep-$n.json"
  else
    taskset -c "2-$last" "$dir/sluice-bench" play --protocol whep --threads 8 \
      --url http://127.0.0.1:18080/live/x/whep -n "$n" --ramp "${WHEP_RAMP:-200}/s" \
      --duration 20s --server-pid "$srv" --quiet --json "$out/whep-$n.json"
  fi
done
cleanup; pids=()
sleep 1

if [ -x "$dir/whipload" ] && [ -s "$dir/whip.h264" ] && [ -s "$dir/whip.ogg" ]; then
  echo "== WHIP: one worker on core 0, publishers on cores 2-$last"
  for n in ${WHIP_N:-1000 2000}; do
    sluice 0 1
    taskset -c "2-$last" "$dir/whipload" -url "http://127.0.0.1:18080/live/w{i}/whip" -n "$n" \
      -ramp "${WHIP_RAMP:-200}" -duration 20s -pid "$srv" -json "$out/whip-$n.json" \
      -h264 "$dir/whip.h264" -ogg "$dir/whip.ogg" || echo "whipload failed" >&2
    cleanup; pids=()
    sleep 1
  done
fi

if [ -n "${FLV_N:-}" ]; then
  for w in ${FLV_WORKERS:-1 8}; do
    echo "== HTTP-FLV: $w workers on cores 0-$((w - 1)), players on cores $w-$last"
    sluice "0-$((w - 1))" "$w" "$w"
    threads=$(( cores - w < 8 ? cores - w : 8 ))
    c0=$(cpu_s "$srv"); t0=$(date +%s.%N)
    taskset -c "$w-$last" "$dir/sluice-bench" play --protocol flv --threads "$threads" \
      --url http://127.0.0.1:18080/live/x.flv -n "$FLV_N" --ramp 2000/s --duration 20s \
      --quiet --json "$out/flv-w$w-n$FLV_N.json" || echo "players failed" >&2
    c1=$(cpu_s "$srv"); t1=$(date +%s.%N)
    bytes=$(python3 -c "import json; print(json.load(open('$out/flv-w$w-n$FLV_N.json'))['bytes_total'])")
    awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v b="$bytes" -v w="$w" \
      'BEGIN { c = c1 - c0; t = t1 - t0; printf "server: %.1f CPU-s over %.1f s (%.2f cores of %d), %.3f CPU-s/GB\n", c, t, c / t, w, c / (b / 1e9) }' \
      | tee "$out/flv-w$w-n$FLV_N.server"
    cleanup; pids=()
    sleep 1
  done
fi
