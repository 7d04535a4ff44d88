#!/usr/bin/env bash
# Scale runs for a many-core machine (the lent 16-core `device`), from binaries built
# elsewhere: DIR holds sluice, sluice-bench and clip.flv (the 600 kbit/s clip:
# bench/lib.sh small_clip), and may hold `whepload`, a WHEP load client on pion (Go's
# WebRTC stack; flags -url -n -ramp -duration -pid -json), the players of the WebRTC
# run when present; without it sluice-bench's own WHEP players (str0m) play.
#
# SECTIONS picks the runs (default "whep flv"):
#
# whip   WHIP publishers per core, when DIR has `whipload` (bench/whipload, pion) and
#        its media (whip.h264, whip.ogg: bench/lib.sh whip_media): Sluice on core 0 (one
#        worker), N pion publishers of their own streams (600 kbit/s each) on cores
#        2..15, a fresh server for each N (WHIP_N, "1000 2000"); the server's CPU-s/GB,
#        cores used and RSS from whipload's -pid view.
# whep   WebRTC viewers per core: Sluice on core 0 (one worker; the stream's AAC-to-Opus
#        thread there too), the RTMP publisher on core 1, pion WHEP players on the other
#        cores, so that their kernel and user work is not the server's. N players per run
#        (the script's arguments), the server's CPU-s/GB, cores used, RSS and first-packet
#        times from whepload's -pid view of the server.
# flv    One hot stream on many cores: Sluice with W workers (FLV_WORKERS, "1 8") on
#        cores 0..W-1, FLV_N HTTP-FLV players (sluice-bench) on the rest; CPU-s/GB and
#        players per core.
# moon   The moonshot: MOON_N (100000) HTTP-FLV players of one stream from one box.
#        Sluice with MOON_WORKERS (8) workers on cores 0..W-1 listening on 0.0.0.0 (this
#        machine reaches nothing outside it), MOON_PROCS (4) sluice-bench processes on
#        the other cores, process i playing from 127.0.0.i so that each has its own
#        65 000 source ports; the kernel's port range, backlog and TCP memory are
#        raised first. The players' reports are summed into moon-N.summary.json; the
#        workers' connection counts come from /metrics in the middle of the window.
# proto  Cost per GB by protocol on one worker (core 0) with the players on cores
#        2..15: PROTO_N (2000) players each of PROTOS ("flv rtmp srt"), one after
#        the other on the same server; sluice-bench's --server-pid figures.
#
#   SECTIONS="moon flv" bash bench/device.sh DIR OUT [WHEP_N...]  (OUT: the reports)
set -euo pipefail
dir=$1 out=$2; shift 2
whep_n=${*:-1000 2000 3000}
sections=${SECTIONS:-whep flv}
mkdir -p "$out"
# A libopus.so.0 beside the binaries serves a machine without one.
[ -e "$dir/libopus.so.0" ] && export LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cores=$(nproc)
last=$((cores - 1))
# Each player is a descriptor in the server and one in its client: raise the kernel's
# ceiling first, then this shell's limits, which the processes it starts inherit.
sysctl -qw fs.nr_open=2097152 2>/dev/null || true
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
echo "descriptors: soft $(ulimit -Sn), hard $(ulimit -Hn), fs.nr_open $(cat /proc/sys/fs/nr_open)"
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

# sluice CPUS WORKERS [PUBLISHER_CPU [HTTP_HOST]]: a server with no connection, stream,
# publisher or UDP session limits, and (given a core) the RTMP publisher of live/x;
# sets $srv.
sluice() {
  taskset -c "$1" "$dir/sluice" --workers "$2" --rtmp 127.0.0.1:19350 --http "${4:-127.0.0.1}:18080" \
    --rtsp off --srt 127.0.0.1:18890 --webrtc-udp 127.0.0.1:18189 --log warn --max-connections 0 \
    --max-connections-per-ip 0 --max-publishers-per-ip 0 --max-streams 0 --max-udp-sessions 0 \
    >"$out/sluice.log" 2>&1 &
  srv=$!; pids+=("$srv")
  wait_port 19350; wait_port 18080
  [ -n "${3:-}" ] || return 0
  taskset -c "$3" "$dir/sluice-bench" publish --url rtmp://127.0.0.1:19350/live/x \
    --clip "$dir/clip.flv" --duration 900s --quiet >/dev/null 2>&1 &
  pids+=("$!")
  sleep 3
}

