#!/usr/bin/env bash
# HLS requests per second (wrk), Sluice beside nginx serving nginx-rtmp's HLS files
# (sendfile, tcp_nopush, open_file_cache), in interleaved rounds (sluice, nginx, sluice,
# nginx, ...), medians. Each row fetches one URL over and over on CONNECTIONS
# connections, as a kind of player does:
#   keep-alive        segment, HTTP/1.1 keep-alive, no cookie (hls.js on another
#                     origin, ExoPlayer, set-top boxes, ffmpeg)
#   cookie            segment, keep-alive, a different cookie each request (a browser
#                     on a site that sets its own cookies; the server reads none)
#   new connection    segment, `Connection: close`: a connection per request (players
#                     and probes that do not keep connections)
#   range             the segment's second half, `Range: bytes=N-` (AVPlayer, seeking)
#   playlist          the live playlist, keep-alive
# Server on core 0, wrk on core 1. The server's CPU is read from /proc around each row.
#
# Usage: bench/hls-requests.sh [-c CONNECTIONS] [-d SECONDS] [-r ROUNDS] [-x "nginx"] [-o OUTDIR]
# Writes OUTDIR/hls-requests.md (every round, then the medians).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
conns=100 dur=10 rounds=3 peers="nginx" out="$root/target/bench"
while getopts c:d:r:x:o: opt; do
  case $opt in
    c) conns=$OPTARG ;; d) dur=$OPTARG ;; r) rounds=$OPTARG ;; x) peers=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 2; }
have_nginx || peers=${peers//nginx/}
servers="sluice"
[[ $peers != *nginx* ]] || servers="sluice nginx"
kinds="keep-alive cookie new-connection range playlist"
bound_run "${BENCH_MAX_S:-$((rounds * 2 * (6 * dur + 40) + 60))}"
setup "$out"
md=$out/hls-requests.md
rows=$out/hls-requests.rows
: >"$rows"

# wrk Lua scripts, one per request kind (keep-alive and playlist need none).
cat >"$out/cookie.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, { ["Cookie"] = "site_session=" .. string.format("%x", n * 7919 + 1) })
end
LUA
cat >"$out/new-connection.lua" <<'LUA'
wrk.headers["Connection"] = "close"
LUA

# rps URL [LUA]: requests/s, transfer/s and non-2xx count of one wrk run.
rps() {
  local script=()
  [ -z "${2:-}" ] || script=(-s "$2")
  taskset -c "$client_cpus" wrk -t1 -c"$conns" -d"${dur}s" "${script[@]}" "$1" 2>&1 |
    awk '/Requests\/sec/ {r=$2} /Transfer\/sec/ {t=$2} /Non-2xx/ {e=$NF} END {print r, t, e+0}'
}

# cpu PID: utime+stime ticks of PID.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure ROUND SERVER KIND URL [LUA]: one row into $rows:
# round server kind requests/s GB/s CPU-s/GB errors
measure() {
  local c0 c1 r t e
  c0=$(cpu "$srv")
  read -r r t e < <(rps "$4" "${5:-}")
  c1=$(cpu "$srv")
  python3 - "$1" "$2" "$3" "$r" "$t" "$e" "$c0" "$c1" "$(getconf CLK_TCK)" >>"$rows" <<'PY'
import re, sys
rnd, srv, kind, r, t, e, c0, c1, tck = sys.argv[1:]
v, u = re.match(r'([0-9.]+)([KMG]?B)', t).groups()
gbs = float(v) * {'B': 1e-9, 'KB': 1e-6, 'MB': 1e-3, 'GB': 1}[u]
dur = float(__import__('os').environ['DUR'])
cpus = (int(c1) - int(c0)) / int(tck)
print(rnd, srv, kind, r, f"{gbs:.4f}", f"{cpus / max(gbs * dur, 1e-9):.3f}", e)
PY
}
export DUR=$dur

# A range request for the second half of SEGMENT_URL (its length from a HEAD).
range_lua() {
  local len
  len=$(curl -sI "$1" | awk 'tolower($1)=="content-length:" {print $2+0}')
  [ -n "$len" ] && [ "$len" -gt 2 ] || { echo "no length for $1" >&2; exit 1; }
  echo "wrk.headers[\"Range\"] = \"bytes=$((len / 2))-\"" >"$out/range.lua"
}

# run_round ROUND SERVER: start SERVER with a publisher, measure every kind, stop it.
run_round() {
  local playlist base seg name=$2
  case $2 in
    sluice)
      PUB_S=$((dur * 6 + 40)) start_server sluice 200
      sleep 7
      base="http://127.0.0.1:$S_HTTP/live" playlist="http://127.0.0.1:$S_HTTP/live/x.m3u8" ;;
    nginx)
      PUB_S=$((dur * 6 + 40)) start_server nginx 200
      sleep 8
      base="http://127.0.0.1:$N_HTTP/hls" playlist="http://127.0.0.1:$N_HTTP/hls/x.m3u8" ;;
  esac
  # Each row fetches the newest segment of the moment: it stays in both servers'
  # windows for the row (a segment leaves Sluice's after 9 x 2 s).
  newest() {
    seg=$(curl -s "$playlist" | grep '\.ts$' | tail -1)
    [ -n "$seg" ] || { echo "$name: no TS segment in $playlist" >&2; exit 1; }
    echo "$base/$seg"
  }
  measure "$1" "$2" keep-alive "$(newest)"
  measure "$1" "$2" cookie "$(newest)" "$out/cookie.lua"
  measure "$1" "$2" new-connection "$(newest)" "$out/new-connection.lua"
  seg=$(newest)
  range_lua "$seg"
  measure "$1" "$2" range "$seg" "$out/range.lua"
  measure "$1" "$2" playlist "$playlist"
  stop_server
}

