//! A panic inside one session ends that session only: a debug build panics when a
//! publisher of the stream `SLUICE_INJECT_PANIC` names starts (RTMP or RTSP), while
//! another stream's player keeps receiving, every worker keeps accepting, and
//! `/metrics` counts the panic.

use crate::common::{have_ffmpeg, http_request, publish_test_pattern, TestServer};
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn a_panicking_session_ends_alone() {
    if !have_ffmpeg() {
        return;
    }
    // The only test in this binary: the variable reaches no other test's server.
    std::env::set_var("SLUICE_INJECT_PANIC", "live/boom");
    let server = TestServer::start(&["--workers", "2"]);
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        30,
    );
    crate::common::wait_live(server.http, "live/cam");
    // A player of live/cam over HTTP-FLV, reading all along.
    let mut player = TcpStream::connect(server.http).unwrap();
    std::io::Write::write_all(
        &mut player,
        b"GET /live/cam.flv HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .unwrap();
    player
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0usize;
    let mut read_some = |player: &mut TcpStream| {
        let until = Instant::now() + Duration::from_millis(500);
        let mut n = 0;
        while Instant::now() < until {
            n += player.read(&mut buf).expect("the player keeps receiving");
        }
        n
    };
    got += read_some(&mut player);
    assert!(got > 0);

    // Publishers of live/boom panic, over RTMP and over RTSP, a few times (on both
    // workers, most likely).
    for _ in 0..2 {
        let mut boom = publish_test_pattern(
            &format!("rtmp://{}/live/boom", server.rtmp),
            "flv",
            "libx264",
            2,
        );
        assert!(
            !boom.0.wait().unwrap().success(),
            "the panicking publisher went on"
        );
        let mut boom = publish_test_pattern(
            &format!("rtsp://{}/live/boom", server.rtsp.expect("rtsp")),
            "rtsp",
            "libx264",
            2,
        );
        assert!(!boom.0.wait().unwrap().success());
        let before = got;
        got += read_some(&mut player);
        assert!(got > before, "the other stream's player stopped");
    }
    // Every worker still accepts: many short API requests land on both.
    for _ in 0..20 {
        assert_eq!(
            http_request(server.http, "GET", "/api/v1/server", "").0,
            200
        );
    }
    let (_, _, body) = http_request(server.http, "GET", "/metrics", "");
    let text = String::from_utf8_lossy(&body);
    let panics: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("sluice_panics_total ")?.trim().parse().ok())
        .expect("sluice_panics_total");
    assert_eq!(panics, 4.0, "{text}");
    let (status, _, body) = http_request(server.http, "GET", "/api/v1/streams/live/cam", "");
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("\"live\": true"));
}
