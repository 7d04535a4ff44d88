//! Publisher policies end to end with ffmpeg as the publisher: a second publisher is
//! refused, or takes the stream over (the first is disconnected); a stream without
//! viewers for `no_viewers_s` loses its publisher, one with a player keeps it.

use crate::common::{have_ffmpeg, publish_test_pattern, Kill, TestServer};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, _, body) = crate::common::http_request(addr, "GET", path, "");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Waits up to `within` for `ok`.
fn eventually(within: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn exited(p: &mut Kill) -> bool {
    p.0.try_wait().expect("ffmpeg status").is_some()
}

/// The stream's publisher's client id, once it has frames.
fn publisher(http: SocketAddr) -> Option<u64> {
    let (status, s) = get_json(http, "/api/v1/streams/live/cam");
    (status == 200 && s["frames_in"].as_u64() > Some(10))
        .then(|| s["publisher"]["client"].as_u64())
        .flatten()
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn a_second_publisher_is_refused_or_takes_over() {
    if !have_ffmpeg() {
        return;
    }
    for takeover in [false, true] {
        let policy = if takeover { "takeover" } else { "reject" };
        let server = TestServer::start(&["--second-publisher", policy]);
        let url = format!("rtmp://{}/live/cam", server.rtmp);
        let mut first = publish_test_pattern(&url, "flv", "libx264", 30);
        let mut id = None;
        eventually(Duration::from_secs(10), "the first publisher", || {
            id = publisher(server.http);
            id.is_some()
        });
        let mut second = publish_test_pattern(&url, "flv", "libx264", 30);
        if takeover {
            eventually(
                Duration::from_secs(10),
                "the first publisher disconnected",
                || exited(&mut first),
            );
            eventually(
                Duration::from_secs(10),
                "the second publisher publishing",
                || publisher(server.http).is_some_and(|now| Some(now) != id),
            );
            assert!(
                !exited(&mut second),
                "{policy}: the second one publishes on"
            );
        } else {
            eventually(
                Duration::from_secs(10),
                "the second publisher refused",
                || exited(&mut second),
            );
            assert!(!exited(&mut first), "{policy}: the first one publishes on");
            assert_eq!(publisher(server.http), id);
        }
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn a_publisher_without_viewers_is_disconnected() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--publisher-no-viewers-s", "2"]);
    let url = format!("rtmp://{}/live/cam", server.rtmp);
    let mut ffmpeg = publish_test_pattern(&url, "flv", "libx264", 30);
    // A player from the start keeps it on past the limit.
    let mut player = None;
    eventually(Duration::from_secs(10), "a player", || {
        let Ok(mut sock) = TcpStream::connect(server.http) else {
            return false;
        };
        write!(sock, "GET /live/cam.flv HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
        sock.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut head = [0u8; 12];
        let ok = sock.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200");
        if ok {
            player = Some(sock);
        }
        ok
    });
    let mut sock = player.expect("player");
    let mut buf = vec![0u8; 64 << 10];
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let _ = sock.read(&mut buf);
    }
    assert!(
        !exited(&mut ffmpeg),
        "a stream with a player keeps its publisher"
    );
    drop(sock);
    eventually(Duration::from_secs(8), "the publisher disconnected", || {
        exited(&mut ffmpeg)
    });
}
