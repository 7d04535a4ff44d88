#!/usr/bin/env bash
# Scenario: file downloads (/files/<path>) over loopback, Sluice beside nginx
# (sendfile on) in one run. Each server has one worker pinned to $SERVER_CPUS (0);
# curl runs on $CLIENT_CPUS (1).
#
# 1. Throughput: one connection downloads a page-cached random file of SIZE_MB, REPS
#    times per server and protocol (http, https = HTTP/1.1 over TLS, h2 = HTTP/2 over
#    TLS), interleaved; curl's speed_download, and the server's CPU (utime+stime from
#    /proc/PID/stat) per GB delivered.
# 2. Memory: N clients download the same RSS_MB file at once, each limited to RATE,
#    for RSS_S seconds; the server's VmRSS/RssAnon/RssFile sampled every 0.5 s (peak).
#
# Usage: bench/files.sh [-s SIZE_MB] [-r REPS] [-n CLIENTS] [-R RATE] [-m RSS_MB]
#                       [-t RSS_S] [-p "http https h2"] [-o OUTDIR]
# Prints a table; writes OUTDIR/files.txt. -n 0 skips the memory part. NO_BUILD=1 skips the release build.
# Ports: BENCH_PORT_BASE (default 29400 here) + 2 (Sluice HTTP), + 5 (nginx HTTP),
# + 6 (Sluice HTTPS), + 7 (nginx HTTPS). Only 127.0.0.1 is used.
set -euo pipefail
export BENCH_PORT_BASE=${BENCH_PORT_BASE:-29400}
. "$(dirname "$0")/lib.sh"
size=2048 reps=5 clients=100 rate=20M rss_mb=1024 rss_s=15 protos="http https h2" out="$root/target/bench/files"
while getopts s:r:n:R:m:t:p:o: opt; do
  case $opt in
    s) size=$OPTARG ;; r) reps=$OPTARG ;; n) clients=$OPTARG ;; R) rate=$OPTARG ;;
    m) rss_mb=$OPTARG ;; t) rss_s=$OPTARG ;; p) protos=$OPTARG ;; o) out=$OPTARG ;;
    *) echo "usage: $0 [-s size_mb] [-r reps] [-n clients] [-R rate] [-m rss_mb] [-t rss_s] [-p protos] [-o outdir]" >&2; exit 2 ;;
  esac
done
bound_run "${BENCH_MAX_S:-1200}"
S_HTTPS=$((base + 6)) N_HTTPS=$((base + 7))
mkdir -p "$out/root"
out=$(cd "$out" && pwd)
[ "${NO_BUILD:-0}" = 1 ] || (cd "$root" && cargo build --release -q -p sluice-server)
hz=$(getconf CLK_TCK)

# make FILE MB: random bytes (compression or holes would flatter nobody), kept between runs.
make_file() {
  if [ "$(stat -c %s "$1" 2>/dev/null || echo 0)" != $(($2 << 20)) ]; then
    head -c $(($2 << 20)) /dev/urandom >"$1.tmp"
    mv -f "$1.tmp" "$1"
  fi
  cat "$1" >/dev/null # into the page cache
}
make_file "$out/root/big.bin" "$size"
make_file "$out/root/rss.bin" "$rss_mb"
[ -s "$out/cert.pem" ] || openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -keyout "$out/key.pem" -out "$out/cert.pem" 2>/dev/null

start_files_sluice() {
  port_free "$S_HTTPS"
  start_sluice --workers 1 --rtsp off --https "127.0.0.1:$S_HTTPS" --tls-cert "$out/cert.pem" \
    --tls-key "$out/key.pem" --media-root "$out/root"
  sluice_pid=$srv
}

start_files_nginx() {
  local d=$out/nginx
  port_free "$N_HTTP"; port_free "$N_HTTPS"
  rm -rf "$d"; mkdir -p "$d/logs" "$d/tmp"
  cat >"$d/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 20000;
error_log $d/logs/error.log warn;
pid $d/logs/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $d/tmp; proxy_temp_path $d/tmp; fastcgi_temp_path $d/tmp;
  uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
  sendfile on; tcp_nopush on;
  ssl_certificate $out/cert.pem; ssl_certificate_key $out/key.pem; ssl_protocols TLSv1.2 TLSv1.3;
  server {
    listen 127.0.0.1:$N_HTTP;
    listen 127.0.0.1:$N_HTTPS ssl http2;
    location /files/ { alias $out/root/; }
  }
}
EOF
  taskset -c "$server_cpus" "$nginx_bin" -p "$d" -c "$d/nginx.conf" >"$d/logs/stdout.log" 2>&1 &
  nginx_pid=$!; pids+=("$nginx_pid")
  wait_port "$N_HTTP"; wait_port "$N_HTTPS"
}

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

url() { # url SERVER PROTO FILE
  local port
  case $1:$2 in
    sluice:http) port=$S_HTTP ;; sluice:*) port=$S_HTTPS ;;
    nginx:http) port=$N_HTTP ;; nginx:*) port=$N_HTTPS ;;
  esac
  case $2 in http) echo "http://127.0.0.1:$port/files/$3" ;; *) echo "https://127.0.0.1:$port/files/$3" ;; esac
}