# metrics FILE: the server's /metrics, by any means this machine has.
metrics() {
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:18080/metrics", timeout=10).read().decode())' >"$1" 2>/dev/null ||
    echo "no /metrics" >"$1"
}

if [[ " $sections " == *" whip "* ]] && [ -x "$dir/whipload" ]; then
  pc=$(( cores > 2 ? 2 : 1 ))
  echo "== WHIP: one worker on core 0, publishers on cores $pc-$last"
  for n in ${WHIP_N:-1000 2000}; do
    sluice 0 1
    taskset -c "$pc-$last" "$dir/whipload" -url "http://127.0.0.1:18080/live/w{i}/whip" -n "$n" \
      -ramp "${WHIP_RAMP:-200}" -duration 20s -pid "$srv" -json "$out/whip-$n.json" \
      -h264 "$dir/whip.h264" -ogg "$dir/whip.ogg" >"$out/whip-$n.log" 2>&1 || echo "whipload failed" >&2
    tail -n 15 "$out/whip-$n.log"
    cleanup; pids=()
    sleep 1
  done
fi

if [[ " $sections " == *" whep "* ]]; then
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
fi

if [[ " $sections " == *" flv "* ]]; then
  flv_n=${FLV_N:-20000}
  for w in ${FLV_WORKERS:-1 8}; do
    echo "== HTTP-FLV: $w workers on cores 0-$((w - 1)), $flv_n players on cores $w-$last"
    sluice "0-$((w - 1))" "$w" "$w"
    threads=$(( cores - w < 8 ? cores - w : 8 ))
    c0=$(cpu_s "$srv"); t0=$(date +%s.%N)
    taskset -c "$w-$last" "$dir/sluice-bench" play --protocol flv --threads "$threads" \
      --url http://127.0.0.1:18080/live/x.flv -n "$flv_n" --ramp 4000/s --duration 20s \
      --server-pid "$srv" --quiet --json "$out/flv-w$w-n$flv_n.json" || echo "players failed" >&2
    c1=$(cpu_s "$srv"); t1=$(date +%s.%N)
    bytes=$(python3 -c "import json; print(json.load(open('$out/flv-w$w-n$flv_n.json'))['bytes_total'])")
    awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v b="$bytes" -v w="$w" \
      'BEGIN { c = c1 - c0; t = t1 - t0; printf "server, whole run: %.1f CPU-s over %.1f s (%.2f cores of %d), %.3f CPU-s/GB\n", c, t, c / t, w, c / (b / 1e9) }' \
      | tee "$out/flv-w$w-n$flv_n.server"
    cleanup; pids=()
    sleep 1
  done
fi

