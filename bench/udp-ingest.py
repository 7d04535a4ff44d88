#!/usr/bin/env python3
"""UDP TS ingest on one worker: N `[[ingest]]` inputs (plain TS over UDP on 127.0.0.1),
each sent R Mbit/s of a constant-rate TS (ffmpeg's, muxrate R) in 1316-byte datagrams,
paced, for D seconds. Reports the server's CPU (utime + stime over the measured window,
as a share of one core), the datagrams sent, those the ingests counted, the kernel's UDP
receive-buffer drops on the host (/proc/net/snmp) and the continuity errors the inputs
saw (the TS loops once per file length: each loop is one error on each of the four PIDs
read, PAT, PMT, video and audio, per input, not loss). --rtp sends RTP/MP2T instead.

    python3 bench/udp-ingest.py [-n 200] [-r 4] [-d 20] [--rtp] [--sluice target/release/sluice]

Only 127.0.0.1 is used. The sender is this one Python process (it reports the rate it
reached: on a loaded machine it may fall short of N x R).
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATAGRAM = 1316


def snmp_rcvbuf_errors():
    lines = [l.split() for l in open("/proc/net/snmp") if l.startswith("Udp:")]
    head, values = lines[0], lines[1]
    return int(values[head.index("RcvbufErrors")])


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get(http, path):
    with urllib.request.urlopen(f"http://{http}{path}", timeout=10) as r:
        return r.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200, help="inputs")
    ap.add_argument("-r", type=float, default=4.0, help="Mbit/s per input")
    ap.add_argument("-d", type=float, default=20.0, help="seconds measured")
    ap.add_argument("--rtp", action="store_true", help="RTP/MP2T instead of plain TS")
    ap.add_argument("--sluice", default=os.path.join(ROOT, "target/release/sluice"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="udp-ingest-")
    ts_path = os.path.join(tmp, "cbr.ts")
    bps = int(a.r * 1e6)
    subprocess.run(
        ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y",
         "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25",
         "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "10",
         "-c:v", "libx264", "-preset", "ultrafast", "-g", "50", "-bf", "0",
         "-b:v", str(int(bps * 0.85)), "-maxrate", str(int(bps * 0.85)),
         "-bufsize", str(bps), "-c:a", "aac", "-b:a", "96k",
         "-f", "mpegts", "-muxrate", str(bps), ts_path], check=True, stdin=subprocess.DEVNULL)
    ts = open(ts_path, "rb").read()
    chunks = [ts[i:i + DATAGRAM] for i in range(0, len(ts) - DATAGRAM + 1, DATAGRAM)]
    config = os.path.join(tmp, "sluice.toml")
    with open(config, "w") as f:
        f.write("[limits]\nmax_publishers_per_ip = 0\nmax_streams = 0\n")
        for i in range(a.n):
            scheme = "rtp" if a.rtp else "udp"
            f.write(f'\n[[ingest]]\nstream = "bench/in{i}"\nurl = "{scheme}://127.0.0.1:0"\n')
    server = subprocess.Popen(
        [a.sluice, "--config", config, "--workers", "1", "--log", "warn",
         "--rtmp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--rtsp", "off",
         "--srt", "off", "--webrtc-udp", "off", "--hls", "false"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        line = server.stdout.readline().decode()
        http = next(w.split("=", 1)[1] for w in line.split() if w.startswith("http="))
        ingests = json.loads(get(http, "/api/v1/ingests"))["ingests"]
        ports = [("127.0.0.1", int(i["bound"].rsplit(":", 1)[1])) for i in ingests]
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        per_input = bps / 8 / DATAGRAM
        tick = 0.005
        warmup = 3.0
        start = time.monotonic()
        sent = 0
        next_chunk = 0
        measured = None
        while True:
            now = time.monotonic()
            elapsed = now - start
            if measured is None and elapsed >= warmup:
                measured = (now, cpu_seconds(server.pid), snmp_rcvbuf_errors(), sent)
            if elapsed >= warmup + a.d:
                break
            due = int(elapsed * per_input)
            while next_chunk < due:
                c = chunks[next_chunk % len(chunks)]
                if a.rtp:
                    seq = next_chunk & 0xFFFF
                    c = struct.pack(">BBHII", 0x80, 33, seq, next_chunk * 3000 & 0xFFFFFFFF, 7) + c
                for p in ports:
                    try:
                        sock.sendto(c, p)
                        sent += 1
                    except BlockingIOError:
                        pass
                next_chunk += 1
            time.sleep(max(0.0, tick - (time.monotonic() - now)))
        end = (time.monotonic(), cpu_seconds(server.pid), snmp_rcvbuf_errors(), sent)
        time.sleep(0.5)
        after = json.loads(get(http, "/api/v1/ingests"))["ingests"]
        received = sum(i["datagrams"] for i in after)
        cc = sum(i["cc_errors"] for i in after)
        live = sum(1 for i in after if i["live"])
        wall = end[0] - measured[0]
        loops = next_chunk // len(chunks)
        report = {
            "inputs": a.n,
            "mbps_per_input": a.r,
            "seconds": round(wall, 1),
            "sent_mbps_total": round((end[3] - measured[3]) * DATAGRAM * 8 / wall / 1e6, 1),
            "server_cpu_share_of_one_core": round((end[1] - measured[1]) / wall, 3),
            "datagrams_sent": sent,
            "datagrams_counted_by_ingests": received,
            "datagrams_missing": sent - received,
            "kernel_rcvbuf_errors_in_window": end[2] - measured[2],
            "cc_errors": cc,
            "cc_errors_from_file_loops": loops * a.n * 4,
            "rtp_lost": sum(i["rtp_lost"] for i in after),
            "inputs_live": live,
        }
        print(json.dumps(report, indent=2))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
