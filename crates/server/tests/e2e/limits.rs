//! Admission limits end to end: connections per address and in all are closed at
//! accept, an address publishes at most its share of streams, the server at most its
//! number of streams; each hit is counted in `/metrics`, and a connection that ends
//! gives its place back.

use crate::common::{have_ffmpeg, http_request, metric, publish_test_pattern, TestServer};
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Whether the server closes a fresh connection to `addr` at once (a limit) rather than
/// waiting for a request.
fn refused(addr: SocketAddr) -> bool {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
        // Timed out: the connection is open and waits for a request.
        _ => false,
    }
}

/// `n` silent connections to `addr`, each accepted before the next (a probe must not
/// take one's place).
fn hold(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let held = (0..n)
        .map(|_| {
            let s = TcpStream::connect(addr).expect("connect");
            std::thread::sleep(Duration::from_millis(100));
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    held
}

#[test]
fn connections_past_a_limit_are_closed_at_accept_and_places_come_back() {
    let server = TestServer::start(&["--max-connections-per-ip", "4", "--rtsp", "off"]);
    let http = server.http;
    // Silent RTMP connections (HTTP closes a connection that sends no request soon).
    let held = hold(server.rtmp, 4);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !refused(http) {
        assert!(Instant::now() < deadline, "a fifth connection was let in");
        std::thread::sleep(Duration::from_millis(50));
    }
    // RTMP too: the limit is per address, whatever the protocol.
    assert!(refused(server.rtmp));
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    while refused(http) {
        assert!(Instant::now() < deadline, "the places never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        metric(
            http,
            "sluice_limit_hits_total{limit=\"connections_per_ip\"}"
        ) >= 2.0
    );
    assert_eq!(
        metric(http, "sluice_limit_hits_total{limit=\"connections\"}"),
        0.0
    );
}

#[test]
fn the_total_of_connections_is_bounded() {
    let server = TestServer::start(&["--max-connections", "3", "--rtsp", "off"]);
    let held = hold(server.rtmp, 3);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !refused(server.http) {
        assert!(Instant::now() < deadline, "a fourth connection was let in");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    while refused(server.http) {
        assert!(Instant::now() < deadline, "the places never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        metric(
            server.http,
            "sluice_limit_hits_total{limit=\"connections\"}"
        ) >= 1.0
    );
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn publishers_per_address_and_streams_are_bounded() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[
        "--max-publishers-per-ip",
        "1",
        "--max-streams",
        "2",
        "--webrtc-udp",
        "127.0.0.1:0",
    ]);
    let url = |name: &str| format!("rtmp://{}/live/{name}", server.rtmp);
    let _first = publish_test_pattern(&url("a"), "flv", "libx264", 20);
    crate::common::wait_live(server.http, "live/a");
    let mut second = publish_test_pattern(&url("b"), "flv", "libx264", 2);
    assert!(
        !second.0.wait().unwrap().success(),
        "a second stream from one address"
    );
    assert_eq!(
        metric(
            server.http,
            "sluice_limit_hits_total{limit=\"publishers_per_ip\"}"
        ),
        1.0
    );
    // A WHIP offer from the same address is refused at its POST (503), not after ICE
    // and DTLS, when the client would only see its session go quiet.
    let (status, _, body) = http_request(
        server.http,
        "POST",
        "/live/c/whip",
        "Content-Type: application/sdp\r\nContent-Length: 0\r\n",
    );
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("publishers_per_ip"));
    // The first publisher goes on.
    let (status, _, body) = http_request(server.http, "GET", "/api/v1/streams/live/a", "");
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("\"live\": true"));
}

/// Whether the server closed `s` by `limit` (reading and dropping what it sends).
fn closed_by(s: &mut TcpStream, limit: Instant) -> bool {
    let mut b = [0u8; 4096];
    while Instant::now() < limit {
        match s.read(&mut b) {
            Ok(0) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            _ => {}
        }
    }
    false
}

