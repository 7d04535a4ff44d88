#!/usr/bin/env python3
"""Makes the fuzz targets' seed corpora from real clients: ffmpeg writes small FLV and
MP4 files and publishes and plays through a capture proxy in front of a Sluice server
(RTMP and RTSP, both directions); curl sends HTTP requests through it. Each seed is
the captured bytes with the lead byte the target reads first (chunking or mode).

    python3 scripts/fuzz-seeds.py [path/to/sluice]    # default target/debug/sluice

Writes crates/*/fuzz/seeds/<target>/; the results are committed (a few KB each), so
this only runs again when the formats change. Only 127.0.0.1 is used.
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLUICE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/debug/sluice")
MAX_SEED = 48 << 10
TEST = ["-f", "lavfi", "-i", "testsrc2=size=64x48:rate=10",
        "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000"]
ENC = ["-c:v", "libx264", "-preset", "ultrafast", "-g", "5", "-bf", "0",
       "-pix_fmt", "yuv420p", "-c:a", "aac", "-ac", "1", "-b:a", "16k"]


def seed(crate, target, name, data):
    d = os.path.join(ROOT, "crates", crate, "fuzz", "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data[:MAX_SEED])


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args],
                   check=True, stdin=subprocess.DEVNULL)


class Proxy:
    """Listens on 127.0.0.1, forwards one connection at a time to `upstream`, and keeps
    what went each way."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.sessions = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            up, down = bytearray(), bytearray()
            self.sessions.append((up, down))
            for a, b, keep in ((client, server, up), (server, client, down)):
                threading.Thread(target=self.pump, args=(a, b, keep), daemon=True).start()

    @staticmethod
    def pump(a, b, keep):
        while True:
            try:
                data = a.recv(65536)
            except OSError:
                data = b""
            if not data:
                try:
                    b.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            keep.extend(data)
            try:
                b.sendall(data)
            except OSError:
                return


def flv_tags(data):
    """(type, body) of each tag of an FLV file."""
    at = 9 + 4
    while at + 11 <= len(data):
        kind = data[at]
        size = int.from_bytes(data[at + 1:at + 4], "big")
        body = data[at + 11:at + 11 + size]
        yield kind, body
        at += 11 + size + 4


def files(tmp):
    flv = os.path.join(tmp, "a.flv")
    ffmpeg(*TEST, "-t", "1", *ENC, flv)
    data = open(flv, "rb").read()
    seed("media", "flv_tag_reader", "ffmpeg-h264-aac.flv", b"\xff" + data)
    seed("media", "flv_tag_reader", "ffmpeg-h264-aac-small-chunks.flv", b"\x07" + data)
    videos = [b for k, b in flv_tags(data) if k == 9]
    audios = [b for k, b in flv_tags(data) if k == 8]
    scripts = [b for k, b in flv_tags(data) if k == 18]
    seed("media", "flv_video_body", "avc-config", videos[0])
    seed("media", "flv_video_body", "avc-keyframe", videos[1])
    seed("media", "flv_video_body", "avc-inter", videos[2])
    seed("media", "flv_audio_body", "aac-config", audios[0])
    seed("media", "flv_audio_body", "aac-frame", audios[1])
    seed("rtmp", "amf0_decode", "onmetadata", scripts[0])
    hevc = os.path.join(tmp, "h.mp4")
    ffmpeg(*TEST, "-t", "1", "-c:v", "libx265", "-x265-params", "log-level=error:bframes=0",
           "-tag:v", "hvc1", "-pix_fmt", "yuv420p", "-c:a", "aac", "-ac", "1", hevc)
    seed("media", "mp4_demux", "ffmpeg-hevc-aac.mp4", open(hevc, "rb").read())
    mp4 = os.path.join(tmp, "a.mp4")
    ffmpeg(*TEST, "-t", "1", *ENC, "-bf", "2", mp4)
    seed("media", "mp4_demux", "ffmpeg-h264-bframes-aac.mp4", open(mp4, "rb").read())
    frag = os.path.join(tmp, "f.mp4")
    ffmpeg(*TEST, "-t", "1", *ENC, "-movflags", "frag_keyframe+empty_moov", frag)
    seed("media", "mp4_demux", "ffmpeg-fragmented.mp4", open(frag, "rb").read())
    # bench/fmp4_scan: two bytes of piece-length seed, then a fragment per frame (as
    # HTTP-fMP4 sends it).
    each = os.path.join(tmp, "e.mp4")
    ffmpeg(*TEST, "-t", "1", *ENC, "-movflags", "frag_every_frame+empty_moov", each)
    seed("bench", "fmp4_scan", "ffmpeg-every-frame.mp4", b"\x00\x07" + open(each, "rb").read())
    avcc = next((b for b in videos if b[1] == 0), None)
    if avcc:
        # codec_configs: the first byte picks the parser (0: an AVC record).
        seed("media", "codec_configs", "avcc", b"\x00" + avcc[5:])
    seed("media", "codec_configs", "asc", b"\x02" + audios[0][2:])


