#!/usr/bin/env bash
# Scenario (e), publishers: N concurrent publishers of a ~600 kbit/s clip
# (640x360, 500k H.264 + 64k AAC, FLV, made here with ffmpeg) on one worker thread
# (server on core 0, publishers on core 1), N ramped in steps until the server core
# saturates or the publishers fall behind (ingest below 95% of N x the clip's
# bitrate: the server does not read fast enough), with CPU per publisher. nginx-rtmp
# beside it with -x "sluice nginx". -p picks the protocols: rtmp (the default), rtsp
# (ANNOUNCE/RECORD, RTP interleaved on TCP), rtsp-udp (RTP over UDP), srt (MPEG-TS
# over SRT); those run on Sluice only and show as server "sluice-rtsp"
# ("sluice-rtsp-udp", "sluice-srt").
#
# Usage: bench/publishers.sh [-s "100 200 ..."] [-d SECONDS] [-x "sluice nginx"] [-p "rtmp rtsp rtsp-udp srt"] [-o OUTDIR]
# Writes OUTDIR/publishers.md, publishers.png and one JSON per step.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
steps="100 250 500 1000 2000 3000" dur=8 servers="sluice nginx" protos=rtmp out="$root/target/bench"
while getopts s:d:x:p:o: opt; do
  case $opt in
    s) steps=$OPTARG ;; d) dur=$OPTARG ;; x) servers=$OPTARG ;; p) protos=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,13p' "$0" >&2; exit 2 ;;
  esac
done
have_nginx || servers=${servers//nginx/}
bound_run "${BENCH_MAX_S:-400}"
setup "$out"
small=$(small_clip)
# The clip's bitrate (FLV tag bodies), from its size and duration.
kbit=$(python3 -c "import sys,os,subprocess as sp; d=float(sp.check_output(['ffprobe','-v','error','-show_entries','format=duration','-of','csv=p=0',sys.argv[1]])); print(round(os.path.getsize(sys.argv[1])*8/d/1000))" "$small")

labels=()
for proto in $protos; do
  for s in $servers; do
    u=$(ingest_url "$s" "$proto"); u=${u%/x}/p{i}
    [ "$u" != "/p{i}" ] || continue  # nginx takes RTMP only
    label=$s; [ "$proto" = rtmp ] || label=$s-$proto
    labels+=("$label")
    for n in $steps; do
      case $s in sluice) start_sluice --workers 1 ;; nginx) start_nginx ;; esac
      j=$out/pub-$label-$n.json
      tm=(); [ -x /usr/bin/time ] && tm=(/usr/bin/time -o "$j.client" -f "%U %S %e")
      "${tm[@]}" taskset -c "$client_cpus" "$bench" publish --protocol "$proto" --url "$u" --clip "$small" \
        -n "$n" --ramp 1000/s --duration "${dur}s" --warmup 2s --server-pid "$srv" --quiet --json "$j" >/dev/null &
      p=$!; pids+=("$p")
      head -1 /proc/stat >"$j.stat0"; wait "$p"; head -1 /proc/stat >"$j.stat1"
      stop "$srv"
      python3 "$root/bench/report.py" stop-publishers "$j" "$kbit" "$n" && break
    done
  done
done

python3 "$root/bench/report.py" publishers "$out" "$kbit" "${labels[@]}"
