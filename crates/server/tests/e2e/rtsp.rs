//! RTSP end to end: ffmpeg publishes over RTMP and ffprobe plays over RTSP (TCP
//! interleaved); ffmpeg publishes H.264+AAC and H.265 over RTSP and the stream plays
//! back over RTSP, RTMP, HTTP-FLV and HLS; RTP over UDP both ways, silent UDP players
//! time out; configured users must authenticate; broken requests get clean answers.

use crate::common::{
    have_ffmpeg, probe_video, probe_video_over, publish_test_pattern, Kill, Rtsp, TestServer,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn publish(url: &str, format: &str, video_codec: &str, seconds: u32) -> Kill {
    publish_test_pattern(url, format, video_codec, seconds)
}

fn rtsp_url(server: &TestServer, name: &str) -> String {
    format!("rtsp://{}/live/{name}", server.rtsp.expect("rtsp listener"))
}

/// What ffprobe reads from `url` in its first `packets` packets. In packets, not
/// seconds: a player starts at the GOP cache's keyframe, and RTMP's own data message
/// at time 0 would end a time interval early.
fn probe(url: &str, packets: u32) -> (String, Vec<f64>) {
    probe_video(url, &format!("%+#{packets}"))
}

/// ffprobe sees `codec` (and AAC) and at least `min` video packets with rising times.
fn check_plays(url: &str, codec: &str, min: usize) {
    let (out, times) = probe(url, 120);
    assert!(out.contains(&format!("{codec},320,240")), "{url}: {out}");
    assert!(out.contains("aac"), "{url}: no audio in {out}");
    assert!(
        times.len() >= min,
        "{url}: only {} video packets",
        times.len()
    );
    for w in times.windows(2) {
        assert!(
            w[1] > w[0] && w[1] - w[0] < 0.5,
            "{url}: video times {} then {}",
            w[0],
            w[1]
        );
    }
}

/// Runs every check at once (each reads a couple of seconds of live media).
fn check_all(checks: Vec<(String, &'static str)>) {
    let threads: Vec<_> = checks
        .into_iter()
        .map(|(url, codec)| std::thread::spawn(move || check_plays(&url, codec, 25)))
        .collect();
    for t in threads {
        t.join().expect("a check failed");
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn rtsp_over_udp_publishes_and_plays() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--rtp-ports", "0"]);
    let _publisher = publish(&rtsp_url(&server, "u"), "rtsp-udp", "libx264", 15);
    std::thread::sleep(Duration::from_secs(2));
    let udp = rtsp_url(&server, "u");
    let over_udp = std::thread::spawn(move || {
        let (out, times) = probe_video_over(&udp, "%+#120", "udp");
        assert!(out.contains("h264,320,240"), "udp: {out}");
        assert!(out.contains("aac"), "udp: no audio in {out}");
        assert!(times.len() >= 25, "udp: only {} video packets", times.len());
        for w in times.windows(2) {
            assert!(
                w[1] > w[0] && w[1] - w[0] < 0.5,
                "udp: {} then {}",
                w[0],
                w[1]
            );
        }
    });
    check_all(vec![
        (rtsp_url(&server, "u"), "h264"),
        (format!("rtmp://{}/live/u", server.rtmp), "h264"),
    ]);
    over_udp.join().expect("UDP player");
}

/// A UDP port pair (even RTP port, RTCP on the next) for a raw RTSP client.
fn udp_pair() -> (std::net::UdpSocket, std::net::UdpSocket) {
    for _ in 0..64 {
        let rtp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let port = rtp.local_addr().expect("addr").port();
        if port & 1 == 0 {
            if let Ok(rtcp) = std::net::UdpSocket::bind(("127.0.0.1", port + 1)) {
                return (rtp, rtcp);
            }
        }
    }
    panic!("no UDP port pair");
}

/// Whether `n` datagrams arrive on `sock`, waiting at most `d` (generous: a busy
/// machine may be slow, a stopped sender sends none).
fn receives(sock: &std::net::UdpSocket, n: usize, d: Duration) -> bool {
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let end = std::time::Instant::now() + d;
    let mut got = 0;
    let mut buf = [0u8; 2048];
    while got < n && std::time::Instant::now() < end {
        if sock.recv(&mut buf).is_ok() {
            got += 1;
        }
    }
    got == n
}

/// Datagrams that arrive on `sock` within `d`.
fn datagrams(sock: &std::net::UdpSocket, d: Duration) -> usize {
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let end = std::time::Instant::now() + d;
    let mut n = 0;
    let mut buf = [0u8; 2048];
    while std::time::Instant::now() < end {
        if sock.recv(&mut buf).is_ok() {
            n += 1;
        }
    }
    n
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_silent_udp_player_times_out_and_one_sending_reports_does_not() {
    if !have_ffmpeg() {
        return;
    }
    let dir = crate::common::scratch("rtsp-timeout");
    let config = dir.join("sluice.toml");
    std::fs::write(&config, "[rtsp]\nsession_timeout_s = 2\n").expect("config");
    let server = TestServer::start(&[
        "--rtp-ports",
        "0",
        "--config",
        config.to_str().expect("utf-8"),
    ]);
    let _publisher = publish(
        &format!("rtmp://{}/live/t", server.rtmp),
        "flv",
        "libx264",
        20,
    );
    std::thread::sleep(Duration::from_secs(2));
    let addr = server.rtsp.expect("rtsp");
    let url = format!("rtsp://{addr}/live/t");
    let mut players = Vec::new();
    for _ in 0..2 {
        let (rtp, rtcp) = udp_pair();
        let port = rtp.local_addr().expect("addr").port();
        let mut c = Rtsp::connect(addr);
        assert!(c.request("DESCRIBE", &url, &[]).starts_with("RTSP/1.0 200"));
        let setup = c.request(
            "SETUP",
            &format!("{url}/trackID=0"),
            &[&format!(
                "Transport: RTP/AVP;unicast;client_port={port}-{}",
                port + 1
            )],
        );
        assert!(setup.starts_with("RTSP/1.0 200"), "{setup}");
        let server_rtcp: u16 = setup
            .split("server_port=")
            .nth(1)
            .and_then(|p| p.split(['-', ';', '\r']).nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no server_port in {setup}"));
        assert!(c.request("PLAY", &url, &[]).starts_with("RTSP/1.0 200"));
        players.push((c, rtp, rtcp, server_rtcp));
    }
    for (_, rtp, _, _) in &players {
        assert!(receives(rtp, 6, Duration::from_secs(10)), "media over UDP");
    }
    // The second one reports (any RTCP will do) every 500 ms; the first says nothing.
    let (mut silent, silent_rtp, _, _) = players.remove(0);
    let (_talker, talker_rtp, talker_rtcp, server_rtcp) = players.remove(0);
    let reporter = std::thread::spawn(move || {
        for _ in 0..10 {
            let _ = talker_rtcp.send_to(&[0x81, 201, 0, 1, 0, 0, 0, 1], ("127.0.0.1", server_rtcp));
            std::thread::sleep(Duration::from_millis(500));
        }
        talker_rtp
    });
    assert!(
        silent.closed_within(Duration::from_secs(10)),
        "silent player kept"
    );
    // What arrived before the timeout is still queued: drop it, then nothing more.
    silent_rtp.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 2048];
    while silent_rtp.recv(&mut buf).is_ok() {}
    silent_rtp.set_nonblocking(false).expect("blocking");
    assert_eq!(datagrams(&silent_rtp, Duration::from_millis(500)), 0);
    let talker_rtp = reporter.join().expect("reporter");
    assert!(
        receives(&talker_rtp, 6, Duration::from_secs(10)),
        "reporting player dropped"
    );
}

/// Whether GStreamer with the elements the tests use is here (like [`have_ffmpeg`]:
/// required where `SLUICE_REQUIRE_TOOLS=1`).
pub(crate) fn have_gstreamer() -> bool {
    const ELEMENTS: [&str; 7] = [
        "rtspsrc",
        "rtspclientsink",
        "openh264enc",
        "avdec_h264",
        "rtph264depay",
        "souphttpsrc",
        "tsdemux",
    ];
    let checks: Vec<[&str; 2]> = ELEMENTS.iter().map(|e| ["gst-inspect-1.0", e]).collect();
    let checks: Vec<&[&str]> = checks.iter().map(|c| &c[..]).collect();
    crate::common::tools_present(
        "GStreamer elements (rtspsrc, rtspclientsink, openh264enc, avdec_h264, rtph264depay, souphttpsrc, tsdemux)",
        cfg!(have_gstreamer),
        &checks,
    )
}

/// Runs a `gst-launch-1.0` pipeline to its end (at most 30 s).
pub(crate) fn gst(pipeline: &str) -> std::process::Output {
    std::process::Command::new("timeout")
        .args(["30", "gst-launch-1.0"])
        .args(pipeline.split_whitespace())
        .output()
        .expect("gst-launch-1.0")
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_gstreamer)),
    ignore = "needs ffmpeg and GStreamer"
)]
fn gstreamer_plays_over_tcp_and_udp_and_publishes() {
    if !have_ffmpeg() || !have_gstreamer() {
        return;
    }
    let server = TestServer::start(&["--rtp-ports", "0"]);
    let _publisher = publish(
        &format!("rtmp://{}/live/g", server.rtmp),
        "flv",
        "libx264",
        20,
    );
    std::thread::sleep(Duration::from_secs(2));
    let addr = server.rtsp.expect("rtsp");
    for protocols in ["tcp", "udp"] {
        // rtspsrc, depayloaded and decoded: 50 pictures reach the sink (counted from
        // its messages; how rtspsrc's shutdown at the end goes is not what is tested).
        let out = gst(&format!(
            "-v rtspsrc location=rtsp://{addr}/live/g protocols={protocols} ! rtph264depay ! h264parse ! avdec_h264 ! fakesink silent=false num-buffers=50"
        ));
        let text = String::from_utf8_lossy(&out.stdout);
        let pictures = text.matches("last-message = chain").count();
        assert!(
            pictures >= 50,
            "rtspsrc over {protocols}: {pictures} pictures; {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // rtspclientsink publishes (ANNOUNCE/RECORD); ffprobe plays it back.
    let publish_url = format!("rtsp://{addr}/live/gp");
    let pipeline = format!(
        "-q videotestsrc num-buffers=150 is-live=true ! video/x-raw,width=320,height=240,framerate=25/1 ! openh264enc gop-size=25 ! h264parse ! rtspclientsink location={publish_url} protocols=tcp"
    );
    let sink = std::thread::spawn(move || gst(&pipeline));
    std::thread::sleep(Duration::from_secs(2));
    let (streams, times) = probe(&publish_url, 40);
    assert!(streams.contains("h264,320,240"), "{streams}");
    assert!(times.len() >= 25, "{} video packets", times.len());
    let _ = sink.join();
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn configured_users_must_authenticate() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--rtsp-user", "alice:s3cret", "--rtsp-auth", "all"]);
    let addr = server.rtsp.expect("rtsp");
    // Without credentials: 401, and ffmpeg gives up.
    let mut anonymous = publish(&format!("rtsp://{addr}/live/a"), "rtsp", "libx264", 2);
    assert!(!anonymous.0.wait().expect("ffmpeg").success());
    let wrong = publish(
        &format!("rtsp://alice:nope@{addr}/live/a"),
        "rtsp",
        "libx264",
        2,
    );
    let mut wrong = wrong;
    assert!(!wrong.0.wait().expect("ffmpeg").success());
    let _publisher = publish(
        &format!("rtsp://alice:s3cret@{addr}/live/a"),
        "rtsp",
        "libx264",
        15,
    );
    std::thread::sleep(Duration::from_secs(2));
    check_plays(&format!("rtsp://alice:s3cret@{addr}/live/a"), "h264", 25);
    let refused = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-rtsp_transport", "tcp"])
        .arg(format!("rtsp://{addr}/live/a"))
        .output()
        .expect("ffprobe");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("401"), "{said}");
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn rtmp_publish_plays_over_rtsp() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish(
        &format!("rtmp://{}/live/x", server.rtmp),
        "flv",
        "libx264",
        15,
    );
    std::thread::sleep(Duration::from_secs(2));
    check_all(vec![
        (rtsp_url(&server, "x"), "h264"),
        (rtsp_url(&server, "x"), "h264"),
    ]);
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn rtsp_publish_plays_over_rtsp_rtmp_flv_and_hls() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish(&rtsp_url(&server, "y"), "rtsp", "libx264", 16);
    // HLS needs a couple of segments.
    std::thread::sleep(Duration::from_secs(5));
    check_all(vec![
        (rtsp_url(&server, "y"), "h264"),
        (format!("rtmp://{}/live/y", server.rtmp), "h264"),
        (format!("http://{}/live/y.flv", server.http), "h264"),
        (format!("http://{}/live/y.m3u8", server.http), "h264"),
    ]);
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn h265_published_over_rtsp_plays_over_rtsp_and_hls() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish(&rtsp_url(&server, "hevc"), "rtsp", "libx265", 16);
    std::thread::sleep(Duration::from_secs(5));
    check_all(vec![
        (rtsp_url(&server, "hevc"), "hevc"),
        (format!("http://{}/live/hevc.m3u8", server.http), "hevc"),
    ]);
}

/// Sends `bytes` on a fresh connection; returns everything the server answered before
/// closing or going quiet.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(Duration::from_millis(1500)))
        .expect("timeout");
    // The server may close while we still send (a huge header): not our concern.
    let _ = sock.write_all(bytes);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match sock.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

const SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
m=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/48000/2\r\n\
a=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190\r\n\
a=control:streamid=0\r\n";

#[test]
fn bad_requests_get_clean_answers_and_the_server_lives() {
    let mut server = TestServer::start(&["--play-wait-ms", "200"]);
    let addr = server.rtsp.expect("rtsp listener");

    let garbage = exchange(addr, b"\x00\x01\x02 this is not rtsp \xff\xfe\r\n\r\n");
    assert!(garbage.is_empty() || garbage.contains(" 400 "), "{garbage}");

    let mut huge = b"OPTIONS rtsp://x/ RTSP/1.0\r\nCSeq: 1\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 1 << 20));
    huge.extend_from_slice(b"\r\n\r\n");
    let answer = exchange(addr, &huge);
    assert!(!answer.contains(" 200 "), "{answer}");

    let unknown = exchange(addr, b"FROB rtsp://x/live/a RTSP/1.0\r\nCSeq: 1\r\n\r\n");
    assert!(unknown.contains("RTSP/1.0 501"), "{unknown}");

    let missing = exchange(
        addr,
        b"DESCRIBE rtsp://x/live/none RTSP/1.0\r\nCSeq: 2\r\nAccept: application/sdp\r\n\r\n",
    );
    assert!(missing.contains("RTSP/1.0 404"), "{missing}");

    // A publisher that sets up a track its SDP does not have, then sends RTP on a
    // channel it never set up.
    let announce = format!(
        "ANNOUNCE rtsp://x/live/bad RTSP/1.0\r\nCSeq: 1\r\nContent-Type: application/sdp\r\n\
         Content-Length: {}\r\n\r\n{SDP}\
         SETUP rtsp://x/live/bad/streamid=5 RTSP/1.0\r\nCSeq: 2\r\n\
         Transport: RTP/AVP/TCP;unicast;interleaved=0-1;mode=record\r\n\r\n\
         SETUP rtsp://x/live/bad/streamid=0 RTSP/1.0\r\nCSeq: 3\r\n\
         Transport: RTP/AVP/TCP;unicast;interleaved=0-1;mode=record\r\n\r\n",
        SDP.len()
    );
    let mut bytes = announce.into_bytes();
    bytes.extend_from_slice(b"$\x07\x00\x04abcd");
    let answer = exchange(addr, &bytes);
    assert!(answer.contains("CSeq: 1"), "{answer}");
    let setup_unknown = answer.split("CSeq: 2").next().unwrap_or("");
    assert!(
        setup_unknown.contains("RTSP/1.0 404"),
        "SETUP of an unknown track: {answer}"
    );
    assert!(answer.contains("CSeq: 3"), "{answer}");

    // The name is free again once that publisher is gone and its grace is over; the
    // server still answers.
    assert!(server.alive());
    let options = exchange(addr, b"OPTIONS rtsp://x/ RTSP/1.0\r\nCSeq: 9\r\n\r\n");
    assert!(options.contains("RTSP/1.0 200"), "{options}");
    assert!(options.contains("ANNOUNCE"), "{options}");
}

#[test]
fn a_live_name_cannot_be_published_twice() {
    let server = TestServer::start(&[]);
    let addr = server.rtsp.expect("rtsp listener");
    let announce = format!(
        "ANNOUNCE rtsp://x/live/dup RTSP/1.0\r\nCSeq: 1\r\nContent-Type: application/sdp\r\n\
         Content-Length: {}\r\n\r\n{SDP}",
        SDP.len()
    );
    let mut first = TcpStream::connect(addr).expect("connect");
    first.write_all(announce.as_bytes()).expect("send");
    let mut buf = [0u8; 1024];
    first
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let n = first.read(&mut buf).expect("answer");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("RTSP/1.0 200"));
    let second = exchange(addr, announce.as_bytes());
    assert!(second.contains("RTSP/1.0 455"), "{second}");
}
