//! Soak: players of every protocol connect and leave at 50 per second while the
//! publisher restarts now and then; afterwards the server's memory, descriptors,
//! sessions and streams are back at their baseline. The suite runs 60 s;
//! `scripts/soak.sh` runs the same for 30 minutes (`SLUICE_SOAK_SECS=1800`).

use crate::common::{avc_track, synthetic_clip, TestServer};
use sluice_bench::player::{Player, Protocol};
use sluice_bench::publish::publish_clip;
use sluice_bench::rtmp::RtmpConn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{timeout, Instant};

const PROTOCOLS: [Protocol; 7] = [
    Protocol::Rtmp,
    Protocol::Flv,
    Protocol::WsFlv,
    Protocol::Hls,
    Protocol::LlHls,
    Protocol::Rtsp,
    Protocol::RtspUdp,
];

#[derive(Debug, PartialEq)]
struct Figures {
    rss_kib: u64,
    fds: usize,
    clients: usize,
    streams: usize,
}

fn figures(server: &TestServer) -> Figures {
    let fds = std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .map(|d| d.count())
        .unwrap_or(0);
    let count = |path: &str, field: &str| {
        let (_, _, body) = crate::common::http_request(server.http, "GET", path, "");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("API JSON");
        v[field].as_array().map_or(0, Vec::len)
    };
    Figures {
        rss_kib: server.rss_kib(),
        fds,
        clients: count("/api/v1/clients", "clients"),
        streams: count("/api/v1/streams", "streams"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_returns_to_the_baseline() {
    let secs: u64 = std::env::var("SLUICE_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let restart_every = Duration::from_secs((secs / 3).clamp(15, 180));
    let server = TestServer::start(&[
        "--workers",
        "2",
        "--hls-segment-ms",
        "1000",
        "--publish-grace-ms",
        "2000",
        "--rtp-ports",
        "0",
    ]);
    let (rtmp, http, rtsp) = (server.rtmp, server.http, server.rtsp.expect("rtsp"));
    let end = Instant::now() + Duration::from_secs(secs);

    // The publisher, restarting every `restart_every` (players ride the grace window).
    let publishing = tokio::spawn(async move {
        let clip = synthetic_clip(&avc_track(), 4, 25, 2000);
        let mut restarts = 0u32;
        while Instant::now() < end {
            // Like an encoder, it retries while the server still sees its last run.
            let mut tries = 0;
            let mut conn = loop {
                let mut conn = RtmpConn::connect(rtmp, "live", false).await.unwrap();
                match conn.publish("soak").await {
                    Ok(()) => break conn,
                    Err(e) => {
                        tries += 1;
                        assert!(tries < 50, "the stream never came free: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
            let until = (Instant::now() + restart_every).min(end);
            publish_clip(&mut conn, &clip, until, true, None)
                .await
                .unwrap();
            conn.close().await.unwrap();
            restarts += 1;
        }
        restarts
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    // A few short blocking requests: the runtime's other thread carries on.
    let before = tokio::task::block_in_place(|| figures(&server));

    // 50 players a second, each watching 0.2-2 s, round robin over the protocols.
    let started = Arc::new(AtomicU64::new(0));
    let got_media = Arc::new(AtomicU64::new(0));
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let mut n = 0usize;
    let mut players = Vec::new();
    while Instant::now() < end {
        tick.tick().await;
        let protocol = PROTOCOLS[n % PROTOCOLS.len()];
        let watch = Duration::from_millis(200 + (n as u64 * 7919) % 1800);
        n += 1;
        let (started, got_media) = (started.clone(), got_media.clone());
        let addr = match protocol {
            Protocol::Rtmp => rtmp,
            Protocol::Rtsp | Protocol::RtspUdp => rtsp,
            _ => http,
        };
        players.push(tokio::spawn(async move {
            started.fetch_add(1, Ordering::Relaxed);
            let Ok(Ok(mut p)) = timeout(
                Duration::from_secs(3),
                Player::connect(protocol, addr, "live", "soak"),
            )
            .await
            else {
                return;
            };
            let stop = Instant::now() + watch;
            while let Ok(Ok(_)) = timeout(stop - Instant::now(), p.next_tag()).await {
                got_media.fetch_add(1, Ordering::Relaxed);
            }
        }));
        players.retain(|p| !p.is_finished());
    }
    for p in players {
        let _ = p.await;
    }
    let restarts = publishing.await.unwrap();
    // Everything leaves: the publisher's grace and the HLS viewers' idle time pass.
    tokio::time::sleep(Duration::from_secs(4)).await;
    // A few short blocking requests: the runtime's other thread carries on.
    let after = tokio::task::block_in_place(|| figures(&server));
    eprintln!(
        "soak {secs} s: {} players started, {} frames received, {restarts} publisher runs; \
         before {before:?}, after {after:?}",
        started.load(Ordering::Relaxed),
        got_media.load(Ordering::Relaxed)
    );
    assert!(got_media.load(Ordering::Relaxed) > started.load(Ordering::Relaxed));
    // Baseline: the publisher was on before; now nothing is.
    assert!(after.clients <= before.clients, "{before:?} → {after:?}");
    assert!(after.streams <= before.streams, "{before:?} → {after:?}");
    assert!(
        after.fds <= before.fds + 4,
        "descriptors leak: {before:?} → {after:?}"
    );
    assert!(
        after.rss_kib <= before.rss_kib + 48 * 1024,
        "memory grows: {before:?} → {after:?}"
    );
}
