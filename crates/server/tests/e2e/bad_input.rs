//! Hostile or broken peers get an error or a close for their own session only: the
//! server keeps running and other players keep receiving.

use crate::common::{avc_track, frame_number, synthetic_clip, TestServer};
use sluice_bench::player::{Player, Protocol};
use sluice_bench::publish::publish_clip;
use sluice_bench::rtmp::RtmpConn;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

/// Reads until the server closes; panics if it does not within a few seconds.
async fn expect_closed(sock: &mut TcpStream, what: &str) {
    let mut buf = vec![0u8; 64 << 10];
    let closed = timeout(Duration::from_secs(5), async {
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "{what}: the server did not close the connection"
    );
}

async fn after_handshake(addr: SocketAddr) -> RtmpConn {
    let mut conn = RtmpConn::connect(addr, "live", false).await.unwrap();
    // A connect round trip completes the handshake and the connect command.
    conn.publish("probe-handshake").await.unwrap();
    conn
}

/// A basic RTMP chunk: fmt 0 on chunk stream 2 (or 3), message stream 0.
fn chunk(csid: u8, msg_type: u8, len: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![csid, 0, 0, 0];
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(msg_type);
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(payload);
    out
}

/// A publisher of `live/victim` sending `seconds` of a 25 fps clip in real time, and
/// an HTTP-FLV witness that reads it to its last frame: the frame numbers it got.
async fn witness(
    server: &TestServer,
    seconds: u32,
) -> (
    tokio::task::JoinHandle<RtmpConn>,
    tokio::task::JoinHandle<Vec<u32>>,
) {
    let clip = synthetic_clip(&avc_track(), seconds, 25, 1000);
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    publisher.publish("victim").await.unwrap();
    let until = Instant::now() + Duration::from_millis(u64::from(seconds) * 1000 + 100);
    let publishing = tokio::spawn(async move {
        publish_clip(&mut publisher, &clip, until, true, None)
            .await
            .unwrap();
        publisher
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut witness = Player::connect(Protocol::Flv, server.http, "live", "victim")
        .await
        .unwrap();
    let last = seconds * 25 - 1;
    let watching = tokio::spawn(async move {
        let mut numbers = Vec::new();
        while numbers.last() != Some(&last) {
            let tag = timeout(Duration::from_secs(10), witness.next_tag())
                .await
                .expect("in time")
                .expect("tag");
            numbers.extend(frame_number(&tag));
        }
        numbers
    });
    (publishing, watching)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_peers_only_break_their_own_session() {
    let mut server = TestServer::start(&["--merge-ms", "50"]);
    let (publishing, watching) = witness(&server, 6).await;

    // RTMP: a handshake of the wrong version.
    let mut sock = TcpStream::connect(server.rtmp).await.unwrap();
    sock.write_all(&[0x55; 1537]).await.unwrap();
    expect_closed(&mut sock, "bad handshake version").await;

    // RTMP: Set Chunk Size 0, and above 16 MiB.
    for size in [0u32, (16 << 20) + 1] {
        let mut conn = after_handshake(server.rtmp).await;
        conn.socket()
            .write_all(&chunk(2, 1, 4, &size.to_be_bytes()))
            .await
            .unwrap();
        expect_closed(conn.socket(), "bad chunk size").await;
    }

    // RTMP: a message longer than the cap.
    let mut conn = after_handshake(server.rtmp).await;
    conn.socket()
        .write_all(&chunk(3, 20, 0xff_ffff, &[0; 64]))
        .await
        .unwrap();
    expect_closed(conn.socket(), "oversized message").await;

    // RTMP: an AMF0 nesting bomb in a command.
    let mut bomb = vec![0x02, 0x00, 0x04];
    bomb.extend_from_slice(b"play");
    bomb.extend_from_slice(&[0x00, 0, 0, 0, 0, 0, 0, 0, 0]);
    bomb.extend(std::iter::repeat_n([0x03u8, 0x00, 0x01, b'a'], 1000).flatten());
    let mut conn = after_handshake(server.rtmp).await;
    let len = bomb.len() as u32;
    let mut msg = chunk(3, 20, len, &bomb[..bomb.len().min(128)]);
    for piece in bomb[128.min(bomb.len())..].chunks(128) {
        msg.push(0xc3);
        msg.extend_from_slice(piece);
    }
    conn.socket().write_all(&msg).await.unwrap();
    expect_closed(conn.socket(), "AMF nesting bomb").await;

    // HTTP: garbage, an endless header, a head that never ends in time is covered by
    // the idle timeout (not waited for here).
    let mut sock = TcpStream::connect(server.http).await.unwrap();
    sock.write_all(b"\x16\x03\x01garbage\r\n\r\n")
        .await
        .unwrap();
    expect_closed(&mut sock, "HTTP garbage").await;
    let mut sock = TcpStream::connect(server.http).await.unwrap();
    let mut huge = b"GET /live/victim.flv HTTP/1.1\r\nX-Long: ".to_vec();
    huge.resize(64 << 10, b'a');
    let _ = sock.write_all(&huge).await;
    expect_closed(&mut sock, "endless header").await;
    // A path that tries to leave the stream namespace.
    let mut sock = TcpStream::connect(server.http).await.unwrap();
    sock.write_all(b"GET /../../etc/passwd.flv HTTP/1.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    sock.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");

    let numbers = watching.await.unwrap();
    for w in numbers.windows(2) {
        assert_eq!(w[1], w[0] + 1, "the witness got every frame");
    }
    publishing.await.unwrap().close().await.unwrap();
    assert!(server.alive());
}

/// Floods on every listener at once, UDP included, while a witness plays another
/// stream: random bytes on RTMP, RTSP and HTTP; hundreds of idle and half-open
/// connections; slowloris heads; an RTMP message announced as 2 GB; endless RTSP
/// headers; datagrams at the RTP ports and at WebRTC's (random, and STUN naming
/// sessions that do not exist). The witness gets every frame, and the server's
/// memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_on_every_listener_leave_other_viewers_whole() {
    use rand::RngCore;
    let mut server = TestServer::start(&[
        "--merge-ms",
        "50",
        "--rtp-ports",
        "47100-47119",
        "--workers",
        "2",
        "--webrtc-udp",
        "127.0.0.1:0",
    ]);
    let rtsp = server.rtsp.expect("rtsp");
    let webrtc = server.webrtc.expect("webrtc");
    let (publishing, watching) = witness(&server, 8).await;
    let rss_before = server.rss_kib();

    let mut attacks = Vec::new();
    // Random bytes on every TCP listener, 30 connections each.
    for addr in [server.rtmp, rtsp, server.http] {
        for _ in 0..30 {
            attacks.push(tokio::spawn(async move {
                let mut junk = vec![0u8; 64 << 10];
                rand::rng().fill_bytes(&mut junk);
                if let Ok(mut s) = TcpStream::connect(addr).await {
                    let _ = s.write_all(&junk).await;
                    let mut b = [0u8; 1024];
                    let _ = timeout(Duration::from_secs(5), s.read(&mut b)).await;
                }
            }));
        }
    }
    // 600 idle connections (half of them having sent half a request), held a while.
    let mut idle = Vec::new();
    for i in 0..600 {
        let addr = [server.rtmp, rtsp, server.http][i % 3];
        if let Ok(mut s) = TcpStream::connect(addr).await {
            if i % 2 == 0 {
                let _ = s.write_all(b"GET /live/victim.flv HTTP/1.1\r\nHo").await;
            }
            idle.push(s);
        }
    }
    // Slowloris: a header byte every 100 ms.
    for _ in 0..50 {
        let addr = server.http;
        attacks.push(tokio::spawn(async move {
            let Ok(mut s) = TcpStream::connect(addr).await else {
                return;
            };
            let _ = s.write_all(b"GET / HTTP/1.1\r\n").await;
            for _ in 0..30 {
                if s.write_all(b"X").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    // RTMP: a message announced as 2 GB (the length field holds 16 MB at most; the
    // extended timestamp and a chunk size past the cap say the rest).
    let mut conn = after_handshake(server.rtmp).await;
    conn.socket()
        .write_all(&chunk(3, 20, 0xff_ffff, &[0; 64]))
        .await
        .unwrap();
    expect_closed(conn.socket(), "a 2 GB message").await;
    // RTSP: a header that never ends.
    let mut sock = TcpStream::connect(rtsp).await.unwrap();
    let mut endless = b"OPTIONS rtsp://h/live/x RTSP/1.0\r\nCSeq: 1\r\nX-Endless: ".to_vec();
    endless.resize(1 << 20, b'a');
    let _ = sock.write_all(&endless).await;
    expect_closed(&mut sock, "endless RTSP header").await;
    // UDP: datagrams at every RTP and RTCP port of the range, from nobody it knows.
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut junk = [0u8; 1200];
    for round in 0..200 {
        rand::rng().fill_bytes(&mut junk);
        junk[0] = 0x80;
        for port in 47100..47120u16 {
            let _ = udp.send_to(&junk, ("127.0.0.1", port)).await;
        }
        if round % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // WebRTC's port: random datagrams, and binding requests naming ufrags nobody was
    // given, from many source ports.
    for round in 0..200u32 {
        let from = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        rand::rng().fill_bytes(&mut junk);
        let _ = from.send_to(&junk, webrtc).await;
        let ufrag = format!("x{round:07}:y{round:07}");
        let mut stun = vec![0x00, 0x01, 0x00, 0x18, 0x21, 0x12, 0xa4, 0x42];
        stun.extend_from_slice(&[7; 12]);
        stun.extend_from_slice(&[0x00, 0x06, 0x00, 0x11]);
        stun.extend_from_slice(ufrag.as_bytes());
        stun.resize(20 + 0x18, 0);
        let _ = from.send_to(&stun, webrtc).await;
    }
    for a in attacks {
        let _ = a.await;
    }
    let rss_during = server.rss_kib();
    drop(idle);

    let numbers = watching.await.unwrap();
    for w in numbers.windows(2) {
        assert_eq!(w[1], w[0] + 1, "the witness got every frame");
    }
    publishing.await.unwrap().close().await.unwrap();
    assert!(server.alive());
    // Bounded: the attacks cost the server no more than a few tens of MiB.
    assert!(
        rss_during < rss_before + 64 * 1024,
        "RSS {rss_before} KiB before, {rss_during} KiB under attack"
    );
    eprintln!("RSS {rss_before} KiB before, {rss_during} KiB under attack");
}
