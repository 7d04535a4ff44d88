//! UDP ingest (`[[ingest]]`) with ffmpeg as the sender: MPEG-TS over `udp://` and
//! `rtp://` (RTP/MP2T) published as streams that RTMP and HLS play; an input that goes
//! silent ends its stream after the grace window and publishes again by itself; 2 %
//! loss on the way (a userspace relay that drops every 50th datagram) is counted and
//! the stream goes on; garbage and huge datagrams affect only their input; the program
//! named is the one taken from a multi-program TS; the API adds and removes ingests;
//! SCTE-35 cues a relay adds to ffmpeg's TS are read and counted.
//!
//! Every socket is on 127.0.0.1; ingests bind port 0 and the API says where. Multicast
//! (any-source and source-specific joins) runs in a user and network namespace the test
//! makes for itself, with multicast routed on its loopback only.

use crate::common::netns::{Netns, NS_SOURCE};
use crate::common::{
    have, have_ffmpeg, http_request, probe_video, scratch, tools_present, Kill, TestServer,
};
use serde_json::{json, Value};
use sluice_media::ts::crc32_mpeg2;
use sluice_media::MediaKind;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server with these `[[ingest]]` entries (stream, URL), idle after 500 ms of silence,
/// streams ending 500 ms after that.
fn server_with(name: &str, entries: &[(&str, &str)]) -> TestServer {
    let mut toml = String::from("[limits]\npublish_grace_ms = 500\n");
    for (stream, url) in entries {
        toml.push_str(&format!(
            "\n[[ingest]]\nstream = \"{stream}\"\nurl = \"{url}\"\nidle_ms = 500\n"
        ));
    }
    let path = scratch("udp_ingest").join(format!("{name}.toml"));
    std::fs::write(&path, toml).expect("write config");
    TestServer::start(&["--config", path.to_str().expect("utf-8 path")])
}

/// `GET /api/v1/ingests`, the entry of `stream`.
fn ingest(server: &TestServer, stream: &str) -> Value {
    let (status, _, body) = http_request(server.http, "GET", "/api/v1/ingests", "");
    assert_eq!(status, 200);
    let all: Value = serde_json::from_slice(&body).expect("JSON");
    all["ingests"]
        .as_array()
        .expect("ingests")
        .iter()
        .find(|i| i["stream"] == stream)
        .unwrap_or_else(|| panic!("no ingest of {stream} in {all}"))
        .clone()
}