def ts(tmp):
    """MPEG-TS as an SRT publisher sends it: H.264 with AAC and with Opus, H.265 with AAC.
    ts_demux reads two bytes first that seed the piece lengths (0: all at once)."""
    h264 = ENC[:ENC.index("-c:a")]
    for name, video, audio in [
            ("ffmpeg-h264-aac.ts", h264, ["-c:a", "aac", "-ac", "1", "-b:a", "16k"]),
            ("ffmpeg-h264-opus.ts", h264, ["-c:a", "libopus", "-ac", "1", "-b:a", "16k"]),
            ("ffmpeg-hevc-aac.ts",
             ["-c:v", "libx265", "-x265-params", "log-level=error:keyint=5", "-pix_fmt", "yuv420p"],
             ["-c:a", "aac", "-ac", "1", "-b:a", "16k"])]:
        path = os.path.join(tmp, name)
        ffmpeg(*TEST, "-t", "1", *video, *audio, "-f", "mpegts", path)
        data = open(path, "rb").read()
        seed("media", "ts_demux", name, b"\x00\x00" + data)
        if name == "ffmpeg-h264-aac.ts":
            # Its first datagrams again, cut into pieces of 1 to 400 bytes.
            seed("media", "ts_demux", "ffmpeg-h264-aac-pieces.ts", b"\x12\x34" + data[:8 * 1316])