curl_flags() { case $1 in http) echo "--http1.1" ;; https) echo "-k --http1.1" ;; h2) echo "-k --http2" ;; esac; }

start_files_sluice
start_files_nginx
echo "sluice $(git -C "$root" rev-parse --short HEAD), nginx $("$nginx_bin" -v 2>&1 | cut -d/ -f2), file ${size} MiB, $reps reps" |
  tee "$out/files.txt"
tls_of() { curl -skv --http1.1 -r 0-0 -o /dev/null "$1" 2>&1 | grep -o 'SSL connection using .*' | head -1; }
echo "TLS: sluice: $(tls_of "$(url sluice https big.bin)"); nginx: $(tls_of "$(url nginx https big.bin)")" |
  tee -a "$out/files.txt"

declare -A speeds cpus
for rep in $(seq "$reps"); do
  for p in $protos; do
    for s in sluice nginx; do
      pid=$sluice_pid; [ "$s" = nginx ] && pid=$nginx_pid
      t0=$(ticks "$pid")
      # shellcheck disable=SC2046
      r=$(taskset -c "$client_cpus" curl -s $(curl_flags "$p") -o /dev/null -w '%{speed_download} %{size_download} %{http_code}' "$(url "$s" "$p" big.bin)")
      t1=$(ticks "$pid")
      read -r speed bytes code <<<"$r"
      [ "$code" = 200 ] && [ "$bytes" = $((size << 20)) ] || { echo "$s $p: HTTP $code, $bytes bytes" >&2; exit 1; }
      cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v b="$bytes" 'BEGIN { printf "%.3f", t / hz / (b / 1e9) }')
      mbs=$(awk -v s="$speed" 'BEGIN { printf "%.0f", s / 1e6 }')
      speeds[$s:$p]+="$mbs "; cpus[$s:$p]+="$cpu "
      echo "rep $rep $p $s: $mbs MB/s, $cpu CPU-s/GB" >&2
    done
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
[ "$reps" = 0 ] || {
  echo
  printf '%-7s %-7s %14s %16s   %s\n' proto server "MB/s (median)" "CPU-s/GB (med)" "all runs MB/s | CPU-s/GB"
  for p in $protos; do
    for s in sluice nginx; do
      printf '%-7s %-7s %14s %16s   %s| %s\n' "$p" "$s" "$(echo "${speeds[$s:$p]}" | median)" \
        "$(echo "${cpus[$s:$p]}" | median)" "${speeds[$s:$p]}" "${cpus[$s:$p]}"
    done
  done
} | tee -a "$out/files.txt"

# Memory with many concurrent slow downloads of one file (-n 0 skips it).
[ "$clients" -gt 0 ] || exit 0
rss() { # rss SERVER PROTO: peak VmRSS RssAnon RssFile (KiB) over $rss_s seconds
  local s=$1 p=$2 pid i peak=0 anon=0 file=0 v a f before
  pid=$sluice_pid; [ "$s" = nginx ] && pid=$nginx_pid
  before=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
  local cpids=()
  for i in $(seq "$clients"); do
    # shellcheck disable=SC2046
    taskset -c "$client_cpus" curl -s $(curl_flags "$p") --limit-rate "$rate" -o /dev/null "$(url "$s" "$p" rss.bin)" &
    cpids+=("$!")
  done
  for i in $(seq $((rss_s * 2))); do
    sleep 0.5
    read -r v a f < <(awk '/^VmRSS/ {v=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2} END {print v, a, f}' "/proc/$pid/status")
    [ "$v" -gt "$peak" ] && peak=$v; [ "$a" -gt "$anon" ] && anon=$a; [ "$f" -gt "$file" ] && file=$f
  done
  # Connections still open, and what they delivered in all (bytes acknowledged).
  local conns sent
  read -r conns sent < <(ss -Htni state established \
    "( sport = :$S_HTTP or sport = :$S_HTTPS or sport = :$N_HTTP or sport = :$N_HTTPS )" |
    awk '/bytes_acked:/ { match($0, /bytes_acked:[0-9]+/); b += substr($0, RSTART + 12, RLENGTH - 12); n++ }
         END { printf "%d %.0f\n", n, b }')
  kill "${cpids[@]}" 2>/dev/null || true
  wait "${cpids[@]}" 2>/dev/null || true
  printf '%-7s %-7s %8s %10s %10s %10s %8s %10s\n' "$p" "$s" "$((before / 1024))" "$((peak / 1024))" \
    "$((anon / 1024))" "$((file / 1024))" "$conns" "$((sent / rss_s / 1000000))"
}
{
  echo
  echo "$clients clients at $rate each on one ${rss_mb} MiB file for ${rss_s} s (MiB; peak over 0.5 s samples):"
  printf '%-7s %-7s %8s %10s %10s %10s %8s %10s\n' proto server "RSS idle" "VmRSS pk" "RssAnon pk" "RssFile pk" \
    conns "MB/s total"
  for p in http https; do
    for s in sluice nginx; do rss "$s" "$p"; sleep 1; done
  done
} | tee -a "$out/files.txt"
