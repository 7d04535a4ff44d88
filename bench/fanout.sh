#!/usr/bin/env bash
# Scenario (a), fan-out cost: server CPU-seconds per GB delivered to N players of the
# 2 Mbit/s 720p clip, Sluice beside the floor (bench/floor) at the same merge window and
# nginx-rtmp (RTMP, its defaults), in one run. Each server is pinned to core 0;
# players (and the publisher) to core 1. HLS: Sluice's MPEG-TS (hls) and fMP4 Low-Latency
# (ll-hls) playlists, and nginx-rtmp's HLS (TS files written by the RTMP module, served
# by nginx's http module with sendfile) as the peer row of "hls". RTSP: RTP interleaved
# on the RTSP connection (rtsp) and RTP over UDP (rtsp-udp), Sluice only (no peer here).
# TLS: flv-tls, ws-flv-tls, hls-tls, ll-hls-tls are the same players over HTTPS (wss)
# on Sluice's --tls-self-signed listener, HTTP/1.1, sluice-bench --insecure; nginx's
# peer row of hls-tls serves the same HLS files over HTTPS (an ECDSA P-256 certificate
# from openssl, as Sluice's).
#
# fmp4 / ws-fmp4: HTTP-fMP4 and WebSocket-fMP4 players (an init segment, then a
# fragment per frame, made once per stream).
# rtsp-pp / rtsp-udp-pp run the RTSP players against Sluice with --rtsp-batch false
# (one send call per RTP packet), to measure what frame batching saves.
# whep: WebRTC players (sluice-bench's str0m peers), video and the clip's AAC as Opus
# (transcoded once by the server).
# srt: SRT players (sluice-bench's callers, sluice_srt): the stream's MPEG-TS, muxed once
# and cut into shared 1316-byte payloads.
# -x srtfloor adds the SRT floor (bench/floor/srtfloor.c, SRT players) when srt is
# among the protocols; srtfloor-CA (any of its flag letters) runs it with -C -A, and
# several such peers run as rows of their own.
# -c small publishes the 600 kbit/s 360p clip instead (small_clip in lib.sh).
# Usage: bench/fanout.sh [-n PLAYERS] [-d SECONDS] [-m MERGE_MS] [-c small]
#                        [-p "flv rtmp hls ll-hls rtsp rtsp-udp ws-flv whep srt fmp4 ws-fmp4
#                            flv-tls hls-tls ll-hls-tls ws-flv-tls"]
#                        [-x "floor srtfloor[-FLAGS] nginx"] [-o OUTDIR] [-r REPETITIONS]
# Writes OUTDIR/fanout.md and one JSON per run (sluice-bench's report; repetitions
# after the first as NAME.rK.json). With -r K every row runs K times, interleaved, and
# the table shows each row's median CPU-s/GB with the spread.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
n=500 dur=25 merge=200 protos="flv rtmp hls ll-hls rtsp rtsp-udp" peers="floor nginx" out="$root/target/bench" reps=1
small=0
while getopts n:d:m:p:x:o:r:c: opt; do
  case $opt in
    c) [ "$OPTARG" = small ] && small=1 ;;
    n) n=$OPTARG ;; d) dur=$OPTARG ;; m) merge=$OPTARG ;; p) protos=$OPTARG ;; x) peers=$OPTARG ;; o) out=$OPTARG ;;
    r) reps=$OPTARG ;;
    *) echo "usage: $0 [-n players] [-d seconds] [-m merge_ms] [-p protocols] [-x peers] [-o outdir] [-r repetitions]" >&2; exit 2 ;;
  esac
done
have_nginx || { [[ $peers != *nginx* ]] || echo "nginx with the RTMP module not found: skipping it" >&2; peers=${peers//nginx/}; }
bound_run "${BENCH_MAX_S:-600}"
setup "$out"
[ "$small" = 0 ] || clip=$(small_clip)
warmup=5

runs=()
[[ " $peers " != *" floor "* ]] || runs+=("floor:flv") # the floor serves HTTP-FLV only
if [[ " $protos " == *" srt "* ]]; then
  for x in $peers; do [[ $x != srtfloor* ]] || runs+=("$x:srt"); done
fi
for p in $protos; do runs+=("sluice:$p"); done
if [[ $peers == *nginx* ]]; then
  [[ " $protos " != *" rtmp "* ]] || runs+=("nginx:rtmp")
  [[ " $protos " != *" hls "* ]] || runs+=("nginx:hls")
  if [[ " $protos " == *" hls-tls "* ]]; then
    if command -v openssl >/dev/null; then runs+=("nginx:hls-tls"); else echo "no openssl: no nginx:hls-tls" >&2; fi
  fi
fi

# Repetitions go round all rows (rep 1 of every row, then rep 2, ...) so that a slow
# drift of the machine touches every row alike; the table takes each row's median.
rm -f "$out"/*.r[0-9]*.json
for rep in $(seq "$reps"); do
for run in "${runs[@]}"; do
  s=${run%%:*} p=${run#*:}
  json=$out/$s-$p.json
  [ "$rep" = 1 ] || json=${json%.json}.r$rep.json
  # rtsp-pp, rtsp-udp-pp: the same players, the server sending one packet per call.
  proto=${p%-pp} flags=()
  [ "$proto" = "$p" ] || flags=(--rtsp-batch false)
  # PROTO-tls: PROTO over TLS.
  read -r -a pflags <<<"$(play_flags "$proto")"
  case $p in
    *hls | *hls-tls) # a live playlist with a few segments before the players come (2 s each)
      PUB_S=$((dur + 25 + n / 500)) start_server "$s" "$merge"; sleep 7 ;;
    *) PUB_S=$((dur + 15 + n / 500)) start_server "$s" "$merge" "${flags[@]}" ;; # outlasts the ramp (500/s)
  esac
  play "$(play_proto "$proto")" "$(url "$proto" "$s")" "$n" "$srv" "$json" --ramp 500/s --duration "${dur}s" \
    --warmup "${warmup}s" ${pflags[@]+"${pflags[@]}"}
  stop_server
done
done

python3 "$root/bench/report.py" fanout "$out" "$n" "$merge" "${runs[@]}"
