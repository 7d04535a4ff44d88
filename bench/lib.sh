# Shared by the bench/*.sh scenarios (sourced, not run). Builds what they need, starts
# and stops the servers under test (Sluice, the floor of bench/floor, nginx-rtmp), runs
# sluice-bench pinned to the client core, and kills everything it started on exit.
#
# Knobs (environment): NO_BUILD=1 skips cargo build; SLUICE=PATH runs another sluice binary; BENCH_PORT_BASE (default 29300)
# moves every listener (a stale server on the same port would silently share it:
# Sluice binds with SO_REUSEPORT); SERVER_CPUS (0) and CLIENT_CPUS (1) are taskset lists;
# BENCH_MAX_S bounds the whole script (the scenario sets a default).
# Only 127.0.0.1 is ever used.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sluice=${SLUICE:-$root/target/release/sluice}
bench=$root/target/release/sluice-bench
nginx_bin=${NGINX:-/usr/sbin/nginx}
base=${BENCH_PORT_BASE:-29300}
S_RTMP=$((base + 1)) S_HTTP=$((base + 2)) F_HTTP=$((base + 3)) N_RTMP=$((base + 4)) N_HTTP=$((base + 5))
S_RTSP=$((base + 6)) S_HTTPS=$((base + 7)) N_HTTPS=$((base + 8)) S_RTMPS=$((base + 9)) S_SRT=$((base + 10))
F_SRT=$((base + 11))
server_cpus=${SERVER_CPUS:-0} client_cpus=${CLIENT_CPUS:-1}
pids=()

