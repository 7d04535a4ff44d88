#!/usr/bin/env bash
# HLS segment requests per second (wrk): the same segment fetched over and over by 100
# keep-alive connections carrying no cookie, one shared cookie, or a different cookie
# per request. Viewers are counted by the segments they fetch (one atomic add per
# request, src/hls/audience.rs) and no cookie is read, so the three rows must match:
# a cookie-less player costs what one with a cookie costs. Sluice serves
# from memory (sendfile from sealed memfds on plain HTTP); nginx-rtmp's HLS files are
# served by nginx with sendfile, side by side. Server on core 0, wrk on core 1.
#
# Usage: bench/hls-requests.sh [-c CONNECTIONS] [-d SECONDS] [-x "nginx"] [-o OUTDIR]
# Writes OUTDIR/hls-requests.md.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
conns=100 dur=10 peers="nginx" out="$root/target/bench"
while getopts c:d:x:o: opt; do
  case $opt in
    c) conns=$OPTARG ;; d) dur=$OPTARG ;; x) peers=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,10p' "$0" >&2; exit 2 ;;
  esac
done
command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 2; }
have_nginx || peers=${peers//nginx/}
bound_run "${BENCH_MAX_S:-300}"
setup "$out"
md=$out/hls-requests.md

# wrk Lua: one shared cookie, or a new one per request.
cat >"$out/cookie-same.lua" <<'LUA'
wrk.headers["Cookie"] = "sluice_hls=5ee5"
LUA
cat >"$out/cookie-each.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, { ["Cookie"] = "sluice_hls=" .. string.format("%x", n * 7919 + 1) })
end
LUA

# rps URL [LUA]: requests/s and transfer/s of one wrk run.
rps() {
  local script=()
  [ -z "${2:-}" ] || script=(-s "$2")
  taskset -c "$client_cpus" wrk -t1 -c"$conns" -d"${dur}s" "${script[@]}" "$1" 2>&1 |
    awk '/Requests\/sec/ {r=$2} /Transfer\/sec/ {t=$2} END {print r, t}'
}

# cpu PID: utime+stime ticks of PID.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

{
  echo "# HLS segment requests, $conns connections, ${dur}s each"
  echo
  echo "$(date '+%F %H:%M'), $(hostname), $(nproc) cores, loopback; server pinned to core $server_cpus, wrk to core $client_cpus."
  echo
  echo "| server | request | requests/s | transfer/s | server CPU-s/GB |"
  echo "|---|---|---|---|---|"
} >"$md"

row() { # row SERVER LABEL URL [LUA]
  local c0 c1 r t gb
  c0=$(cpu "$srv")
  read -r r t < <(rps "$3" "${4:-}")
  c1=$(cpu "$srv")
  # transfer/s as wrk prints it (e.g. 1.21GB), to GB/s
  gb=$(python3 -c "import re,sys; v,u=re.match(r'([0-9.]+)([KMG]?B)', '$t').groups(); print(float(v)*{'B':1e-9,'KB':1e-6,'MB':1e-3,'GB':1}[u]*$dur)")
  local cpus
  cpus=$(python3 -c "print(f'{($c1 - $c0) / $(getconf CLK_TCK) / max($gb, 1e-9):.3f}')")
  echo "| $1 | $2 | $r | $t | $cpus |" >>"$md"
}

PUB_S=$((dur * 6 + 30)) start_server sluice 200
sleep 7
base="http://127.0.0.1:$S_HTTP/live"
# The newest segment each time: it stays in the window (9 x 2 s) for the whole run.
newest() { curl -s "$base/x.m3u8" | grep '\.ts$' | tail -1; }
[ -n "$(newest)" ] || { echo "no TS segment in the playlist" >&2; exit 1; }
row sluice "TS segment, no cookie" "$base/$(newest)"
row sluice "TS segment, one shared cookie" "$base/$(newest)" "$out/cookie-same.lua"
row sluice "TS segment, a new cookie each" "$base/$(newest)" "$out/cookie-each.lua"
row sluice "TS playlist, one shared cookie" "$base/x.m3u8" "$out/cookie-same.lua"
stop_server

if [[ $peers == *nginx* ]]; then
  PUB_S=$((dur * 2 + 30)) start_server nginx 200
  sleep 8
  nseg=$(curl -s "http://127.0.0.1:$N_HTTP/hls/x.m3u8" | grep '\.ts$' | tail -1)
  if [ -n "$nseg" ]; then
    row nginx-rtmp "TS segment (file, sendfile)" "http://127.0.0.1:$N_HTTP/hls/$nseg"
  fi
  stop_server
fi
cat "$md"
