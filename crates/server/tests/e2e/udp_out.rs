//! UDP output (`[[apps]] push = ["udp://..."]`, `"rtp://..."`): a stream published over
//! RTMP goes out as MPEG-TS in datagrams, paced by its PCR, or at a constant rate with
//! null packets and PCRs restamped to the position. ffprobe and ffmpeg read the `udp://`
//! and `rtp://` outputs; a plain socket in the test checks a constant-rate output's
//! datagrams and PCRs (from the stream itself, not from wall-clock timing, so a loaded
//! machine does not fail it); a unicast target that is not listening is counted as
//! send errors and gets the stream once it listens; a multicast group is sent to and
//! read inside a network namespace of the test's own.
//!
//! Every socket is on 127.0.0.1 (or in the test's namespace); ports are the kernel's
//! choice, taken by the test before the server starts.

use crate::common::netns::{Netns, NS_SOURCE};
use crate::common::{
    have_ffmpeg, http_request, probe_video, publish_test_pattern, scratch, wait_for, wait_live,
    Kill, TestServer,
};
use crate::udp_ingest::api;
use serde_json::Value;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TS: usize = 188;
const PCR_HZ: f64 = 27_000_000.0;

/// A server whose apps push to URLs: (app, push URL).
fn server_pushing(name: &str, apps: &[(&str, &str)]) -> TestServer {
    TestServer::start(&["--config", &config(name, apps)])
}

fn config(name: &str, apps: &[(&str, &str)]) -> String {
    let mut toml = String::new();
    for (app, url) in apps {
        toml.push_str(&format!(
            "[[apps]]\nname = \"{app}\"\npush = [\"{url}\"]\n\n"
        ));
    }
    let path = scratch("udp_out").join(format!("{name}.toml"));
    std::fs::write(&path, toml).expect("write config");
    path.to_str().expect("utf-8 path").to_string()
}

/// A port on 127.0.0.1 that nothing listens on now.
fn free_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.local_addr().expect("addr").port()
}

/// The API's entry of the UDP push of `stream`.
fn udp_push(server: &TestServer, stream: &str) -> Option<Value> {
    let (status, _, body) = http_request(server.http, "GET", "/api/v1/relays", "");
    assert_eq!(status, 200);
    let all: Value = serde_json::from_slice(&body).expect("JSON");
    all["udp_pushes"]
        .as_array()
        .expect("udp_pushes")
        .iter()
        .find(|p| p["stream"] == stream)
        .cloned()
}

fn publish(server: &TestServer, key: &str, seconds: u32) -> Kill {
    publish_test_pattern(
        &format!("rtmp://{}/{key}", server.rtmp),
        "flv",
        "libx264",
        seconds,
    )
}

/// ffprobe starts listening on `url` in the background (it waits for the stream), so
/// the push's first datagrams reach it.
fn probe_in_background(url: String) -> std::thread::JoinHandle<(String, Vec<f64>)> {
    let handle = std::thread::spawn(move || probe_video(&url, "%+#150"));
    // ffprobe binds its socket within a moment of starting.
    std::thread::sleep(Duration::from_millis(500));
    handle
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn ffprobe_reads_udp_and_rtp_pushes() {
    if !have_ffmpeg() {
        return;
    }
    let (udp, rtp) = (free_port(), free_port());
    let server = server_pushing(
        "read",
        &[
            ("tv", &format!("udp://127.0.0.1:{udp}")),
            ("tvrtp", &format!("rtp://127.0.0.1:{rtp}?pkts=7")),
        ],
    );
    let udp_probe = probe_in_background(format!(
        "udp://127.0.0.1:{udp}?overrun_nonfatal=1&fifo_size=100000"
    ));
    let rtp_probe = probe_in_background(format!("rtp://127.0.0.1:{rtp}"));
    let _a = publish(&server, "tv/one", 30);
    let _b = publish(&server, "tvrtp/two", 30);
    for (what, probe) in [("udp", udp_probe), ("rtp", rtp_probe)] {
        let (streams, times) = probe.join().expect("ffprobe thread");
        assert!(streams.contains("h264,320,240"), "{what}: {streams}");
        assert!(
            streams.lines().any(|l| l.starts_with("aac")),
            "{what}: {streams}"
        );
        assert!(times.len() >= 50, "{what}: {} video packets", times.len());
        // Increasing, one frame (40 ms) apart: nothing lost or reordered.
        assert!(
            times.windows(2).all(|w| w[1] > w[0] && w[1] - w[0] < 0.1),
            "{what}: {times:?}"
        );
    }
    // ffmpeg decodes what the UDP push sends: pictures and sound.
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-rw_timeout", "10000000"])
        .args(["-i", &format!("udp://127.0.0.1:{udp}?overrun_nonfatal=1")])
        .args(["-map", "0:v", "-map", "0:a", "-t", "3", "-f", "null", "-"])
        .args(["-progress", "pipe:1"])
        .stdin(Stdio::null())
        .output()
        .expect("ffmpeg");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let progress = String::from_utf8_lossy(&out.stdout);
    let frames: u64 = progress
        .lines()
        .filter_map(|l| l.strip_prefix("frame=")?.trim().parse().ok())
        .max()
        .unwrap_or(0);
    assert!(frames >= 50, "{frames} pictures decoded:\n{progress}");

    let p = udp_push(&server, "tv/one").expect("the UDP push in the API");
    assert_eq!(p["url"], format!("udp://127.0.0.1:{udp}"), "{p}");
    assert!(p["datagrams"].as_u64() > Some(100), "{p}");
    assert_eq!(p["null_packets"], 0, "VBR sends no nulls: {p}");
    let r = udp_push(&server, "tvrtp/two").expect("the RTP push in the API");
    assert_eq!(
        r["bytes"].as_u64(),
        r["datagrams"].as_u64().map(|d| d * (12 + 7 * TS as u64)),
        "every RTP datagram is 12 + 7 x 188 bytes: {r}"
    );
    let (_, _, metrics) = http_request(server.http, "GET", "/metrics", "");
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains(&format!(
            "sluice_udp_push_datagrams_total{{app=\"tv\",stream=\"one\",target=\"udp://127.0.0.1:{udp}\"}}"
        )),
        "{metrics}"
    );
}

