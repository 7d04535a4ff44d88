//! Many players at once, and a slow one that must not hurt them.

use crate::common::{avc_track, frame_number, synthetic_clip, TestServer};
use sluice_bench::player::{Player, Protocol};
use sluice_bench::publish::publish_clip;
use sluice_bench::rtmp::RtmpConn;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_players_get_every_frame_while_a_slow_one_is_dropped() {
    let mut server = TestServer::start(&[
        "--workers",
        "2",
        "--merge-ms",
        "100",
        // Generous for the 200 players on a busy machine; the slow one, which reads
        // nothing, is still two skips (~4 s) from being dropped.
        "--player-max-lag-ms",
        "2000",
        "--player-max-skips",
        "1",
        "--player-send-buffer",
        "65536",
    ]);
    let idle_rss = server.rss_kib();
    // 8 s of 25 fps, 8 KB frames (1.6 Mbit/s), a keyframe every second.
    let clip = synthetic_clip(&avc_track(), 8, 25, 8000);
    let last_frame = 8 * 25 - 1;
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    publisher.publish("load").await.unwrap();
    let publishing = tokio::spawn(async move {
        publish_clip(
            &mut publisher,
            &clip,
            Instant::now() + Duration::from_millis(8100),
            true,
            None,
        )
        .await
        .unwrap();
        publisher
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A player that reads nothing, with a small receive buffer so the server sees it.
    let slow = tokio::spawn({
        let addr = server.http;
        async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(8192).unwrap();
            let mut sock = socket.connect(addr).await.unwrap();
            sock.write_all(b"GET /live/load.flv HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(6500)).await;
            let started = Instant::now();
            let mut total = 0usize;
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match timeout(Duration::from_secs(5), sock.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => total += n,
                    Err(_) => panic!("the slow player was never disconnected"),
                }
            }
            (total, started.elapsed())
        }
    });

    let mut players = Vec::new();
    for i in 0..200 {
        let (protocol, addr) = match i % 3 {
            0 => (Protocol::Rtmp, server.rtmp),
            1 => (Protocol::Flv, server.http),
            _ => (Protocol::WsFlv, server.http),
        };
        let mut player = Player::connect(protocol, addr, "live", "load")
            .await
            .unwrap();
        players.push(tokio::spawn(async move {
            let mut numbers = Vec::new();
            loop {
                let tag = timeout(Duration::from_secs(10), player.next_tag())
                    .await
                    .expect("tag in time")
                    .expect("tag");
                if let Some(n) = frame_number(&tag) {
                    numbers.push(n);
                    if n == last_frame {
                        return (protocol, numbers);
                    }
                }
            }
        }));
    }
    let mut loaded_rss = 0;
    for (i, p) in players.into_iter().enumerate() {
        let (protocol, numbers) = p.await.unwrap();
        assert_eq!(
            numbers[0] % 25,
            0,
            "player {i} ({protocol:?}) starts on a keyframe"
        );
        for w in numbers.windows(2) {
            assert_eq!(w[1], w[0] + 1, "player {i} ({protocol:?}) got every frame");
        }
        if i == 0 {
            loaded_rss = server.rss_kib();
        }
    }
    let (slow_bytes, slow_wait) = slow.await.unwrap();
    // 8 s of this stream is about 1.6 MB; the slow player was cut off long before.
    assert!(slow_bytes < 1_000_000, "slow player got {slow_bytes} bytes");
    assert!(
        slow_wait < Duration::from_secs(3),
        "slow player closed while the stream ran"
    );
    publishing.await.unwrap().close().await.unwrap();
    assert!(server.alive());
    // 200 players and a 10 s ring of a 1.6 Mbit/s stream: far below this.
    assert!(
        loaded_rss < idle_rss + 64 * 1024,
        "RSS grew from {idle_rss} KiB to {loaded_rss} KiB"
    );
}