def start_sluice(tmp):
    out = open(os.path.join(tmp, "out.txt"), "w")
    p = subprocess.Popen([SLUICE, "--rtmp", "127.0.0.1:0", "--rtsp", "127.0.0.1:0",
                          "--http", "127.0.0.1:0", "--webrtc-udp", "off", "--srt", "127.0.0.1:0", "--log", "warn"], stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    addrs = dict(w.split("=", 1) for w in line.split() if "=" in w)
    out.close()

    def addr(name):
        host, port = addrs[name].rsplit(":", 1)
        return host, int(port)
    return p, addr


def sessions(tmp):
    server, addr = start_sluice(tmp)
    try:
        rtmp = Proxy(addr("rtmp"))
        ffmpeg("-re", *TEST, "-t", "2", *ENC, "-f", "flv",
               f"rtmp://127.0.0.1:{rtmp.port}/live/cam")
        up, _ = rtmp.sessions[0]
        # server_session: odd mode byte = a handshake first; ffmpeg's own handshake is
        # in the capture, so this seed uses an even one.
        seed("rtmp", "server_session", "ffmpeg-publish", b"\x00" + bytes(up))
        seed("rtmp", "handshake", "ffmpeg-c0c1c2", bytes(up[:1 + 2 * 1536]))
        # chunk_reader: the chunks after the handshake, split after 100 bytes.
        seed("rtmp", "chunk_reader", "ffmpeg-publish-chunks", b"\x64" + bytes(up[1 + 2 * 1536:]))

        # A publisher for the players below, straight to the server.
        pub = subprocess.Popen(["ffmpeg", "-hide_banner", "-loglevel", "error", "-re",
                                *TEST, "-t", "8", *ENC, "-f", "flv",
                                f"rtmp://{addr('rtmp')[0]}:{addr('rtmp')[1]}/live/play"],
                               stdin=subprocess.DEVNULL)
        time.sleep(1.5)
        rtsp = Proxy(addr("rtsp"))
        ffmpeg("-re", *TEST, "-t", "1", *ENC, "-f", "rtsp", "-rtsp_transport", "tcp",
               f"rtsp://127.0.0.1:{rtsp.port}/live/rtsp")
        up, _ = rtsp.sessions[0]
        seed("rtsp", "message_parse", "ffmpeg-announce-record", b"\xff" + bytes(up))
        seed("rtsp", "message_parse", "ffmpeg-announce-record-small", b"\x05" + bytes(up))
        seed("rtsp", "server_session", "ffmpeg-publish", b"\x20" + bytes(up))
        subprocess.run(["ffprobe", "-v", "error", "-rtsp_transport", "tcp",
                        "-read_intervals", "%+1", "-show_packets",
                        f"rtsp://127.0.0.1:{rtsp.port}/live/play"],
                       stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=True)
        up, down = rtsp.sessions[1]
        seed("rtsp", "server_session", "ffprobe-play", b"\x21" + bytes(up))
        seed("rtsp", "client_session", "sluice-answers-play", b"\x40" + bytes(down))
        http = Proxy(addr("http"))
        for args in (["-s", "-o", os.devnull, "--max-time", "1"],
                     ["-s", "-o", os.devnull, "-r", "0-99", "-H", "If-None-Match: \"x\""],
                     ["-s", "-o", os.devnull, "--max-time", "1", "-H", "Connection: Upgrade",
                      "-H", "Upgrade: websocket", "-H", "Sec-WebSocket-Version: 13",
                      "-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]):
            path = "/live/play.flv" if "--max-time" in args else "/files/x.mp4"
            subprocess.run(["curl", *args, f"http://127.0.0.1:{http.port}{path}?user=a&pass=b"],
                           stdin=subprocess.DEVNULL)
        subprocess.run(["curl", "-s", "-o", os.devnull, "-X", "PROPFIND", "-H", "Depth: 1",
                        f"http://127.0.0.1:{http.port}/files/"], stdin=subprocess.DEVNULL)
        time.sleep(0.3)
        names = ["curl-flv", "curl-range", "curl-websocket", "curl-propfind"]
        for name, (up, _) in zip(names, http.sessions):
            seed("http", "request_head", name, bytes(up))
            seed("http", "server_session", name, b"\x07" + bytes(up))
            # files_request: the file's length (8 bytes, little-endian), then the head.
            seed("http", "files_request", name, struct.pack("<Q", 4096) + bytes(up))
        pub.wait()
    finally:
        server.terminate()
        server.wait()


def sdp(tmp):
    path = os.path.join(tmp, "a.sdp")
    # To a local port nobody reads: ffmpeg only needs somewhere to send.
    ffmpeg(*TEST[:4], "-t", "0.2", "-c:v", "libx264", "-preset", "ultrafast", "-an",
           "-f", "rtp", "-sdp_file", path, "rtp://127.0.0.1:9")
    seed("media", "sdp_parse", "ffmpeg-h264", open(path, "rb").read())


def transcode(tmp):
    """AAC as a publisher sends it: the AudioSpecificConfig, then access units."""
    for name, rate, channels in [("44k-stereo", 44100, 2), ("48k-mono", 48000, 1),
                                 ("16k-mono", 16000, 1)]:
        path = os.path.join(tmp, name + ".aac")
        ffmpeg("-f", "lavfi", "-i", f"sine=frequency=440:sample_rate={rate}", "-t", "0.3",
               "-ac", str(channels), "-c:a", "aac", "-b:a", "32k", "-f", "adts", path)
        data = open(path, "rb").read()
        out = bytearray()
        while len(data) >= 7:
            profile, index = data[2] >> 6, (data[2] >> 2) & 15
            chans = ((data[2] & 1) << 2) | (data[3] >> 6)
            header = 7 if data[1] & 1 else 9
            length = ((data[3] & 3) << 11) | (data[4] << 3) | (data[5] >> 5)
            if not out:
                asc = struct.pack(">H", ((profile + 1) << 11) | (index << 7) | (chans << 3))
                out += bytes([len(asc)]) + asc
            frame = data[header:length]
            out += struct.pack(">H", len(frame)) + frame
            data = data[length:]
        seed("transcode", "aac_to_opus", name, bytes(out))


def hls():
    for name, query in [("msn-part", b"_HLS_msn=12&_HLS_part=3"),
                        ("msn", b"_HLS_msn=4"), ("skip", b"_HLS_msn=9&_HLS_skip=YES")]:
        seed("hls", "blocking_request", name, query)


def ranges():
    """Playback URLs' stream keys with time ranges (archive/ranges)."""
    for name, key in [("absolute", "live/cam@2026-11-27T10:00:00Z..2026-11-27T10:15:00Z"),
                      ("relative", "live/cam@-1h30m..-30m"),
                      ("open-offset", "live/cam@2026-11-27T11:00:00.5+01:00.."),
                      ("open-now", "..now")]:
        seed("archive", "ranges", name, key.encode())
    # RTSP's Range (npt and clock, RFC 7826 §4.4) and Scale headers (rtsp/range_parse).
    for name, value in [("clock-closed", "clock=20261127T100000Z-20261127T101500Z"),
                        ("onvif-replay", "clock=20090615T114900.440Z-"),
                        ("clock-to", "clock=-20261127T101500Z;time=19970123T143720Z"),
                        ("npt", "npt=00:01:02.5-1:00:00"),
                        ("scale-reverse", "-2.5")]:
        seed("rtsp", "range_parse", name, value.encode())


def rtcp():
    """A viewer's compound RTCP: receiver report, NACK, PLI, FIR, BYE."""
    rr = bytes([0x80, 201, 0, 1, 0, 0, 0, 9])
    nack = bytes([0x81, 205, 0, 3, 0, 0, 0, 9, 0, 0, 0, 7, 0, 100, 0x80, 0x02])
    pli = bytes([0x81, 206, 0, 2, 0, 0, 0, 9, 0, 0, 0, 7])
    fir = bytes([0x84, 206, 0, 4, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 8, 1, 0, 0, 0])
    bye = bytes([0x81, 203, 0, 1, 0, 0, 0, 9])
    seed("webrtc", "rtcp", "compound", rr + nack + pli + fir + bye)
    seed("webrtc", "rtcp", "nack", nack)


def udp_ingest():
    """UDP ingest: ffmpeg's RTP/MP2T datagrams as captured on 127.0.0.1, each behind its
    2-byte length (rtp_mp2t reads a first byte that spaces its reorder timeouts), the
    last two swapped; and ingest URLs of every form (ts_udp_url)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(2)
    port = sock.getsockname()[1]
    sender = subprocess.Popen(
        ["ffmpeg", "-hide_banner", "-loglevel", "error", *TEST, "-t", "1", *ENC,
         "-f", "rtp_mpegts", f"rtp://127.0.0.1:{port}"], stdin=subprocess.DEVNULL)
    datagrams = []
    try:
        while len(datagrams) < 24:
            datagrams.append(sock.recv(65536))
    except socket.timeout:
        pass
    sender.wait()
    sock.close()
    if len(datagrams) > 2:
        datagrams[-1], datagrams[-2] = datagrams[-2], datagrams[-1]
    framed = b"".join(struct.pack(">H", len(d)) + d for d in datagrams)
    seed("media", "rtp_mp2t", "ffmpeg-rtp-mpegts", b"\x05" + framed)
    for name, url in [("unicast", "udp://0.0.0.0:5000"), ("rtp", "rtp://127.0.0.1:5004"),
                      ("asm", "udp://@239.1.1.1:1234?interface=eth0"),
                      ("ssm", "rtp://232.1.1.1:5004?sources=10.0.0.1,10.0.0.2&interface=10.0.0.9"),
                      ("v6", "udp://[ff3e::1]:5000?sources=2001:db8::1&localaddr=lo")]:
        seed("media", "ts_udp_url", name, url.encode())


def scte35():
    """SCTE-35 sections: the standard's own examples (ffmpeg passes cues through but
    makes none): a splice_insert, and time_signals with segmentation descriptors."""
    import base64
    examples = {
        "splice-insert": "/DAvAAAAAAAA///wFAVIAACPf+/+c2nALv4AUsz1AAAAAAAKAAhDVUVJAAABNWLbowo=",
        "time-signal-placement-start":
            "/DA0AAAAAAAA///wBQb+cr0AUAAeAhxDVUVJSAAAjn/PAAGlmbAICAAAAAAsoKGKNAIAmsnRfg==",
        "time-signal-program-end":
            "/DAvAAAAAAAA///wBQb+dGKQoAAZAhdDVUVJSAAAjn+fCAgAAAAALKChijUCAKnMZ1g=",
    }
    # rtmp/amf0_decode: YouTube's onCuePoint, name and object.
    def amf_string(text):
        return b"\x02" + struct.pack(">H", len(text)) + text.encode()
    cue = amf_string("onCuePoint") + b"\x03"
    for key, value in [("type", amf_string("com.youtube.cuepoint")),
                       ("pre_roll_time_sec", b"\x00" + struct.pack(">d", 2.56)),
                       ("cue_point_start", b"\x01\x01"),
                       ("break_duration_sec", b"\x00" + struct.pack(">d", 30.0)),
                       ("splice_event_id", b"\x00" + struct.pack(">d", 7.0))]:
        cue += struct.pack(">H", len(key)) + key.encode() + value
    seed("rtmp", "amf0_decode", "youtube-cue-point", cue + b"\x00\x00\x09")
    for name, text in examples.items():
        section = base64.b64decode(text)
        seed("media", "ts_scte35", name, section)
        # hls/splice_marks: a cue (length, section, splice time) then a segment start.
        at = struct.pack("<q", 90000)
        seed("hls", "splice_marks", name,
             b"\x00" + struct.pack("<H", len(section)) + section + at
             + b"\x01" + struct.pack("<q", 180000))


def udp_out(tmp):
    """UDP output: ffmpeg's TS (with its PCRs) cut into the pacer's records (a clock
    step in ms, a 2-byte length, the bytes), once at the stream's rate and once at a
    constant 2 Mbit/s (ts_pace); and output URLs of every form (ts_out_url)."""
    path = os.path.join(tmp, "pace.ts")
    ffmpeg(*TEST, "-t", "1", *ENC, "-f", "mpegts", path)
    with open(path, "rb") as f:
        data = f.read()
    records = b"".join(bytes([20]) + struct.pack(">H", len(data[i:i + 1316])) + data[i:i + 1316]
                       for i in range(0, min(len(data), 40 * 1316), 1316))
    seed("media", "ts_pace", "ffmpeg-vbr", b"\x06" + records)
    seed("media", "ts_pace", "ffmpeg-cbr", b"\x0e\x01" + records)
    for name, url in [("unicast", "udp://127.0.0.1:5000"), ("rtp", "rtp://127.0.0.1:5004?pkts=4"),
                      ("group", "udp://239.1.1.1:1234?ttl=8&iface=10.0.0.9"),
                      ("cbr", "rtp://239.2.2.2:5004?bitrate=4000000&localaddr=10.0.0.1"),
                      ("v6", "udp://[ff3e::1]:5000?ttl=2")]:
        seed("media", "ts_out_url", name, url.encode())


def main():
    with tempfile.TemporaryDirectory() as tmp:
        files(tmp)
        ts(tmp)
        udp_ingest()
        udp_out(tmp)
        scte35()
        sdp(tmp)
        hls()
        ranges()
        rtcp()
        transcode(tmp)
        sessions(tmp)
    print("seeds written under crates/*/fuzz/seeds/")


if __name__ == "__main__":
    main()