# summarize OUT_JSON JSON...: one report of several sluice-bench processes that played
# at once against one server (their windows coincide): players and bytes summed, the
# server's figures from the first, its RSS per player over all.
summarize() {
  local to=$1; shift
  python3 - "$to" "$@" <<'EOF'
import json, sys
to, files = sys.argv[1], sys.argv[2:]
rs = [json.load(open(f)) for f in files]
import os
# SERVERS reports, one per server (the edges), are summed; the origin's CPU is added.
k = int(os.environ.get("SERVERS", "1"))
srvs = [r.get("server") or {} for r in rs[:k]]
srv = {f: sum(x.get(f, 0) or 0 for x in srvs) for f in ("cpu_s", "cpu_cores", "rss_before_kib", "rss_end_kib")}
srv["cpu_s"] += float(os.environ.get("ORIGIN_CPU_S", "0"))
n = sum(r["count"] for r in rs)
ok = sum(r["ok"] for r in rs)
bw = sum(r["bytes_window"] for r in rs)
win = rs[0]["window_s"]
s = {
    "players": n, "ok": ok, "failed": sum(r["failed"] for r in rs),
    "errors": [r["errors"] for r in rs],
    "window_s": win, "gbit_s": bw * 8 / win / 1e9 if win else None,
    "mbit_s_per_player": bw * 8 / win / 1e6 / max(ok, 1) if win else None,
    "stalls": sum(r["stalls"] for r in rs),
    "players_with_stalls": sum(r["players_with_stalls"] for r in rs),
    "max_lag_ms": max(r["max_lag_ms"] for r in rs),
    "connect_ms": [r["connect_ms"] for r in rs],
    "publish_latency_ms": [r.get("publish_latency_ms") for r in rs],
    "servers": k, "origin_cpu_s": float(os.environ.get("ORIGIN_CPU_S", "0")),
    "server_cpu_s": srv.get("cpu_s"), "server_cores": srv.get("cpu_cores"),
    "server_cpu_s_per_gb": srv["cpu_s"] / (bw / 1e9) if srv.get("cpu_s") and bw else None,
    "server_rss_before_mib": srv.get("rss_before_kib", 0) / 1024,
    "server_rss_end_mib": srv.get("rss_end_kib", 0) / 1024,
    "server_rss_per_player_kib": (srv.get("rss_end_kib", 0) - srv.get("rss_before_kib", 0)) / max(ok, 1),
}
json.dump(s, open(to, "w"), indent=1)
print(json.dumps({k: v for k, v in s.items() if k not in ("errors", "connect_ms", "publish_latency_ms")}))
EOF
}

