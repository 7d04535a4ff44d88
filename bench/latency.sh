#!/usr/bin/env bash
# Scenario (f), latency: time to first keyframe of players joining one at a time on an
# idle server, and joining while 1000 players already play (loaded), per protocol, for
# Sluice beside the floor (flv, bench/floor) and nginx-rtmp (rtmp, and its HLS). The background
# players' lag over its minimum shows what the merge window adds to delivery jitter.
# Publish-to-play delay: the bench publisher stamps its send time into every H.264
# frame (an SEI NAL unit); players read it back (FLV/RTMP in each video message, RTSP in
# each depacketized frame, WebRTC (whep) in the frame's RTP payloads, HLS inside TS
# segments and fMP4 parts as they arrive).
# Measured with 1 player (8 s) and with the N background players. The floor plays a file
# (no publisher): no stamps.
#
# Usage: bench/latency.sh [-n BACKGROUND_PLAYERS] [-j JOINERS] [-m MERGE_MS]
#                         [-p "rtmp flv ws-flv rtsp hls ll-hls whep"] [-x "floor nginx"] [-o OUTDIR]
# Writes OUTDIR/latency.md and the JSON reports.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
n=1000 joiners=20 merge=200 protos="rtmp flv ws-flv rtsp hls ll-hls" peers="floor nginx" out="$root/target/bench"
while getopts n:j:m:p:x:o: opt; do
  case $opt in
    n) n=$OPTARG ;; j) joiners=$OPTARG ;; m) merge=$OPTARG ;; p) protos=$OPTARG ;; x) peers=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
  esac
done
have_nginx || peers=${peers//nginx/}
bound_run "${BENCH_MAX_S:-600}"
setup "$out"
runs=()
for p in $protos; do runs+=("sluice:$p"); done
for s in $peers; do
  case $s in nginx) runs+=("nginx:rtmp" "nginx:hls") ;; floor) runs+=("floor:flv") ;; esac
done
ramp=$((n / 2))/s join_s=$((joiners / 5 + 2))

for run in "${runs[@]}"; do
  s=${run%%:*} p=${run#*:} base=$out/lat-$s-$p
  start_server "$s" "$merge"
  u=$(url "$p" "$s")
  # Idle: players join one by one (5 a second), nothing else playing.
  play "$p" "$u" "$joiners" "$srv" "$base-idle.json" --ramp 5/s --duration 1s
  # One player alone: publish-to-play delay with no other load.
  play "$p" "$u" 1 "$srv" "$base-one.json" --duration 8s
  # Loaded: N players in the background, then the joiners.
  client_cpus=$client_cpus play "$p" "$u" "$n" "$srv" "$base-background.json" --ramp "$ramp" \
    --duration "$((join_s + 4))s" --warmup 1s &
  bg=$!
  sleep 4
  play "$p" "$u" "$joiners" "$srv" "$base-loaded.json" --ramp 5/s --duration 1s
  wait "$bg" || true
  stop_server
done

python3 "$root/bench/report.py" latency "$out" "$merge" "${runs[@]}"
