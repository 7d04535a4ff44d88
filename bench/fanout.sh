#!/usr/bin/env bash
# Scenario (a), fan-out cost: server CPU-seconds per GB delivered to N players of the
# 2 Mbit/s 720p clip, Sluice beside ../shared/limit at the same merge window, in one
# run. The server is pinned to core 0; players (and Sluice's publisher) to core 1.
#
# Usage: bench/fanout.sh [-n PLAYERS] [-d SECONDS] [-m MERGE_MS] [-p "flv rtmp ws-flv"] [-o OUTDIR]
# Writes OUTDIR/fanout.md and one JSON per run (sluice-bench's report).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=500 dur=25 merge=200 protos="flv rtmp" out="$root/target/bench"
while getopts n:d:m:p:o: opt; do
  case $opt in
    n) n=$OPTARG ;; d) dur=$OPTARG ;; m) merge=$OPTARG ;; p) protos=$OPTARG ;; o) out=$OPTARG ;;
    *) echo "usage: $0 [-n players] [-d seconds] [-m merge_ms] [-p protocols] [-o outdir]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
[ "${NO_BUILD:-0}" = 1 ] || (cd "$root" && cargo build --release -q -p sluice-server -p sluice-bench)
sluice=$root/target/release/sluice bench=$root/target/release/sluice-bench
gcc -O2 -Wall -o "$out/limit" "$root/../shared/limit/limit.c" -lpthread
bash "$root/../shared/media/make-test-media.sh" "$out/media" 20 >/dev/null
clip=$out/media/h264_aac_720p.flv
warmup=5
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

play() { # play PROTO URL PID JSON
  taskset -c 1 "$bench" play --protocol "$1" --url "$2" -n "$n" --ramp 500/s \
    --duration "${dur}s" --warmup "${warmup}s" --server-pid "$3" --quiet --json "$4" >/dev/null
}

# The floor: limit.c serves HTTP-FLV only.
taskset -c 0 "$out/limit" -f "$clip" -p 18088 -i "$merge" -s 0 >/dev/null 2>&1 &
lp=$!; pids+=("$lp"); sleep 1
play flv http://127.0.0.1:18088/live/x.flv "$lp" "$out/limit-flv.json"
kill "$lp"; wait "$lp" 2>/dev/null || true

for proto in $protos; do
  taskset -c 0 "$sluice" --workers 1 --merge-ms "$merge" --rtmp 127.0.0.1:19350 --http 127.0.0.1:18080 --log warn >/dev/null 2>&1 &
  sp=$!; pids+=("$sp"); sleep 0.5
  taskset -c 1 "$bench" publish --url rtmp://127.0.0.1:19350/live/x --clip "$clip" --realtime \
    --duration "$((dur + 15))s" --quiet >/dev/null 2>&1 &
  pp=$!; pids+=("$pp"); sleep 2
  case $proto in
    rtmp) url=rtmp://127.0.0.1:19350/live/x ;;
    ws-flv) url=ws://127.0.0.1:18080/live/x.flv ;;
    *) url=http://127.0.0.1:18080/live/x.flv ;;
  esac
  play "$proto" "$url" "$sp" "$out/sluice-$proto.json"
  kill "$sp" "$pp"; wait "$sp" "$pp" 2>/dev/null || true
done

python3 - "$out" "$n" "$merge" "$protos" <<'PY'
import json, sys, datetime, os, platform
out, n, merge, protos = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)
limit = load("limit-flv.json")
floor = limit["server"]["cpu_s_per_gb"]
rows = [("limit.c", "flv", limit)] + [("sluice", p, load(f"sluice-{p}.json")) for p in protos]
lines = [
    f"# Fan-out cost, {n} players, merge window {merge} ms",
    "",
    f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores; server pinned to core 0, players to core 1.",
    "",
    "| server | protocol | players ok | Mbit/s | CPU-s/GB | × limit | RSS/player KiB | first keyframe p50/p99 ms | stalls |",
    "|---|---|---|---|---|---|---|---|---|",
]
for name, proto, r in rows:
    s = r["server"]
    fk = r["first_keyframe_ms"]
    lines.append(
        f"| {name} | {proto} | {r['ok']}/{r['count']} | {r['mbit_s']:.0f} | {s['cpu_s_per_gb']:.3f} | "
        f"{s['cpu_s_per_gb'] / floor:.2f} | {s['rss_per_player_kib']:.1f} | {fk['p50']:.1f}/{fk['p99']:.1f} | {r['stalls']} |"
    )
text = "\n".join(lines) + "\n"
open(os.path.join(out, "fanout.md"), "w").write(text)
print(text)
PY
