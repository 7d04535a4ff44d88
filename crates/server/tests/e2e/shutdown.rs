//! A graceful stop: SIGTERM ends the streams (an HTTP-FLV player reads to the end of
//! its stream, the publisher's connection is closed), silent and stuck connections are
//! dropped at `limits.shutdown_grace_ms`, and the process exits within that bound.

use crate::common::{have_ffmpeg, publish_test_pattern, TestServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn sigterm_ends_sessions_within_the_grace() {
    if !have_ffmpeg() {
        return;
    }
    let mut server = TestServer::start(&["--shutdown-grace-ms", "1500", "--workers", "2"]);
    let mut publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        60,
    );
    crate::common::wait_live(server.http, "live/cam");
    let mut player = TcpStream::connect(server.http).unwrap();
    player
        .write_all(b"GET /live/cam.flv HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    player
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = vec![0u8; 64 << 10];
    assert!(player.read(&mut buf).unwrap() > 0);
    // A player that never reads (its window fills) and a silent connection.
    let mut stuck = TcpStream::connect(server.http).unwrap();
    stuck
        .write_all(b"GET /live/cam.flv HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let _silent = TcpStream::connect(server.rtmp).unwrap();
    std::thread::sleep(Duration::from_millis(500));

    let asked = Instant::now();
    let status = server
        .terminate(Duration::from_secs(10))
        .expect("the server exits");
    let took = asked.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_millis(1500 + 2500),
        "the stop took {took:?}, past the grace"
    );
    // The player reads to the end of its stream: EOF, not a hang.
    loop {
        match player.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the player was left hanging: {e}"),
        }
    }
    // The publisher's connection was closed: ffmpeg ends.
    let deadline = Instant::now() + Duration::from_secs(5);
    while publisher.0.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "ffmpeg still publishes to a stopped server"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
