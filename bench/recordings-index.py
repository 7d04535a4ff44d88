#!/usr/bin/env python3
"""The recordings index at NVR scale (issue 30): DAYS x 24 hourly files x STREAMS streams.

Makes the tree in a temporary directory (each stream's files are hard links of one small
valid fMP4 of one hour, so 720,000 files take a few tens of MB: directory entries, not
data; the loader reads each as if it were its own file, with its time from its name),
then starts Sluice on it three times:

1. no index (`.sluice-index` removed): the loader rebuilds every stream from its files;
2. indexes present: the loader checks every file's size and mtime against its record;
3. with the index loaded: GET /api/v1/recordings/APP/NAME?from=&to= for random streams
   and random ranges (1 h to 3 days) over one keep-alive connection, and
   GET /api/v1/recordings (every stream's summary).

Load times are the loader's own (`recordings index loaded ... ms=`) and the wall time
from the server's start until the API no longer says `indexing`. Latencies are measured
by this client (Python's http.client), request sent to body read. The page cache is
warm (the tree was just made): a cold disk adds its seeks to the rebuild.

  python3 bench/recordings-index.py [--streams 1000] [--days 30] [--requests 5000]
      [--fragments 1] [--sluice target/release/sluice] [--keep DIR]

--fragments 3600 --mdat 125000 makes each hour 1 s fragments of 1 Mbit/s (what the
recorder writes; the media bytes are holes of a sparse file): a rebuild then reads 3600
`moof` boxes per file, each in its own read.

Prints a Markdown table. Deletes the tree unless --keep.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import struct
import subprocess
import tempfile
import time

HOUR_MS = 3_600_000
T0_MS = 1_790_812_800_000  # 2026-10-01T00:00:00Z


def box(kind, body):
    return struct.pack(">I4s", 8 + len(body), kind) + body


def full(kind, version, flags, body):
    return box(kind, struct.pack(">I", (version << 24) | flags) + body)


def hour_fmp4(fragments, mdat):
    """ftyp, moov (one 90 kHz video track), then an hour in `fragments` fragments (moof,
    then an mdat of `mdat` bytes): one sample each. Returned as (offset, bytes) pieces:
    the mdat contents are left out, so the file is written sparse."""
    tkhd = full(b"tkhd", 0, 3, struct.pack(">III", 0, 0, 1) + bytes(68))
    mdhd = full(b"mdhd", 0, 0, struct.pack(">IIII", 0, 0, 90_000, 0) + bytes(4))
    trak = box(b"trak", tkhd + box(b"mdia", mdhd))
    trex = full(b"trex", 0, 0, struct.pack(">IIIII", 1, 1, 0, 0, 0))
    moov = box(b"moov", trak + box(b"mvex", trex))
    ftyp = box(b"ftyp", b"isom\0\0\0\0isomiso6")
    pieces = [(0, ftyp + moov)]
    at = len(ftyp + moov)
    ticks = 3600 * 90_000 // fragments
    for n in range(fragments):
        tfhd = full(b"tfhd", 0, 0x020000, struct.pack(">I", 1))
        tfdt = full(b"tfdt", 1, 0, struct.pack(">Q", n * ticks))
        trun = full(b"trun", 0, 0x301, struct.pack(">IiII", 1, 0, ticks, mdat))
        traf = box(b"traf", tfhd + tfdt + trun)
        moof = box(b"moof", full(b"mfhd", 0, 0, struct.pack(">I", n + 1)) + traf)
        head = moof + struct.pack(">I4s", 8 + mdat, b"mdat")
        pieces.append((at, head))
        at += len(head) + mdat
    pieces.append((at, b""))
    return pieces


def name_time(ms):
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(ms // 1000))


def make_tree(root, streams, days, fragments, mdat):
    pieces = hour_fmp4(fragments, mdat)
    started = time.monotonic()
    for s in range(streams):
        name = f"cam{s:04d}"
        d = os.path.join(root, "recordings", "cams", name)
        os.makedirs(d)
        template = os.path.join(d, ".template.mp4")
        with open(template, "wb") as f:
            for at, data in pieces:
                f.seek(at)
                f.write(data)
            f.truncate(pieces[-1][0])
        for h in range(days * 24):
            os.link(template, os.path.join(d, f"{name}-{name_time(T0_MS + h * HOUR_MS)}.mp4"))
    return time.monotonic() - started


def remove_indexes(root):
    for dirpath, _, files in os.walk(os.path.join(root, "recordings")):
        if ".sluice-index" in files:
            os.remove(os.path.join(dirpath, ".sluice-index"))


class Server:
    def __init__(self, sluice, root, log_path):
        self.log = open(log_path, "w")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sluice, "--media-root", root, "--record", "cams/*", "--log", "info",
             "--rtmp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--rtsp", "127.0.0.1:0",
             "--srt", "127.0.0.1:0", "--webrtc-udp", "off", "--workers", "1"],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"http=([0-9.]+):(\d+)", line)
        if not m:
            raise SystemExit(f"no http address in {line!r}")
        self.host, self.port = m.group(1), int(m.group(2))
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def get(self, path):
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        body = r.read()
        return r.status, body

    def wait_loaded(self):
        while True:
            status, body = self.get("/api/v1/recordings")
            if status == 200 and not json.loads(body)["indexing"]:
                return time.monotonic() - self.started
            time.sleep(0.05)

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        self.conn.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def loader_ms(log_path):
    with open(log_path) as f:
        for line in f:
            if "recordings index loaded" in line:
                m = re.search(r"\bms=(\d+)", line)
                files = re.search(r"\bfiles=(\d+)", line)
                again = re.search(r"\bread_again=(\d+)", line)
                return int(m.group(1)), int(files.group(1)), int(again.group(1))
    raise SystemExit(f"no 'recordings index loaded' line in {log_path}")


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--fragments", type=int, default=1, help="fragments per hourly file")
    ap.add_argument("--mdat", type=int, default=16, help="bytes of media per fragment (sparse)")
    ap.add_argument("--sluice", default="target/release/sluice")
    ap.add_argument("--keep")
    args = ap.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="sluice-nvr-bench-")
    rows = []
    try:
        made = make_tree(root, args.streams, args.days, args.fragments, args.mdat)
        files = args.streams * args.days * 24
        du = subprocess.run(["du", "-sh", root], capture_output=True, text=True).stdout.split()[0]
        print(f"tree: {files} files of {args.fragments} fragments of {args.mdat} B in {args.streams} streams, "
              f"{du} on disk, made in {made:.1f} s")
        log = os.path.join(root, "server.log")
        for label in ("rebuild (no index)", "load (indexes present)"):
            if label.startswith("rebuild"):
                remove_indexes(root)
            s = Server(args.sluice, root, log)
            wall = s.wait_loaded()
            ms, seen, again = loader_ms(log)
            rows.append((label, f"{ms} ms", f"{wall:.2f} s", f"{seen} files, {again} read", f"{s.rss_mib():.0f} MiB"))
            if label.startswith("load"):
                rng = random.Random(30)
                span = args.days * 24 * HOUR_MS
                lat = []
                listed = 0
                for _ in range(args.requests):
                    cam = f"cam{rng.randrange(args.streams):04d}"
                    length = rng.randrange(HOUR_MS, 3 * 24 * HOUR_MS)
                    start = T0_MS + rng.randrange(-HOUR_MS, span)
                    t = time.perf_counter()
                    status, body = s.get(f"/api/v1/recordings/cams/{cam}?from={start}&to={start + length}")
                    lat.append((time.perf_counter() - t) * 1000)
                    assert status == 200, body[:200]
                    listed += len(json.loads(body)["files"])
                all_lat = []
                for _ in range(50):
                    t = time.perf_counter()
                    status, body = s.get("/api/v1/recordings")
                    all_lat.append((time.perf_counter() - t) * 1000)
                    assert status == 200
                assert len(json.loads(body)["recordings"]) == args.streams
            s.stop()
        print()
        print("| run | loader | start to indexed (API) | files | RSS after |")
        print("|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        print()
        print(f"GET /api/v1/recordings/cams/NAME?from=&to= (random stream, random range 1 h..3 d), "
              f"{args.requests} requests, {listed / args.requests:.1f} files each on average: "
              f"p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms, max {max(lat):.2f} ms")
        print(f"GET /api/v1/recordings ({args.streams} streams), 50 requests: "
              f"p50 {pct(all_lat, 50):.2f} ms, p99 {pct(all_lat, 99):.2f} ms")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