for r in $(seq "$rounds"); do
  for s in $servers; do run_round "$r" "$s"; done
done

python3 - "$rows" "$conns" "$dur" "$rounds" "$servers" "$kinds" >"$md" <<'PY'
import statistics, sys, time, os
rows_f, conns, dur, rounds, servers, kinds = sys.argv[1:]
rows = [l.split() for l in open(rows_f) if l.strip()]
servers, kinds = servers.split(), kinds.split()
print(f"# HLS requests, {conns} connections, {dur} s per row, {rounds} interleaved rounds")
print()
print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.uname().nodename}, {os.cpu_count()} cores, loopback; "
      "server on core 0, wrk on core 1. nginx: sendfile, tcp_nopush, open_file_cache.")
print()
print("| request | server | requests/s (rounds) | median | GB/s | CPU-s/GB (rounds) | median | non-2xx |")
print("|---|---|---|---|---|---|---|---|")
med = {}
for k in kinds:
    for s in servers:
        rs = [r for r in rows if r[1] == s and r[2] == k]
        if not rs:
            continue
        q = [float(r[3]) for r in rs]; g = [float(r[4]) for r in rs]; c = [float(r[5]) for r in rs]
        e = sum(int(r[6]) for r in rs)
        med[(k, s)] = (statistics.median(q), statistics.median(c))
        print(f"| {k} | {s} | {', '.join(f'{x:.0f}' for x in q)} | {statistics.median(q):.0f} | "
              f"{statistics.median(g):.2f} | {', '.join(f'{x:.3f}' for x in c)} | {statistics.median(c):.3f} | {e} |")
if "nginx" in servers:
    print()
    print("| request | sluice / nginx requests/s | sluice / nginx CPU-s/GB |")
    print("|---|---|---|")
    for k in kinds:
        if (k, "sluice") in med and (k, "nginx") in med:
            a, b = med[(k, "sluice")], med[(k, "nginx")]
            print(f"| {k} | {a[0] / b[0]:.2f}x | {a[1] / max(b[1], 1e-9):.2f}x |")
PY
cat "$md"