# kill_hard PID...: TERM, then KILL whatever is still there after 3 s (a server that
# hangs in its shutdown must not hang the script), then reap.
kill_hard() {
  local p i any
  alive() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
  for p in "$@"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  for i in $(seq 30); do
    any=0
    for p in "$@"; do alive "$p" && any=1; done
    [ "$any" = 1 ] || break
    sleep 0.1
  done
  for p in "$@"; do
    if alive "$p"; then
      echo "$0: pid $p ignored SIGTERM for 3 s; SIGKILL" >&2
      kill -9 "$p" 2>/dev/null || true
    fi
  done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

cleanup() {
  [ ${#pids[@]} = 0 ] || kill_hard "${pids[@]}"
}
trap cleanup EXIT
trap 'echo "$0: interrupted or over its time bound, stopping" >&2; exit 124' INT TERM

# bound_run SECONDS: the whole script ends (and cleans up) after SECONDS.
bound_run() {
  local me=$$
  (sleep "$1"; kill -TERM "$me") 2>/dev/null &
  pids+=("$!")
  disown "$!"
}

# setup OUTDIR: build, compile bench/floor/floor.c and srtfloor.c, make the test clip. Sets $out and $clip.
setup() {
  mkdir -p "$1"
  out=$(cd "$1" && pwd)
  [ "${NO_BUILD:-0}" = 1 ] || (cd "$root" && cargo build --release -q -p sluice-server -p sluice-bench)
  [ -x "$out/floor" ] && [ "$out/floor" -nt "$root/bench/floor/floor.c" ] ||
    gcc -O2 -Wall -Wextra -o "$out/floor" "$root/bench/floor/floor.c" -lpthread
  [ -x "$out/srtfloor" ] && [ "$out/srtfloor" -nt "$root/bench/floor/srtfloor.c" ] ||
    gcc -O2 -Wall -Wextra -o "$out/srtfloor" "$root/bench/floor/srtfloor.c"
  bash "$root/scripts/make-test-media.sh" "$out/media" 20 >/dev/null
  clip=$out/media/h264_aac_720p.flv
}

have_nginx() { [ -x "$nginx_bin" ] && [ -e /usr/lib/nginx/modules/ngx_rtmp_module.so ]; }

port_free() {
  if [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]; then
    echo "$0: port $1 is in use on 127.0.0.1 (a stale server?); set BENCH_PORT_BASE" >&2
    exit 3
  fi
}

wait_port() { # wait_port PORT: until something listens (5 s at most)
  local i
  for i in $(seq 50); do
    [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  echo "$0: nothing listens on port $1" >&2
  exit 3
}

# start_sluice [FLAGS...]: Sluice on $server_cpus; sets $srv. Default flags: --workers 1.
# RTSP listens on $S_RTSP; its RTP/RTCP UDP ports are the kernel's choice (--rtp-ports 0),
# so that no fixed range can clash with another server on the machine.
start_sluice() {
  port_free "$S_RTMP"; port_free "$S_HTTP"; port_free "$S_RTSP"
  taskset -c "$server_cpus" "$sluice" --rtmp "127.0.0.1:$S_RTMP" --http "127.0.0.1:$S_HTTP" \
    --rtsp "127.0.0.1:$S_RTSP" --rtp-ports 0 --webrtc-udp 127.0.0.1:0 --srt "127.0.0.1:$S_SRT" --log warn --max-connections 0 \
    --max-connections-per-ip 0 --max-publishers-per-ip 0 --max-streams 0 \
    "$@" >"$out/sluice.log" 2>&1 &
  srv=$!; pids+=("$srv")
  wait_port "$S_RTMP"; wait_port "$S_HTTP"; wait_port "$S_RTSP"
}

# start_floor MERGE_MS [FLAGS...]: the floor (HTTP-FLV only, writes every MERGE_MS) on
# $server_cpus; sets $srv.
start_floor() {
  local tick=$1; shift
  port_free "$F_HTTP"
  taskset -c "$server_cpus" "$out/floor" -f "$clip" -a 127.0.0.1 -p "$F_HTTP" -i "$tick" -s 0 "$@" >/dev/null 2>&1 &
  srv=$!; pids+=("$srv")
  wait_port "$F_HTTP"
}

# start_srtfloor MERGE_MS [FLAGS...]: the SRT floor (bench/floor/srtfloor.c; SRT players
# only, sends every MERGE_MS) on $server_cpus, playing $clip remuxed to MPEG-TS (made
# once, beside the clip); its figures go to $out/srtfloor.log. Sets $srv.
start_srtfloor() {
  local tick=$1 ts=${clip%.*}.ts; shift
  [ -s "$ts" ] && [ "$ts" -nt "$clip" ] || ffmpeg -hide_banner -loglevel error -y -i "$clip" -c copy -f mpegts "$ts"
  [ -z "$(ss -Hauln "sport = :$F_SRT" 2>/dev/null)" ] || { echo "$0: UDP port $F_SRT is in use; set BENCH_PORT_BASE" >&2; exit 3; }
  taskset -c "$server_cpus" "$out/srtfloor" -f "$ts" -a 127.0.0.1 -p "$F_SRT" -i "$tick" -s 0 "$@" \
    >"$out/srtfloor.log" 2>&1 &
  srv=$!; pids+=("$srv")
  sleep 0.5
}

# tls_cert: a self-signed ECDSA P-256 certificate for 127.0.0.1 and localhost (the key
# type of Sluice's --tls-self-signed) in $out/tls-cert.pem and $out/tls-key.pem, for
# nginx's HTTPS. Fails when openssl is missing.
tls_cert() {
  [ -s "$out/tls-cert.pem" ] && [ -s "$out/tls-key.pem" ] && return 0
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$out/tls-key.pem" -out "$out/tls-cert.pem" 2>/dev/null
}

# start_nginx: nginx with the RTMP module, one process (no master), on $server_cpus;
# RTMP live application "live", HLS written to $out/nginx/hls and served over HTTP
# with sendfile and open_file_cache at http://127.0.0.1:$N_HTTP/hls/ (for the HLS comparison), and, when
# openssl can make a certificate (tls_cert), over HTTPS (HTTP/1.1, TLS 1.2/1.3) at
# https://127.0.0.1:$N_HTTPS/hls/. Sets $srv.
start_nginx() {
  local d=$out/nginx ssl=""
  port_free "$N_RTMP"; port_free "$N_HTTP"
  if tls_cert; then
    port_free "$N_HTTPS"
    ssl="server { listen 127.0.0.1:$N_HTTPS ssl; ssl_certificate $out/tls-cert.pem; ssl_certificate_key $out/tls-key.pem;
    ssl_protocols TLSv1.2 TLSv1.3; sendfile on; tcp_nopush on; location /hls/ { alias $d/hls/; } }"
  fi
  rm -rf "$d"; mkdir -p "$d/logs" "$d/hls" "$d/tmp"
  cat >"$d/nginx.conf" <<EOF
load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 20000;
error_log $d/logs/error.log warn;
pid $d/logs/nginx.pid;
events { worker_connections 19000; }
rtmp {
  server {
    listen 127.0.0.1:$N_RTMP;
    application live { live on; hls on; hls_path $d/hls; hls_fragment 2s; hls_playlist_length 10s; }
  }
}
http {
  access_log off;
  client_body_temp_path $d/tmp; proxy_temp_path $d/tmp; fastcgi_temp_path $d/tmp;
  uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
  # open_file_cache: nginx keeps the segments' descriptors open between requests
  # (no open/fstat/close per request), as an operator tuned for HLS would.
  open_file_cache max=1000 inactive=20s; open_file_cache_valid 1s; open_file_cache_errors on;
  server { listen 127.0.0.1:$N_HTTP; sendfile on; tcp_nopush on; location /hls/ { alias $d/hls/; } }
  $ssl
}
EOF
  taskset -c "$server_cpus" "$nginx_bin" -p "$d" -c "$d/nginx.conf" >"$d/logs/stdout.log" 2>&1 &
  srv=$!; pids+=("$srv")
  wait_port "$N_RTMP"
  [ -z "$ssl" ] || wait_port "$N_HTTPS"
}

# publish URL SECONDS [FLAGS...]: sluice-bench publishers on $client_cpus, in the
# background; sets $pub. The clip is $clip unless FLAGS give --clip.
publish() {
  local url=$1 secs=$2; shift 2
  local args=("$@")
  [[ " ${args[*]} " == *" --clip "* ]] || args+=(--clip "$clip")
  taskset -c "$client_cpus" "$bench" publish --url "$url" --duration "${secs}s" --quiet "${args[@]}" \
    >/dev/null 2>&1 &
  pub=$!; pids+=("$pub")
}

# play PROTO URL N SERVER_PID JSON [FLAGS...]: players on $client_cpus, in the
# foreground (interruptible); the client's own CPU (user sys wall) goes to JSON.client.
play() {
  local proto=$1 url=$2 n=$3 spid=$4 json=$5; shift 5
  local tm=()
  [ -x /usr/bin/time ] && tm=(/usr/bin/time -o "$json.client" -f "%U %S %e")
  "${tm[@]}" taskset -c "$client_cpus" "$bench" play --protocol "$proto" --url "$url" -n "$n" \
    --server-pid "$spid" --quiet --json "$json" "$@" >/dev/null &
  local p=$!
  pids+=("$p")
  head -1 /proc/stat >"$json.stat0"
  wait "$p"
  head -1 /proc/stat >"$json.stat1"
}

# stop PID...: kill and reap.
stop() { kill_hard "$@"; }

# url PROTO SERVER: the play URL of stream live/x. PROTO-tls is PROTO over HTTPS
# (Sluice: its --tls-self-signed listener; play it with --insecure, see play_flags).
# PLAY_QUERY, when set, is appended to Sluice's URLs (credentials: user=...&pass=...).
url() {
  local u
  u=$(url_of "$@")
  # An srt:// URL's query is libsrt's options, not the server's.
  if [ "$2" = sluice ] && [ -n "${PLAY_QUERY:-}" ] && [ -n "$u" ] && [ "$1" != srt ]; then u="$u?$PLAY_QUERY"; fi
  echo "$u"
}

url_of() {
  case $2:$1 in
    sluice:rtmp) echo "rtmp://127.0.0.1:$S_RTMP/live/x" ;;
    sluice:ws-flv) echo "ws://127.0.0.1:$S_HTTP/live/x.flv" ;;
    sluice:flv) echo "http://127.0.0.1:$S_HTTP/live/x.flv" ;;
    sluice:fmp4) echo "http://127.0.0.1:$S_HTTP/live/x.mp4" ;;           # a fragment per frame
    sluice:ws-fmp4) echo "ws://127.0.0.1:$S_HTTP/live/x.mp4" ;;
    floor:flv) echo "http://127.0.0.1:$F_HTTP/live/x.flv" ;;
    srtfloor*:srt) echo "srt://127.0.0.1:$F_SRT?streamid=read:live/x" ;;  # any stream id
    nginx:rtmp) echo "rtmp://127.0.0.1:$N_RTMP/live/x" ;;
    sluice:hls) echo "http://127.0.0.1:$S_HTTP/live/x.m3u8" ;;           # MPEG-TS segments
    sluice:ll-hls) echo "http://127.0.0.1:$S_HTTP/live/x/index.m3u8" ;;  # fMP4, Low-Latency
    nginx:hls) echo "http://127.0.0.1:$N_HTTP/hls/x.m3u8" ;;            # TS files, sendfile
    sluice:rtsp | sluice:rtsp-udp) echo "rtsp://127.0.0.1:$S_RTSP/live/x" ;; # RTP on TCP | UDP
    sluice:whep) echo "http://127.0.0.1:$S_HTTP/live/x/whep" ;;          # WebRTC, UDP port from the kernel
    sluice:srt) echo "srt://127.0.0.1:$S_SRT?streamid=read:live/x" ;;    # MPEG-TS over SRT
    sluice:flv-tls) echo "https://127.0.0.1:$S_HTTPS/live/x.flv" ;;
    sluice:ws-flv-tls) echo "wss://127.0.0.1:$S_HTTPS/live/x.flv" ;;
    sluice:hls-tls) echo "https://127.0.0.1:$S_HTTPS/live/x.m3u8" ;;
    sluice:ll-hls-tls) echo "https://127.0.0.1:$S_HTTPS/live/x/index.m3u8" ;;
    nginx:hls-tls) echo "https://127.0.0.1:$N_HTTPS/hls/x.m3u8" ;;      # TS files, read + SSL_write
    *) echo "" ;;
  esac
}