/// Where the ingest of `stream` listens.
fn bound(server: &TestServer, stream: &str) -> SocketAddr {
    ingest(server, stream)["bound"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .expect("bound address")
}

/// ffmpeg sends `seconds` of a 25 fps test pattern (1 s GOP) and a tone as MPEG-TS to
/// `url` in real time, as `format` (`mpegts` or `rtp_mpegts`).
fn send(format: &str, url: &str, seconds: u32) -> Kill {
    send_with(Command::new("ffmpeg"), format, url, seconds)
}

/// [`send`] with `ffmpeg`, a command that runs ffmpeg.
fn send_with(mut ffmpeg: Command, format: &str, url: &str, seconds: u32) -> Kill {
    Kill(
        ffmpeg
            .args(["-hide_banner", "-loglevel", "error", "-re"])
            .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
            .args(["-t", &seconds.to_string(), "-c:v", "libx264"])
            .args(["-preset", "ultrafast", "-g", "25", "-bf", "0"])
            .args(["-pix_fmt", "yuv420p", "-c:a", "aac", "-f", format, url])
            .stdin(Stdio::null())
            .spawn()
            .expect("start ffmpeg"),
    )
}

/// Waits up to 15 s for `f` to hold.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn live(server: &TestServer, key: &str) -> bool {
    http_request(server.http, "GET", &format!("/api/v1/streams/{key}"), "").0 == 200
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ffmpeg_sends_udp_and_rtp_and_rtmp_and_hls_play_them() {
    if !have_ffmpeg() {
        return;
    }
    let server = server_with(
        "play",
        &[
            ("live/udp", "udp://127.0.0.1:0"),
            ("live/rtp", "rtp://127.0.0.1:0"),
        ],
    );
    let udp = bound(&server, "live/udp");
    let rtp = bound(&server, "live/rtp");
    let _a = send("mpegts", &format!("udp://{udp}?pkt_size=1316"), 30);
    let _b = send("rtp_mpegts", &format!("rtp://{rtp}"), 30);
    for key in ["live/udp", "live/rtp"] {
        wait_for(key, || live(&server, key));
        for url in [
            format!("rtmp://{}/{key}", server.rtmp),
            format!("http://{}/{key}.m3u8", server.http),
        ] {
            let (streams, times) = probe_video(&url, "%+#120");
            assert!(streams.contains("h264,320,240"), "{url}: {streams}");
            assert!(streams.contains("aac"), "{url}: {streams}");
            assert!(times.len() >= 25, "{url}: {} video packets", times.len());
        }
    }
    let u = ingest(&server, "live/udp");
    assert_eq!(u["live"], true, "{u}");
    assert_eq!(u["starts"], 1, "{u}");
    assert!(u["ts_packets"].as_u64() > Some(1000), "{u}");
    let r = ingest(&server, "live/rtp");
    assert_eq!(r["live"], true, "{r}");
    assert_eq!(r["bad_datagrams"], 0, "{r}");
    let (_, _, metrics) = http_request(server.http, "GET", "/metrics", "");
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("sluice_ingest_live{app=\"live\",stream=\"rtp\"} 1"),
        "{metrics}"
    );
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_silent_input_ends_its_stream_and_comes_back_by_itself() {
    if !have_ffmpeg() {
        return;
    }
    let server = server_with("silence", &[("live/back", "udp://127.0.0.1:0")]);
    let addr = bound(&server, "live/back");
    let mut first = send("mpegts", &format!("udp://{addr}?pkt_size=1316"), 3);
    wait_for("first spell", || live(&server, "live/back"));
    let _ = first.0.wait();
    // Silence: the publisher leaves after idle_ms, the stream after the grace window.
    wait_for("the stream's end", || !live(&server, "live/back"));
    assert_eq!(ingest(&server, "live/back")["live"], false);
    let _second = send("mpegts", &format!("udp://{addr}?pkt_size=1316"), 30);
    wait_for("second spell", || live(&server, "live/back"));
    let (streams, times) = probe_video(&format!("rtmp://{}/live/back", server.rtmp), "%+#120");
    assert!(streams.contains("h264,320,240"), "{streams}");
    assert!(times.len() >= 25, "{} video packets", times.len());
    assert_eq!(ingest(&server, "live/back")["starts"], 2);
}

/// Forwards the datagrams sent to its own port to `to` through `forward` (which sends
/// what it wants with the socket it is given), until dropped.
struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn start(
        to: SocketAddr,
        mut forward: impl FnMut(&UdpSocket, &mut [u8], SocketAddr) + Send + 'static,
    ) -> Relay {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("relay socket");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let addr = sock.local_addr().expect("relay address");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0; 65_536];
            while !stopped.load(Ordering::Relaxed) {
                if let Ok(len) = sock.recv(&mut buf) {
                    forward(&sock, &mut buf[..len], to);
                }
            }
        });
        Relay {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// Forwards every datagram but each `nth` (deterministic loss).
    fn lossy(to: SocketAddr, nth: u64) -> Relay {
        let mut n = 0u64;
        Relay::start(to, move |sock, datagram, to| {
            n += 1;
            if !n.is_multiple_of(nth) {
                let _ = sock.send_to(datagram, to);
            }
        })
    }

    /// Stops forwarding.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn two_percent_loss_is_counted_and_the_stream_goes_on() {
    if !have_ffmpeg() {
        return;
    }
    let server = server_with(
        "loss",
        &[
            ("live/lossy", "udp://127.0.0.1:0"),
            ("live/lossyrtp", "rtp://127.0.0.1:0"),
        ],
    );
    let udp = Relay::lossy(bound(&server, "live/lossy"), 50);
    let rtp = Relay::lossy(bound(&server, "live/lossyrtp"), 50);
    let _a = send("mpegts", &format!("udp://{}?pkt_size=1316", udp.addr), 30);
    let _b = send("rtp_mpegts", &format!("rtp://{}", rtp.addr), 30);
    for key in ["live/lossy", "live/lossyrtp"] {
        wait_for(key, || live(&server, key));
        let (streams, times) = probe_video(&format!("rtmp://{}/{key}", server.rtmp), "%+#120");
        assert!(streams.contains("h264,320,240"), "{key}: {streams}");
        assert!(times.len() >= 25, "{key}: {} video packets", times.len());
    }
    let u = ingest(&server, "live/lossy");
    assert!(u["cc_errors"].as_u64() > Some(0), "{u}");
    assert_eq!(u["starts"], 1, "one spell throughout: {u}");
    let r = ingest(&server, "live/lossyrtp");
    assert!(r["rtp_lost"].as_u64() > Some(0), "{r}");
    assert_eq!(r["starts"], 1, "one spell throughout: {r}");
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn garbage_and_huge_datagrams_affect_only_their_input() {
    if !have_ffmpeg() {
        return;
    }
    let server = server_with(
        "garbage",
        &[
            ("live/clean", "udp://127.0.0.1:0"),
            ("live/junk", "udp://127.0.0.1:0"),
            ("live/junkrtp", "rtp://127.0.0.1:0"),
        ],
    );
    let clean = bound(&server, "live/clean");
    let _sender = send("mpegts", &format!("udp://{clean}?pkt_size=1316"), 30);
    let junk = UdpSocket::bind("127.0.0.1:0").expect("socket");
    let mut x = 0x1234_5678u32;
    let mut noise = |len: usize| -> Vec<u8> {
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                // Sync bytes now and then, so the demuxer tries to lock on.
                if x.is_multiple_of(97) {
                    0x47
                } else {
                    x as u8
                }
            })
            .collect()
    };
    for key in ["live/junk", "live/junkrtp"] {
        let to = bound(&server, key);
        for len in [0, 1, 188, 1316, 9000, 65_000] {
            for _ in 0..20 {
                junk.send_to(&noise(len), to).expect("send junk");
            }
        }
    }
    wait_for("clean stream", || live(&server, "live/clean"));
    let (streams, times) = probe_video(&format!("rtmp://{}/live/clean", server.rtmp), "%+#120");
    assert!(streams.contains("h264,320,240"), "{streams}");
    assert!(times.len() >= 25, "{} video packets", times.len());
    wait_for("junk counted", || {
        ingest(&server, "live/junkrtp")["bad_datagrams"].as_u64() > Some(0)
    });
    assert!(ingest(&server, "live/junk")["skipped_bytes"].as_u64() > Some(0));
    assert_eq!(ingest(&server, "live/clean")["skipped_bytes"], 0);
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn multicast_groups_are_joined_any_source_and_source_specific() {
    if !have_ffmpeg() || !tools_present("curl", cfg!(have_curl), &[&["curl", "--version"]]) {
        return;
    }
    let Some(ns) = Netns::new() else {
        return;
    };
    // The namespace is the test's: its ports are all free.
    let toml = format!(
        "[limits]\npublish_grace_ms = 500\n\n\
         [[ingest]]\nstream = \"live/asm\"\nurl = \"udp://239.255.0.1:5000?interface=lo\"\n\n\
         [[ingest]]\nstream = \"live/ssm\"\n\
         url = \"rtp://232.1.1.1:5002?sources={NS_SOURCE}&interface={NS_SOURCE}\"\n\n\
         [[ingest]]\nstream = \"live/elsewhere\"\n\
         url = \"udp://232.1.1.2:5004?sources=10.99.0.2\"\n"
    );
    let path = scratch("udp_ingest").join("multicast.toml");
    std::fs::write(&path, toml).expect("write config");
    let prefix = ns.prefix();
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let server = TestServer::start_in(&prefix, &["--config", path.to_str().expect("utf-8")]);
    let _asm = send_with(
        ns.command("ffmpeg"),
        "mpegts",
        "udp://239.255.0.1:5000?pkt_size=1316",
        30,
    );
    let _ssm = send_with(
        ns.command("ffmpeg"),
        "rtp_mpegts",
        "rtp://232.1.1.1:5002",
        30,
    );
    // From the namespace's source, which the join of live/elsewhere does not name.
    let _other = send_with(
        ns.command("ffmpeg"),
        "mpegts",
        "udp://232.1.1.2:5004?pkt_size=1316",
        30,
    );
    let api = |path: &str| ns.get(&format!("http://{}{path}", server.http));
    for key in ["live/asm", "live/ssm"] {
        wait_for(key, || api(&format!("/api/v1/streams/{key}")).0 == 200);
        for url in [
            format!("rtmp://{}/{key}", server.rtmp),
            format!("http://{}/{key}.m3u8", server.http),
        ] {
            let (streams, video) = ns.probe(&url);
            assert!(streams.contains("h264,320,240"), "{url}: {streams}");
            assert!(video >= 25, "{url}: {video} video packets in\n{streams}");
        }
    }
    let (_, body) = api("/api/v1/ingests");
    let all: Value = serde_json::from_slice(&body).expect("JSON");
    let of = |key: &str| {
        all["ingests"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["stream"] == key))
            .cloned()
            .unwrap_or_else(|| panic!("{key} in {all}"))
    };
    let ssm = of("live/ssm");
    assert_eq!(
        ssm["sender"].as_str().and_then(|s| s.split(':').next()),
        Some(NS_SOURCE),
        "{ssm}"
    );
    assert_eq!(
        of("live/elsewhere")["datagrams"],
        0,
        "another source's group: {all}"
    );
    assert_eq!(api("/api/v1/streams/live/elsewhere").0, 404);
    drop(server);
}

