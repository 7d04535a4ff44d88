#!/usr/bin/env bash
# UDP receive system calls per datagram: one Sluice worker under strace with a publisher
# and N players of a datagram protocol for D seconds; counts the server's receive calls
# on UDP sockets (recvfrom, recvmmsg: calls that returned datagrams, and EAGAIN) and
# shows the endpoint's own counters (sluice_udp_*_total). A count, not a timing: it
# holds on a loaded machine, and debug builds do (the default, to save a release build).
#   srt:      an SRT publisher (sluice-bench), N SRT players (their ACKs come back)
#   whep:     an RTMP publisher, N WHEP players (RTCP reports, STUN consent checks)
#   rtsp-udp: an RTSP publisher sending RTP over UDP, N RTSP players over UDP
# Usage: bench/udp-receive.sh [-p "srt whep rtsp-udp"] [-n PLAYERS] [-d SECONDS]
# Knobs: SLUICE=PATH (default target/debug/sluice; another build to compare),
# BENCH=PATH (sluice-bench), CLIP=PATH (an FLV; else made by scripts/make-test-media.sh),
# BENCH_PORT_BASE (default 29500), OUT (default target/bench/udp-receive).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
protos="srt whep rtsp-udp" n=20 dur=10
while getopts p:n:d: opt; do
  case $opt in
    p) protos=$OPTARG ;; n) n=$OPTARG ;; d) dur=$OPTARG ;;
    *) echo "usage: $0 [-p protocols] [-n players] [-d seconds]" >&2; exit 2 ;;
  esac
done
sluice=${SLUICE:-$root/target/debug/sluice}
bench=${BENCH:-$root/target/debug/sluice-bench}
out=${OUT:-$root/target/bench/udp-receive}
mkdir -p "$out"
clip=${CLIP:-$out/media/h264_aac_720p.flv}
[ -e "$clip" ] || bash "$root/scripts/make-test-media.sh" "$out/media" 20 >/dev/null
base=${BENCH_PORT_BASE:-29500}
rtmp=$((base + 1)) http=$((base + 2)) rtsp=$((base + 3)) srt=$((base + 4))
command -v strace >/dev/null || { echo "$0: strace is needed" >&2; exit 3; }

for proto in $protos; do
  trace=$out/trace.$proto
  strace -f -yy -e trace=recvfrom,recvmmsg -o "$trace" "$sluice" --workers 1 --log warn \
    --rtmp "127.0.0.1:$rtmp" --http "127.0.0.1:$http" --rtsp "127.0.0.1:$rtsp" --rtp-ports 0 \
    --srt "127.0.0.1:$srt" --webrtc-udp 127.0.0.1:0 --max-connections 0 \
    --max-connections-per-ip 0 --max-publishers-per-ip 0 --max-streams 0 \
    >"$out/sluice.$proto.log" 2>&1 &
  tracer=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$http/metrics" && break; sleep 0.2; done
  case $proto in
    srt) pub=(--protocol srt --url "srt://127.0.0.1:$srt?streamid=publish:live/x")
      url="srt://127.0.0.1:$srt?streamid=read:live/x" ;;
    whep) pub=(--url "rtmp://127.0.0.1:$rtmp/live/x")
      url="http://127.0.0.1:$http/live/x/whep" ;;
    rtsp-udp) pub=(--protocol rtsp-udp --url "rtsp://127.0.0.1:$rtsp/live/x")
      url="rtsp://127.0.0.1:$rtsp/live/x" ;;
    *) echo "$0: unknown protocol $proto" >&2; exit 2 ;;
  esac
  "$bench" publish "${pub[@]}" --duration "$((dur + 6))s" --quiet --clip "$clip" >/dev/null 2>&1 &
  publisher=$!
  sleep 2
  "$bench" play --protocol "$proto" --url "$url" -n "$n" --duration "${dur}s" --quiet \
    --json "$out/play.$proto.json" >/dev/null 2>&1 || true
  metrics=$(curl -s "http://127.0.0.1:$http/metrics" | grep -E '^sluice_udp_(datagrams|receive_calls|unclaimed_datagrams)_total' | grep -v ' 0$' || true)
  kill "$publisher" 2>/dev/null || true
  wait "$publisher" 2>/dev/null || true
  kill -INT "$(pgrep -P "$tracer")" 2>/dev/null || true
  wait "$tracer" || true
  calls=$(grep -cE 'recv(from|mmsg)\([0-9]+<UDP' "$trace" || true)
  eagain=$(grep -E 'recv(from|mmsg)\([0-9]+<UDP' "$trace" | grep -c EAGAIN || true)
  players=$(grep -oE '"ok": [0-9]+' "$out/play.$proto.json" | head -1)
  echo "$proto: UDP receive calls $calls ($((calls - eagain)) returned datagrams, $eagain EAGAIN); players $players"
  [ -z "$metrics" ] || echo "$metrics" | sed 's/^/  /'
done