/// The PCR (27 MHz) of a TS packet, if it has one.
fn pcr(p: &[u8]) -> Option<u64> {
    if p[3] & 0x20 == 0 || p[4] < 7 || p[5] & 0x10 == 0 {
        return None;
    }
    let b = &p[6..12];
    let base = (u64::from(b[0]) << 25)
        | (u64::from(b[1]) << 17)
        | (u64::from(b[2]) << 9)
        | (u64::from(b[3]) << 1)
        | (u64::from(b[4]) >> 7);
    Some(base * 300 + ((u64::from(b[4] & 1) << 8) | u64::from(b[5])))
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_constant_rate_push_fills_with_nulls_and_its_pcrs_give_the_rate() {
    if !have_ffmpeg() {
        return;
    }
    const RATE: u64 = 3_000_000;
    let rx = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .expect("socket");
    // A loaded machine must not lose datagrams to a small buffer.
    let _ = rx.set_recv_buffer_size(8 << 20);
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    rx.bind(&addr.into()).expect("bind");
    let rx: UdpSocket = rx.into();
    let port = rx.local_addr().expect("addr").port();
    let server = server_pushing(
        "cbr",
        &[("cbr", &format!("udp://127.0.0.1:{port}?bitrate={RATE}"))],
    );
    let _publisher = publish(&server, "cbr/cam", 30);
    rx.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut buf = vec![0u8; 65536];
    let mut datagrams: Vec<Vec<u8>> = Vec::new();
    let mut first = None;
    let mut last = Instant::now();
    while first.is_none_or(|f: Instant| f.elapsed() < Duration::from_secs(4)) {
        let n = rx.recv(&mut buf).expect("datagrams from the push");
        last = Instant::now();
        first.get_or_insert(last);
        datagrams.push(buf[..n].to_vec());
    }
    assert!(
        datagrams.iter().all(|d| d.len() == 7 * TS),
        "every datagram is 7 TS packets: {:?}",
        datagrams.iter().map(Vec::len).find(|&l| l != 7 * TS)
    );
    let packets: Vec<&[u8]> = datagrams.iter().flat_map(|d| d.chunks(TS)).collect();
    assert!(packets.iter().all(|p| p[0] == 0x47));
    let pid = |p: &[u8]| (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2]);
    let nulls = packets.iter().filter(|p| pid(p) == 0x1fff).count();
    assert!(
        nulls > packets.len() / 4,
        "{nulls} null packets of {}: a 320x240 picture is far below 3 Mbit/s",
        packets.len()
    );
    // The rate the stream itself says: bytes between PCRs over the PCRs' step. Exact
    // but for rounding, whatever the machine's load did to the datagrams' times.
    let pcrs: Vec<(usize, u64)> = packets
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, pcr(p)?)))
        .collect();
    assert!(pcrs.len() >= 20, "{} PCRs in 4 s", pcrs.len());
    let off: Vec<String> = pcrs
        .windows(2)
        .filter_map(|w| {
            let ((i, a), (j, b)) = (w[0], w[1]);
            let bits = ((j - i) * TS * 8) as f64;
            let step = b.wrapping_sub(a) as f64;
            let rate = bits * PCR_HZ / step;
            let exact = (rate - RATE as f64).abs() / (RATE as f64) < 1e-4;
            (!exact).then(|| format!("{rate:.0} bit/s between packets {i} and {j}"))
        })
        .collect();
    // A datagram the kernel dropped, or a stall of the server's worker past 500 ms
    // (the pacer then skips the slots it missed), breaks one pair: a loaded machine may
    // do that once or twice, never to most of them.
    assert!(
        off.len() * 10 <= pcrs.len(),
        "{} of {} PCR steps off the rate: {off:?}",
        off.len(),
        pcrs.len()
    );
    // Wall clock, loosely: the bytes over the time they took to arrive.
    let secs = last.duration_since(first.expect("first")).as_secs_f64();
    let bytes: usize = datagrams.iter().map(Vec::len).sum();
    let measured = (bytes - datagrams[0].len()) as f64 * 8.0 / secs;
    eprintln!(
        "cbr: {} datagrams in {secs:.2} s, {measured:.0} bit/s measured, {nulls} nulls of {} packets",
        datagrams.len(),
        packets.len()
    );
    assert!(
        (measured - RATE as f64).abs() / (RATE as f64) < 0.25,
        "{measured:.0} bit/s over {secs:.2} s"
    );
    let p = udp_push(&server, "cbr/cam").expect("the push in the API");
    assert!(p["null_packets"].as_u64() > Some(0), "{p}");
    assert_eq!(p["overflow_packets"], 0, "{p}");
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_receiver_not_listening_is_counted_and_gets_the_stream_once_it_listens() {
    if !have_ffmpeg() {
        return;
    }
    let port = free_port();
    let server = server_pushing("refused", &[("late", &format!("udp://127.0.0.1:{port}"))]);
    let _publisher = publish(&server, "late/cam", 30);
    wait_live(server.http, "late/cam");
    // ICMP port unreachable comes back as ECONNREFUSED on the next send.
    let refused = wait_for(Duration::from_secs(15), || {
        udp_push(&server, "late/cam").is_some_and(|p| p["send_errors"].as_u64() > Some(0))
    });
    assert!(refused, "{:?}", udp_push(&server, "late/cam"));
    let rx = UdpSocket::bind(("127.0.0.1", port)).expect("bind the target's port");
    rx.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = [0u8; 2048];
    for _ in 0..50 {
        let n = rx.recv(&mut buf).expect("the push goes on");
        assert_eq!(n, 7 * TS);
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_multicast_push_is_read_from_its_group() {
    if !have_ffmpeg() {
        return;
    }
    let Some(ns) = Netns::new() else {
        return;
    };
    // The namespace is the test's: its ports are all free, its group reaches no one else.
    let group = "239.255.7.7:5000";
    let path = config(
        "multicast",
        &[("mc", &format!("udp://{group}?ttl=1&iface={NS_SOURCE}"))],
    );
    let prefix = ns.prefix();
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let server = TestServer::start_in(&prefix, &["--config", &path]);
    let probe = ns
        .command("ffprobe")
        .args(["-v", "error", "-rw_timeout", "10000000"])
        .args(["-read_intervals", "%+#120"])
        .args([
            "-show_entries",
            "stream=codec_name,width,height:packet=codec_type",
        ])
        .args(["-of", "csv=p=0", &format!("udp://{group}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ffprobe");
    std::thread::sleep(Duration::from_millis(500));
    let _publisher = Kill(
        ns.command("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-re"])
            .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
            .args(["-t", "30", "-c:v", "libx264", "-preset", "ultrafast"])
            .args(["-g", "25", "-bf", "0", "-pix_fmt", "yuv420p", "-c:a", "aac"])
            .args(["-f", "flv", &format!("rtmp://{}/mc/cam", server.rtmp)])
            .stdin(Stdio::null())
            .spawn()
            .expect("ffmpeg"),
    );
    let out = probe.wait_with_output().expect("ffprobe");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("h264,320,240"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let video = text.lines().filter(|l| l.starts_with("video")).count();
    assert!(video >= 25, "{video} video packets from the group:\n{text}");
    drop(server);
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn the_api_adds_and_removes_a_udp_push_of_a_live_stream() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish(&server, "live/cam", 30);
    wait_live(server.http, "live/cam");
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
    rx.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let target = format!("rtp://{}", rx.local_addr().expect("addr"));
    let push = |url: &str| {
        let body = format!(r#"{{"streams": "live/*", "url": "{url}"}}"#);
        api(server.http, "POST", "/api/v1/relays/pushes", &body)
    };
    // A bad URL is refused with the part named.
    let (status, refused) = push("udp://127.0.0.1:5000?bitrate=4M");
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("bitrate"), "{refused}");
    let (status, added) = push(&target);
    assert_eq!(status, 201, "{added}");
    let mut buf = [0u8; 2048];
    let n = rx
        .recv(&mut buf)
        .expect("the live stream is pushed at once");
    assert_eq!(n, 12 + 7 * TS, "RTP header and seven TS packets");
    assert_eq!(buf[1] & 0x7f, 33, "payload type MP2T");
    assert!(udp_push(&server, "live/cam").is_some());
    let id = added["id"].as_u64().expect("an id");
    let (status, _) = api(
        server.http,
        "DELETE",
        &format!("/api/v1/relays/pushes/{id}"),
        "",
    );
    assert_eq!(status, 200);
    // It ends at its next look at the stream (the next frame).
    let ended = wait_for(Duration::from_secs(10), || {
        udp_push(&server, "live/cam").is_none()
    });
    assert!(ended, "{:?}", udp_push(&server, "live/cam"));
}