/// An API request with a JSON body: the status and the JSON answer (`Null` if none).
pub(crate) fn api(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn the_api_adds_and_removes_an_ingest() {
    if !have_ffmpeg() {
        return;
    }
    let server = server_with("api", &[]);
    let body = r#"{"stream": "live/added", "url": "rtp://127.0.0.1:0", "idle_ms": 500}"#;
    let (status, added) = api(server.http, "POST", "/api/v1/ingests", body);
    assert_eq!(status, 201, "{added}");
    let addr: SocketAddr = added["bound"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .expect("bound address");
    assert_eq!(api(server.http, "POST", "/api/v1/ingests", body).0, 409);
    let bad = r#"{"stream": "added", "url": "udp://127.0.0.1:0"}"#;
    assert_eq!(api(server.http, "POST", "/api/v1/ingests", bad).0, 400);
    let _sender = send("rtp_mpegts", &format!("rtp://{addr}"), 30);
    wait_for("the added stream", || live(&server, "live/added"));
    let (streams, times) = probe_video(&format!("rtmp://{}/live/added", server.rtmp), "%+#120");
    assert!(streams.contains("h264,320,240"), "{streams}");
    assert!(times.len() >= 25, "{} video packets", times.len());
    let path = "/api/v1/ingests/live/added";
    assert_eq!(api(server.http, "DELETE", path, "").0, 200);
    // Its publisher left: the stream ends after the grace window, though ffmpeg sends on.
    wait_for("the removed stream's end", || !live(&server, "live/added"));
    assert_eq!(api(server.http, "DELETE", path, "").0, 404);
    let (_, list) = api(server.http, "GET", "/api/v1/ingests", "");
    assert_eq!(list["ingests"], Value::Array(vec![]), "{list}");
}

/// ffmpeg sends a TS of two programs to `addr` in real time for 30 s: program 1 is a
/// 320x240 test pattern, program 2 a 160x120 one, each with a tone.
fn send_two_programs(addr: SocketAddr) -> Kill {
    Kill(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re"])
            .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
            .args(["-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25"])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
            .args([
                "-t", "30", "-map", "0:v", "-map", "2:a", "-map", "1:v", "-map", "2:a",
            ])
            .args([
                "-c:v",
                "libx264",
                "-preset",
                "ultrafast",
                "-g",
                "25",
                "-bf",
                "0",
            ])
            .args(["-pix_fmt", "yuv420p", "-c:a", "aac"])
            .args(["-program", "program_num=1:st=0:st=1"])
            .args(["-program", "program_num=2:st=2:st=3", "-f", "mpegts"])
            .arg(format!("udp://{addr}?pkt_size=1316"))
            .stdin(Stdio::null())
            .spawn()
            .expect("start ffmpeg"),
    )
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn the_program_named_is_the_one_published() {
    if !have_ffmpeg() {
        return;
    }
    let path = scratch("udp_ingest").join("programs.toml");
    std::fs::write(
        &path,
        "[[ingest]]\nstream = \"live/second\"\nurl = \"udp://127.0.0.1:0\"\nprogram = 2\n\n\
         [[ingest]]\nstream = \"live/first\"\nurl = \"udp://127.0.0.1:0\"\n",
    )
    .expect("write config");
    let server = TestServer::start(&["--config", path.to_str().expect("utf-8 path")]);
    // Without a program named, program 1 is taken.
    for (key, size) in [
        ("live/second", "h264,160,120"),
        ("live/first", "h264,320,240"),
    ] {
        let _sender = send_two_programs(bound(&server, key));
        wait_for(key, || live(&server, key));
        let (streams, times) = probe_video(&format!("rtmp://{}/{key}", server.rtmp), "%+#120");
        assert!(streams.contains(size), "{key}: {streams}");
        assert!(times.len() >= 25, "{key}: {} video packets", times.len());
        let program = ingest(&server, key)["program"].as_u64();
        assert_eq!(program, (key == "live/second").then_some(2));
    }
}

/// PID the relay puts SCTE-35 cues on.
const CUE_PID: u16 = 0x1f0;

/// An SCTE-35 `splice_insert` of event `id`, out of the network when `out`, at `pts`
/// (immediate when `None`), with a break of `duration` ticks when given.
fn splice_insert(id: u32, out: bool, pts: Option<u64>, duration: Option<u64>) -> Vec<u8> {
    let mut s = vec![0xfc, 0x30, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xf0, 0, 0x05];
    s.extend_from_slice(&id.to_be_bytes());
    s.push(0x7f);
    // Program splice; a duration; immediate.
    let flags = u8::from(out) << 7 | 0x40 | u8::from(duration.is_some()) << 5;
    s.push(flags | u8::from(pts.is_none()) << 4 | 0x0f);
    for t in pts.into_iter().chain(duration) {
        s.push(0xfe | (t >> 32) as u8 & 1);
        s.extend_from_slice(&(t as u32).to_be_bytes());
    }
    s.extend_from_slice(&[0, 1, 0, 0]); // unique_program_id, avail 0 of 0
    s[12] = (s.len() - 14) as u8;
    s.extend_from_slice(&[0, 0]); // no descriptors
    let len = s.len() - 3 + 4;
    s[2] = len as u8;
    let crc = crc32_mpeg2(&s);
    s.extend_from_slice(&crc.to_be_bytes());
    s
}

/// The PTS of the video PES that starts in TS packet `p`, if one does.
fn video_pts(p: &[u8]) -> Option<u64> {
    if p[1] & 0x40 == 0 {
        return None;
    }
    let at = if p[3] & 0x20 != 0 {
        5 + usize::from(p[4])
    } else {
        4
    };
    let pes = p.get(at..at + 14)?;
    if pes[..3] != [0, 0, 1] || pes[3] & 0xf0 != 0xe0 || pes[7] & 0x80 == 0 {
        return None;
    }
    let b: Vec<u64> = pes[9..14].iter().map(|&b| u64::from(b)).collect();
    Some((b[0] >> 1 & 7) << 30 | b[1] << 22 | (b[2] >> 1) << 15 | b[3] << 7 | b[4] >> 1)
}

/// Adds an SCTE-35 stream to the program of ffmpeg's TS datagrams: every PMT lists
/// [`CUE_PID`] (type 0x86), and after each datagram the sections `plan` gives (from
/// the datagram count and the first and newest video PTS seen) follow, a datagram of
/// one cue packet each, as a broadcast encoder's splicer adds them. Counts the cues
/// sent into `cues`.
fn cue_relay(
    to: SocketAddr,
    cues: Arc<AtomicU32>,
    mut plan: impl FnMut(u64, u64, u64) -> Vec<Vec<u8>> + Send + 'static,
) -> Relay {
    let (mut n, mut cc, mut pmt_pid) = (0u64, 0u8, None);
    let (mut first, mut newest) = (None, 0);
    Relay::start(to, move |sock, datagram, to| {
        for p in datagram.chunks_mut(188) {
            if p.len() < 188 {
                continue;
            }
            if let Some(pts) = video_pts(p) {
                first.get_or_insert(pts);
                newest = pts;
            }
            let pid = u16::from_be_bytes([p[1] & 0x1f, p[2]]);
            // Unit starts without an adaptation field: ffmpeg's tables.
            if p[1] & 0x40 == 0 || p[3] & 0x30 != 0x10 {
                continue;
            }
            let at = 5 + usize::from(p[4]);
            if pid == 0 {
                // The PAT's first program: number (2 bytes) and PMT PID.
                pmt_pid = Some(u16::from_be_bytes([p[at + 10] & 0x1f, p[at + 11]]));
            } else if Some(pid) == pmt_pid {
                let s = &mut p[at..];
                let total = 3 + (usize::from(s[1] & 0x0f) << 8 | usize::from(s[2]));
                let entry = [0x86, 0xe0 | (CUE_PID >> 8) as u8, CUE_PID as u8, 0xf0, 0];
                s.copy_within(total - 4..total, total + 1);
                s[total - 4..total + 1].copy_from_slice(&entry);
                let len = total - 3 + 5;
                s[1] = (s[1] & 0xf0) | (len >> 8) as u8;
                s[2] = len as u8;
                let crc = crc32_mpeg2(&s[..total + 1]);
                s[total + 1..total + 5].copy_from_slice(&crc.to_be_bytes());
            }
        }
        let _ = sock.send_to(datagram, to);
        n += 1;
        let Some(first) = first else { return };
        for section in plan(n, first, newest) {
            let mut packet = vec![0xffu8; 188];
            packet[..5].copy_from_slice(&[
                0x47,
                0x40 | (CUE_PID >> 8) as u8,
                CUE_PID as u8,
                0x10 | cc,
                0,
            ]);
            packet[5..5 + section.len()].copy_from_slice(&section);
            cc = (cc + 1) & 0x0f;
            let _ = sock.send_to(&packet, to);
            cues.fetch_add(1, Ordering::Relaxed);
        }
    })
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn scte35_cues_in_the_ts_are_read_and_the_stream_plays_on() {
    if !have_ffmpeg() {
        return;
    }
    let server = server_with("cues", &[("live/cued", "udp://127.0.0.1:0")]);
    let cues = Arc::new(AtomicU32::new(0));
    // Immediate outs and ins in turn, after every 50th datagram.
    let mut sent = 0;
    let mut relay = cue_relay(bound(&server, "live/cued"), cues.clone(), move |n, _, _| {
        if !n.is_multiple_of(50) {
            return Vec::new();
        }
        sent += 1;
        vec![splice_insert(sent, sent % 2 == 1, None, None)]
    });
    let _ffmpeg = send("mpegts", &format!("udp://{}?pkt_size=1316", relay.addr), 30);
    wait_for("publishing", || live(&server, "live/cued"));
    let (streams, times) = probe_video(&format!("rtmp://{}/live/cued", server.rtmp), "%+#120");
    assert!(streams.contains("h264,320,240"), "{streams}");
    assert!(times.len() >= 25, "{} video packets", times.len());
    wait_for("two cues read", || {
        ingest(&server, "live/cued")["scte35_cues"].as_u64() >= Some(2)
    });
    relay.stop();
    let sent = cues.load(Ordering::Relaxed);
    // Every cue sent is read: none is dropped as malformed or unplaceable (the first
    // comes after 50 datagrams, well after the first frames).
    std::thread::sleep(Duration::from_millis(200));
    let i = ingest(&server, "live/cued");
    assert_eq!(i["scte35_cues"].as_u64(), Some(u64::from(sent)), "{i}");
    assert_eq!(i["cc_errors"], 0, "{i}");
    let (_, _, metrics) = http_request(server.http, "GET", "/metrics", "");
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains(&format!(
            "sluice_ingest_scte35_cues_total{{app=\"live\",stream=\"cued\"}} {sent}"
        )),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("scte35"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A TS input's break, announced ahead by a splicer, marks and cuts the HLS
/// segments: `EXT-X-DATERANGE` with `SCTE35-OUT` on the segment that begins at the
/// first keyframe from the splice time, and with `SCTE35-IN`, the same `ID` and
/// `START-DATE`, and the break's `DURATION` on the one that ends it.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn scte35_breaks_become_daterange_tags_at_segments_cut_there() {
    if !have_ffmpeg() {
        return;
    }
    let server = server_with("breaks", &[("live/breaks", "udp://127.0.0.1:0")]);
    let cues = Arc::new(AtomicU32::new(0));
    let s = 90_000u64;
    let mut announced = false;
    // Once the feed has run 3 s: a 3 s break from 5.5 s (between the 1 s GOP's
    // keyframes, so the cut at 6 s is the splice's own) to 8.5 s.
    let mut relay = cue_relay(
        bound(&server, "live/breaks"),
        cues.clone(),
        move |_, first, newest| {
            if announced || newest < first + 3 * s {
                return Vec::new();
            }
            announced = true;
            vec![
                splice_insert(77, true, Some(first + s * 11 / 2), Some(3 * s)),
                splice_insert(77, false, Some(first + s * 17 / 2), None),
            ]
        },
    );
    let _ffmpeg = send("mpegts", &format!("udp://{}?pkt_size=1316", relay.addr), 30);
    wait_for("publishing", || live(&server, "live/breaks"));
    // An HTTP-TS player from before the announcement (a TS output carries cues on).
    let http_ts = {
        let addr = server.http;
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut sock = std::net::TcpStream::connect(addr).expect("connect");
            sock.write_all(b"GET /live/breaks.ts HTTP/1.0\r\n\r\n")
                .expect("request");
            sock.set_read_timeout(Some(Duration::from_millis(200)))
                .expect("timeout");
            let (mut got, mut chunk) = (Vec::new(), [0u8; 65_536]);
            let end = Instant::now() + Duration::from_secs(8);
            while Instant::now() < end {
                match sock.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                    Err(_) => {}
                }
            }
            got
        })
    };
    // Playlists of both variants are asked for before the break, so they segment
    // through it (a later start takes the stream's cues from the hub as well).
    // Until the first segment is complete, a playlist is 404.
    let playlist = |path: &str| {
        let (status, _, body) = http_request(server.http, "GET", path, "");
        let text = String::from_utf8(body).expect("UTF-8 playlist");
        if status == 200 {
            text
        } else {
            String::new()
        }
    };
    for path in ["/live/breaks.m3u8", "/live/breaks/index.m3u8"] {
        playlist(path);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for path in ["/live/breaks.m3u8", "/live/breaks/index.m3u8"] {
        let mut text = playlist(path);
        while !text.contains("SCTE35-IN=") {
            assert!(Instant::now() < deadline, "{path}: no SCTE35-IN in\n{text}");
            std::thread::sleep(Duration::from_millis(200));
            text = playlist(path);
        }
        // Each tag, the date of the segment it precedes, and that segment's name
        // (its start on the stream's timeline, 90 kHz).
        let lines: Vec<&str> = text.lines().collect();
        let tag = |attribute: &str| {
            let i = lines
                .iter()
                .position(|l| l.starts_with("#EXT-X-DATERANGE:") && l.contains(attribute))
                .unwrap_or_else(|| panic!("{path}: no {attribute} in\n{text}"));
            let date = lines[i - 1]
                .strip_prefix("#EXT-X-PROGRAM-DATE-TIME:")
                .unwrap_or_else(|| panic!("{path}: no date before the tag in\n{text}"));
            let uri = lines[i..]
                .iter()
                .find(|l| !l.starts_with('#'))
                .expect("a segment");
            let name: u64 = uri
                .rsplit('/')
                .next()
                .and_then(|f| f.split(['-', '.']).nth(1))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{path}: segment name in {uri}"));
            (lines[i].to_string(), date.to_string(), name)
        };
        let (out, out_date, out_at) = tag("SCTE35-OUT=0xFC30");
        let (back, _, in_at) = tag("SCTE35-IN=0xFC30");
        assert_eq!(in_at - out_at, 3 * s, "{path}: cut at both splices\n{text}");
        let start = format!("ID=\"splice-77\",START-DATE=\"{out_date}\"");
        assert!(
            out.contains(&start) && out.contains(",PLANNED-DURATION=3.000,"),
            "{out}"
        );
        assert!(
            back.contains(&start) && back.contains(",DURATION=3.000,"),
            "{back}"
        );
    }
    // The HTTP-TS player got both cues on the cue PID, listed in the PMT, retimed to
    // its clock: the out half a second past a keyframe of its video, the in 3 s on.
    let got = http_ts.join().expect("HTTP-TS reader");
    let body = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| &got[at + 4..])
        .expect("an HTTP-TS answer");
    let mut demuxer = sluice_media::ts::TsDemuxer::new();
    demuxer.push(body);
    let (mut keys, mut placed) = (Vec::new(), Vec::new());
    while let Some(out) = demuxer.poll() {
        match out {
            sluice_media::ts::Demuxed::Frame(f) if f.keyframe && f.kind == MediaKind::Video => {
                keys.push(f.dts)
            }
            sluice_media::ts::Demuxed::Cue(c) => placed.push(c),
            _ => {}
        }
    }
    assert_eq!(placed.len(), 2, "cues in {} bytes of HTTP-TS", body.len());
    assert_eq!(placed[1].at - placed[0].at, 3 * s as i64);
    assert!(!keys.is_empty());
    assert!(keys
        .iter()
        .all(|k| (placed[0].at - k).rem_euclid(s as i64) == s as i64 / 2));
    assert_eq!(
        placed[0].info.direction(),
        Some(sluice_media::ts::CueDirection::Out)
    );
    // hls.js reads both tags as one valid date range (tags of one ID must agree) with
    // the out's and the in's sections, and plays on through the break.
    if have("chromium") {
        let setup = "
  if (!Hls.isSupported()) throw new Error('hls.js not supported');
  const hls = new Hls();
  let ranges = '';
  hls.on(Hls.Events.LEVEL_UPDATED, (e, d) => {
    ranges = Object.values(d.details.dateRanges || {}).map(r => r.id + ':' + r.isValid + ':'
      + ('SCTE35-OUT' in r.attr ? 'out' : '') + ('SCTE35-IN' in r.attr ? 'in' : '')
      + ':' + r.duration).join(',');
  });
  hls.on(Hls.Events.ERROR, (e, d) => { if (d.fatal) errors.push(d.type + ':' + d.details); });
  hls.loadSource('STREAM_URL');
  hls.attachMedia(video);
  extra = () => '&ranges=' + ranges;";
        let url = format!("http://{}/live/breaks.m3u8", server.http);
        let report = crate::browser::play_in_chromium("hls.light.min.js", setup, &url, 4000);
        eprintln!("hls.js: {report}");
        let field = |name| crate::common::report_field(&report, name);
        assert!(field("err").is_empty(), "player errors ({report})");
        assert_eq!(field("ranges"), "splice-77:true:outin:3", "{report}");
        let t: f64 = field("t").parse().unwrap_or(0.0);
        assert!(t > 1.0, "video played only to {t} s ({report})");
    }
    relay.stop();
    // The API shows the cues where they splice.
    let (_, _, body) = http_request(server.http, "GET", "/api/v1/streams/live/breaks", "");
    let stream: Value = serde_json::from_slice(&body).expect("JSON");
    let cues = stream["cues"].as_array().expect("cues");
    assert_eq!(cues.len(), 2, "{stream}");
    assert_eq!(
        (&cues[0]["direction"], &cues[1]["direction"]),
        (&json!("out"), &json!("in"))
    );
    assert_eq!(cues[0]["event_id"], 77);
    assert_eq!(cues[0]["duration_ms"], 3000);
    let at = |c: &Value| c["at_ms"].as_i64().expect("at_ms");
    assert_eq!(at(&cues[1]) - at(&cues[0]), 3000, "{stream}");
}