/// A start that trickles in, a byte or a request now and then, is closed at the
/// handshake timeout although it never goes idle.
#[test]
fn slow_starts_are_closed_at_the_handshake_timeout() {
    use std::io::Write;
    let server = TestServer::start(&["--handshake-timeout-ms", "1000"]);
    let rtsp = server.rtsp.expect("rtsp");
    let started = Instant::now();
    // RTMP: the handshake, one byte every 100 ms.
    let mut rtmp = TcpStream::connect(server.rtmp).unwrap();
    rtmp.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    rtmp.write_all(&[3]).unwrap();
    // RTSP: an OPTIONS every 100 ms, each answered, never a PLAY or RECORD.
    let mut options = TcpStream::connect(rtsp).unwrap();
    options
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let (mut rtmp_closed, mut rtsp_closed) = (false, false);
    let mut cseq = 0;
    while !(rtmp_closed && rtsp_closed) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still open: rtmp {rtmp_closed}, rtsp {rtsp_closed}"
        );
        cseq += 1;
        if !rtmp_closed {
            let _ = rtmp.write_all(&[0]);
            rtmp_closed = closed_by(&mut rtmp, Instant::now() + Duration::from_millis(100));
        }
        if !rtsp_closed {
            let req = format!("OPTIONS rtsp://{rtsp}/live/x RTSP/1.0\r\nCSeq: {cseq}\r\n\r\n");
            let _ = options.write_all(req.as_bytes());
            rtsp_closed = closed_by(&mut options, Instant::now() + Duration::from_millis(100));
        }
    }
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed before the timeout: {:?}",
        started.elapsed()
    );
    for protocol in ["rtmp", "rtsp"] {
        let series = format!(
            "sluice_disconnects_total{{protocol=\"{protocol}\",reason=\"handshake_timeout\"}}"
        );
        assert_eq!(metric(server.http, &series), 1.0, "{series}");
    }
}

/// A connection to `addr` from `src`, an address of the loopback range other than the
/// test's own (which the API's requests use).
fn connect_from(src: std::net::IpAddr, addr: SocketAddr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(src, 0).into()).unwrap();
    s.connect(&addr.into()).unwrap();
    s.into()
}

/// Whether a connection from `src` is closed at once (see `refused`).
fn refused_from(src: std::net::IpAddr, addr: SocketAddr) -> bool {
    let mut s = connect_from(src, addr);
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
        _ => false,
    }
}

/// A reload (the API here; SIGHUP does the same) sets new limits; what is in keeps its
/// place.
#[test]
fn a_reload_sets_new_limits() {
    let dir = crate::common::scratch("limits-reload");
    let config = dir.join("sluice.toml");
    let write = |n: usize| {
        let text = format!("[limits]\nmax_connections_per_ip = {n}\n");
        std::fs::write(&config, text).unwrap();
    };
    let src: std::net::IpAddr = [127, 0, 0, 2].into();
    write(3);
    let server = TestServer::start(&["--config", config.to_str().unwrap(), "--rtsp", "off"]);
    let held_from = |n: usize| -> Vec<TcpStream> {
        let held = (0..n)
            .map(|_| {
                let s = connect_from(src, server.rtmp);
                std::thread::sleep(Duration::from_millis(100));
                s
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        held
    };
    let held = held_from(3);
    assert!(refused_from(src, server.http));
    write(6);
    let (status, _, body) = http_request(server.http, "POST", "/api/v1/reload", "");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("limits"));
    let more = held_from(2);
    assert!(!refused_from(src, server.http), "the new limit is in force");
    // Lowered below what is in: those stay, new ones are refused.
    write(2);
    let (status, _, _) = http_request(server.http, "POST", "/api/v1/reload", "");
    assert_eq!(status, 200);
    assert!(refused_from(src, server.http));
    for mut s in held.into_iter().chain(more) {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut b = [0u8; 1];
        assert!(
            matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a connection in was closed"
        );
    }
}

/// RTP over UDP is bounded in sessions: a SETUP past the limit is answered 453 (and
/// ffmpeg, held to UDP, gives up); the place comes back when a session ends.
#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn udp_sessions_are_bounded() {
    use std::process::{Command, Stdio};
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--max-udp-sessions", "1", "--rtp-ports", "47300-47319"]);
    let rtsp = server.rtsp.expect("rtsp");
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/a", server.rtmp),
        "flv",
        "libx264",
        30,
    );
    crate::common::wait_live(server.http, "live/a");
    let url = format!("rtsp://{rtsp}/live/a");
    let probe = || {
        Command::new("ffprobe")
            .args(["-v", "error", "-rtsp_transport", "udp", "-show_streams"])
            .arg(&url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("ffprobe")
            .success()
    };
    let mut holder = crate::common::Kill(
        Command::new("ffmpeg")
            .args(["-v", "error", "-rtsp_transport", "udp", "-i"])
            .arg(&url)
            .args(["-t", "3", "-f", "null", "-"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ffmpeg"),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(server.http, "sluice_udp_sessions") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the first UDP session never set up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!probe(), "a second UDP session was let in");
    assert_eq!(
        metric(
            server.http,
            "sluice_limit_hits_total{limit=\"udp_sessions\"}"
        ),
        1.0
    );
    assert!(holder.0.wait().expect("ffmpeg").success());
    assert!(probe(), "the place came back");
}