# play_proto PROTO: sluice-bench's --protocol for PROTO (PROTO-tls plays PROTO).
play_proto() { echo "${1%-tls}"; }

# play_flags PROTO: sluice-bench flags PROTO needs (over TLS: any certificate, as the
# servers' certificates are self-signed).
play_flags() { case $1 in *-tls) echo "--insecure" ;; esac; }

# ingest_url SERVER [PROTO]: where a publisher of PROTO (rtmp, the default; rtsp,
# rtsp-udp or srt, Sluice only) sends live/x; empty when SERVER does not take PROTO.
ingest_url() {
  case $1:${2:-rtmp} in
    sluice:rtmp) echo "rtmp://127.0.0.1:$S_RTMP/live/x" ;;
    sluice:rtmps) echo "rtmps://127.0.0.1:$S_RTMPS/live/x" ;;
    nginx:rtmp) echo "rtmp://127.0.0.1:$N_RTMP/live/x" ;;
    sluice:rtsp | sluice:rtsp-udp) echo "rtsp://127.0.0.1:$S_RTSP/live/x" ;;
    sluice:srt) echo "srt://127.0.0.1:$S_SRT?streamid=publish:live/x" ;;
    *) echo "" ;;
  esac
}

# start_server NAME MERGE_MS [SLUICE_FLAGS...]: sluice (1 worker; HTTPS with a
# self-signed certificate on $S_HTTPS) | floor | srtfloor[-LETTERS] (the SRT floor, its
# flags by letter: srtfloor-CA runs it with -C -A) | nginx, and for sluice and nginx a
# realtime publisher of $clip for PUB_S seconds (default 120). Sets $srv, $pub.
start_server() {
  pub=""
  case $1 in
    sluice)
      port_free "$S_HTTPS"
      start_sluice --workers 1 --merge-ms "$2" --https "127.0.0.1:$S_HTTPS" --tls-self-signed "${@:3}"
      wait_port "$S_HTTPS" ;;
    floor) start_floor "$2" ;;
    srtfloor) start_srtfloor "$2" ;;
    # shellcheck disable=SC2046 # one flag per letter
    srtfloor-*) start_srtfloor "$2" $(echo "${1#srtfloor-}" | sed 's/./-& /g') ;;
    nginx) start_nginx ;;
  esac
  if [ "$1" != floor ] && [[ $1 != srtfloor* ]]; then
    publish "$(ingest_url "$1")" "${PUB_S:-120}"
    sleep 2
  fi
}