if [[ " $sections " == *" moon "* ]]; then
  n=${MOON_N:-100000} w=${MOON_WORKERS:-8} procs=${MOON_PROCS:-8} dur=${MOON_DURATION:-20}
  ramp=${MOON_RAMP:-5000}
  # One process holds at most its descriptor limit of connections. Where the hard limit
  # is below N (a sandbox without CAP_SYS_RESOURCE), the players go to MOON_EDGES edges
  # on this box, ordinary Sluice processes that pull the stream from the origin over
  # RTMP, each with its own limit; the origin serves only them.
  edges=${MOON_EDGES:-$(( $(ulimit -Hn) < n + 1000 ? procs : 0 ))}
  sysctl -qw net.ipv4.ip_local_port_range="1024 65535" net.core.somaxconn=65535 \
    net.ipv4.tcp_max_syn_backlog=65535 net.ipv4.tcp_mem="8388608 12582912 16777216" \
    fs.file-max=4194304 || echo "sysctl refused" >&2
  servers=()
  if [ "$edges" = 0 ]; then
    echo "== Moonshot: $n HTTP-FLV players, one Sluice of $w workers on cores 0-$((w - 1)), $procs player processes on cores $w-$last"
    sluice "0-$((w - 1))" "$w" "$w" 0.0.0.0
    servers=("$srv")
  else
    echo "== Moonshot: $n HTTP-FLV players on $edges edges (descriptor limit $(ulimit -Hn) a process), one worker each on cores 0-$((w - 1)), the origin beside them, $procs player processes on cores $w-$last"
    sluice "0-$((w - 1))" 1 "$w"
    origin=$srv
    for e in $(seq 1 "$edges"); do
      taskset -c "$(( (e - 1) % w ))" "$dir/sluice" --workers 1 --rtmp off --http "127.0.0.1:$((18100 + e))" \
        --rtsp off --srt off --webrtc-udp off --log warn --max-connections 0 --max-connections-per-ip 0 \
        --origin rtmp://127.0.0.1:19350 >"$out/edge-$e.log" 2>&1 &
      servers+=("$!"); pids+=("$!")
    done
    for e in $(seq 1 "$edges"); do wait_port $((18100 + e)); done
  fi
  per=$((n / procs)) span=$(( (cores - w) / procs ))
  span=$(( span < 1 ? 1 : span ))
  rm -f "$out"/moon-p*.json
  players=()
  o0=$( [ "$edges" = 0 ] || cpu_s "$origin" )
  for i in $(seq 1 "$procs"); do
    lo=$(( w + (i - 1) * span )); hi=$(( lo + span - 1 ))
    (( lo > last )) && lo=$last; (( hi > last )) && hi=$last
    if [ "$edges" = 0 ]; then
      url="http://127.0.0.$i:18080/live/x.flv" server=$srv
    else
      e=$(( (i - 1) % edges + 1 ))
      url="http://127.0.0.1:$((18100 + e))/live/x.flv" server=${servers[$((e - 1))]}
    fi
    taskset -c "$lo-$hi" "$dir/sluice-bench" play --protocol flv --threads "$span" \
      --url "$url" -n "$per" --ramp "$((ramp / procs))/s" \
      --duration "${dur}s" --server-pid "$server" --quiet --json "$out/moon-p$i.json" \
      >"$out/moon-p$i.log" 2>&1 &
    players+=("$!"); pids+=("$!")
  done
  # Every 2 s: each server's descriptors and CPU seconds, the machine's sockets.
  (while kill -0 "${servers[0]}" 2>/dev/null; do
     line="$(date +%s)"
     for s in "${servers[@]}"; do line="$line | $s fds $(ls "/proc/$s/fd" | wc -l) cpu_s $(cpu_s "$s")"; done
     echo "$line | $(grep -E '^(TCP|sockets):' /proc/net/sockstat | tr '\n' ' ')"
     sleep 2
   done) >"$out/moon-monitor.txt" 2>&1 &
  pids+=("$!")
  sleep $(( n / ramp + dur / 2 ))
  metrics "$out/moon-metrics.txt"
  free -m >"$out/moon-free.txt"
  for p in "${players[@]}"; do wait "$p" || echo "player process $p failed" >&2; done
  origin_s=$( [ "$edges" = 0 ] && echo 0 || awk -v a="$o0" -v b="$(cpu_s "$origin")" 'BEGIN { print b - a }' )
  ORIGIN_CPU_S=$origin_s SERVERS=$([ "$edges" = 0 ] && echo 1 || echo "$edges") \
    summarize "$out/moon-$n.summary.json" "$out"/moon-p*.json || true
  # One file of what explains the run: the workers' share, memory, the monitor, logs.
  {
    echo "## workers (/metrics of the first server, mid-window)"
    grep -E '^sluice_worker_(connections|busy_ratio|cpu_seconds)' "$out/moon-metrics.txt" || head -c 300 "$out/moon-metrics.txt"
    echo "## free -m, mid-window"; cat "$out/moon-free.txt"
    echo "## monitor"; cat "$out/moon-monitor.txt"
    echo "## logs (last 10 lines each)"
    for f in "$out/sluice.log" "$out"/edge-*.log; do [ -e "$f" ] && { echo "# $f"; tail -n 10 "$f"; }; done
    for f in "$out"/moon-p*.log; do echo "## $f"; tail -n 12 "$f"; done
  } >"$out/moon-$n.diag.txt" 2>&1
  grep -A 9 '^## workers' "$out/moon-$n.diag.txt" || true
  rm -f "$out"/moon-p*.log "$out"/moon-{metrics,monitor,free}.txt "$out"/edge-*.log "$out"/moon-p*.json
  cleanup; pids=()
  sleep 2
fi

if [[ " $sections " == *" proto "* ]]; then
  pn=${PROTO_N:-2000}
  pc=$(( cores > 2 ? 2 : 1 ))
  echo "== Per protocol: one worker on core 0, $pn players each on cores $pc-$last"
  sluice 0 1 1
  for p in ${PROTOS:-flv rtmp srt}; do
    case $p in
      flv) u=http://127.0.0.1:18080/live/x.flv ;;
      rtmp) u=rtmp://127.0.0.1:19350/live/x ;;
      srt) u="srt://127.0.0.1:18890?streamid=read:live/x" ;;
      *) echo "unknown protocol $p" >&2; continue ;;
    esac
    taskset -c "$pc-$last" "$dir/sluice-bench" play --protocol "$p" --threads 8 --url "$u" \
      -n "$pn" --ramp 2000/s --duration 20s --warmup 3s --server-pid "$srv" --quiet \
      --json "$out/proto-$p.json" >"$out/proto-$p.log" 2>&1 || echo "$p players failed" >&2
    summarize "$out/proto-$p.summary.json" "$out/proto-$p.json" || true
    rm -f "$out/proto-$p.json"
  done
  cleanup; pids=()
fi
