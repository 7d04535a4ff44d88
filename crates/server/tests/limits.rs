//! Admission limits end to end: connections per address and in all are closed at
//! accept, an address publishes at most its share of streams, the server at most its
//! number of streams; each hit is counted in `/metrics`, and a connection that ends
//! gives its place back.

mod common;

use common::{have_ffmpeg, http_request, publish_test_pattern, TestServer};
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

fn metric(addr: SocketAddr, series: &str) -> f64 {
    let (_, _, body) = http_request(addr, "GET", "/metrics", "");
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
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
    let server = TestServer::start(&["--max-publishers-per-ip", "1", "--max-streams", "2"]);
    let url = |name: &str| format!("rtmp://{}/live/{name}", server.rtmp);
    let _first = publish_test_pattern(&url("a"), "flv", "libx264", 20);
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_request(server.http, "GET", "/api/v1/streams/live/a", "").0 != 200 {
        assert!(Instant::now() < deadline, "live/a never appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
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
    // The first publisher goes on.
    let (status, _, body) = http_request(server.http, "GET", "/api/v1/streams/live/a", "");
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("\"live\": true"));
}