stop_server() { stop "$srv" ${pub:+"$pub"}; }

# small_clip: $out/media/h264_aac_360p_600k.flv, the 600 kbit/s clip publishers send
# (made once); prints its path.
small_clip() {
  local small=$out/media/h264_aac_360p_600k.flv
  [ -s "$small" ] || ffmpeg -hide_banner -loglevel error -y \
    -f lavfi -i testsrc2=size=640x360:rate=25 -f lavfi -i sine=frequency=440:sample_rate=48000 -t 20 \
    -c:v libx264 -preset veryfast -bf 0 -g 50 -keyint_min 50 -sc_threshold 0 -b:v 500k -maxrate 500k -bufsize 1M \
    -pix_fmt yuv420p -c:a aac -b:a 64k -ac 2 "$small"
  echo "$small"
}

# whip_media: $out/media/whip.h264 and whip.ogg, what bench/whipload publishers send
# (made once): the video of small_clip's parameters as H.264 Annex B in the
# constrained baseline profile browsers take (no B-frames, 2 s GOP, SPS and PPS before
# every keyframe), and 64 kbit/s stereo Opus at 48 kHz, one 20 ms packet per Ogg page.
whip_media() {
  local m=$out/media
  [ -s "$m/whip.h264" ] || ffmpeg -hide_banner -loglevel error -y \
    -f lavfi -i testsrc2=size=640x360:rate=25 -t 20 \
    -c:v libx264 -preset veryfast -profile:v baseline -bf 0 -g 50 -keyint_min 50 -sc_threshold 0 \
    -b:v 500k -maxrate 500k -bufsize 1M -pix_fmt yuv420p -x264-params repeat-headers=1 -f h264 "$m/whip.h264"
  [ -s "$m/whip.ogg" ] || ffmpeg -hide_banner -loglevel error -y \
    -f lavfi -i sine=frequency=440:sample_rate=48000 -t 20 \
    -c:a libopus -b:a 64k -ac 2 -frame_duration 20 -page_duration 20000 -f ogg "$m/whip.ogg"
}
