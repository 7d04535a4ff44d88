#!/usr/bin/env bash
# The cluster's directory under a cluster's load: a fresh redis-server (Debian's) on a
# free port of 127.0.0.1, then `directory-load` (crates/server/tools) with N nodes
# refreshing S streams and L lookups a second, through the server's own store and
# scripts. Prints its JSON report (operations per second, latencies, Redis's own CPU).
#
#   bash bench/directory.sh [-n NODES] [-s STREAMS] [-l LOOKUPS_PER_S] [-d SECONDS]
#
# NO_BUILD=1 skips the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=20 streams=10000 lookups=1000 seconds=20
while getopts n:s:l:d: o; do
  case $o in
    n) nodes=$OPTARG ;; s) streams=$OPTARG ;; l) lookups=$OPTARG ;; d) seconds=$OPTARG ;;
    *) echo "usage: $0 [-n NODES] [-s STREAMS] [-l LOOKUPS_PER_S] [-d SECONDS]" >&2; exit 2 ;;
  esac
done
command -v redis-server >/dev/null || { echo "redis-server is needed (apt-get install redis-server)" >&2; exit 1; }
[ "${NO_BUILD:-}" = 1 ] || cargo build --release -q -p sluice-server --bin directory-load
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" >/dev/null &
redis=$!
trap 'kill $redis 2>/dev/null; wait $redis 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
echo "redis-server $(redis-server --version | grep -o 'v=[0-9.]*'), $nodes nodes, $streams streams, $lookups lookups/s, ${seconds}s" >&2
target/release/directory-load --redis "redis://127.0.0.1:$port/0" --nodes "$nodes" \
  --streams "$streams" --lookups "$lookups" --seconds "$seconds"
