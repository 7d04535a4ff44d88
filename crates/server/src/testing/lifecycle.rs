//! The lifecycle of connections and streams, on the harness: attach, skip, the grace
//! window, kicks, shutdown and the handshake bound, each on tokio's paused clock.

use super::rtmp::{frame_times, RtmpClient, Video, FRAME_MS};
use super::{run, Worker};
use crate::config::Config;
use sluice_rtmp::ClientEvent;
use std::time::Duration;
use tokio::time::{timeout, Instant};

/// Every wait is bounded by this much virtual time (no real time passes).
const T: Duration = Duration::from_secs(60);

/// A publisher of `live/<name>`, accepted.
async fn publisher(worker: &Worker, name: &str) -> RtmpClient {
    let mut p = worker.rtmp(usize::MAX).expect("admitted");
    assert!(timeout(T, p.publish(name)).await.expect("answered"));
    p
}

/// A player of `live/<name>`, started; the server may write it `window` unread bytes.
async fn player(worker: &Worker, name: &str, window: usize) -> RtmpClient {
    let mut p = worker.rtmp(window).expect("admitted");
    assert!(timeout(T, p.play(name)).await.expect("answered"));
    p
}

fn unpublished(e: &ClientEvent) -> bool {
    matches!(e, ClientEvent::Status { code, .. } if code == "NetStream.Play.UnpublishNotify")
}

/// Every frame, in order, from a keyframe on, after the sequence header.
fn assert_every_frame_from(got: &[Video], from: i64, to: i64) {
    assert_eq!(got.first(), Some(&Video::Config), "{got:?}");
    assert_eq!(
        got.get(1),
        Some(&Video::Frame {
            ts: from,
            key: true
        })
    );
    let want: Vec<i64> = (from..=to).step_by(FRAME_MS as usize).collect();
    assert_eq!(frame_times(got), want);
}

#[test]
fn players_attach_and_get_every_frame_in_order() {
    run(|| async {
        let worker = Worker::new(Config::default());
        let mut publisher = publisher(&worker, "cam").await;
        publisher.frames(0, 960).await;
        // Both start at the newest keyframe (0), the GOP cache.
        let mut a = player(&worker, "cam", usize::MAX).await;
        let mut b = player(&worker, "cam", usize::MAX).await;
        let publishing = tokio::task::spawn_local(async move {
            publisher.frames(1000, 3000).await;
            publisher
        });
        let got_a = timeout(T, a.video_until(3000)).await.expect("a got to 3 s");
        let got_b = timeout(T, b.video_until(3000)).await.expect("b got to 3 s");
        assert_every_frame_from(&got_a, 0, 3000);
        assert_every_frame_from(&got_b, 0, 3000);
        drop(publishing.await);
        assert_eq!(worker.ctx.clients().len(), 2 + 1);
    });
}

#[test]
fn a_player_that_does_not_read_skips_to_a_newer_keyframe_while_another_plays_on() {
    run(|| async {
        let mut config = Config::default();
        config.players.max_lag_ms = 500;
        config.players.max_skips = 1000;
        let worker = Worker::new(config);
        let mut publisher = publisher(&worker, "cam").await;
        publisher.frames(0, 0).await;
        let mut fast = player(&worker, "cam", usize::MAX).await;
        // 8 frames fit its window: it fills within the first second.
        let mut slow = player(&worker, "cam", 8 << 10).await;
        let publishing = tokio::task::spawn_local(async move {
            publisher.frames(FRAME_MS, 5000).await;
            publisher
        });
        let got = timeout(T, fast.video_until(5000)).await.expect("fast");
        assert_every_frame_from(&got, 0, 5000);
        let got = timeout(T, slow.video_until(5000)).await.expect("slow");
        let times = frame_times(&got);
        let jump = times.windows(2).find(|w| w[1] - w[0] > 500);
        let Some(&[before, after]) = jump else {
            panic!("no skip past the lag bound: {times:?}");
        };
        assert_eq!(
            after % 1000,
            0,
            "skipped from {before} to a keyframe: {after}"
        );
        assert!(
            worker.ctx.hub().streams()[0]
                .skips
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
        );
        drop(publishing.await);
    });
}

#[test]
fn a_player_past_its_skips_is_closed_as_too_slow() {
    run(|| async {
        let mut config = Config::default();
        config.players.max_lag_ms = 500;
        config.players.max_skips = 0;
        let worker = Worker::new(config);
        let mut publisher = publisher(&worker, "cam").await;
        publisher.frames(0, 0).await;
        let mut slow = player(&worker, "cam", 8 << 10).await;
        let mut fast = player(&worker, "cam", usize::MAX).await;
        let publishing = tokio::task::spawn_local(async move {
            publisher.frames(FRAME_MS, 3000).await;
            publisher
        });
        let got = timeout(T, fast.video_until(3000)).await.expect("fast");
        assert_every_frame_from(&got, 0, 3000);
        // The slow one is closed: it reads what was written, then the end.
        timeout(T, slow.until_closed()).await.expect("closed");
        assert_eq!(worker.ended("rtmp", "too_slow"), 1);
        drop(publishing.await);
    });
}

#[test]
fn a_publisher_back_within_the_grace_window_keeps_its_players_and_one_gone_ends_the_stream() {
    run(|| async {
        let mut config = Config::default();
        config.limits.publish_grace_ms = 2000;
        let worker = Worker::new(config);
        let mut first = publisher(&worker, "cam").await;
        first.frames(0, 0).await;
        let mut viewer = player(&worker, "cam", usize::MAX).await;
        first.frames(FRAME_MS, 1000).await;
        timeout(T, viewer.video_until(1000))
            .await
            .expect("first part");
        drop(first);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Back within the window, its timestamps from 0 again.
        let mut second = publisher(&worker, "cam").await;
        second.frames(0, 1000).await;
        let mut events = Vec::new();
        let got = timeout(T, async {
            loop {
                let e = viewer.next().await.expect("still playing");
                let done =
                    matches!(&e, ClientEvent::Video { timestamp_ms, .. } if *timestamp_ms >= 2000);
                events.push(e);
                if done {
                    break;
                }
            }
        })
        .await;
        assert!(got.is_ok(), "the player got the second publisher's frames");
        assert!(!events.iter().any(unpublished), "{events:?}");
        // Gone for good: the stream ends when the window does.
        second.close_stream();
        let left = Instant::now();
        let events = timeout(T, viewer.until_closed()).await.expect("the end");
        let ended = left.elapsed();
        assert!(events.iter().any(unpublished), "{events:?}");
        assert!(
            ended >= Duration::from_millis(2000) && ended < Duration::from_millis(2500),
            "ended {ended:?} after the publisher left"
        );
        assert_eq!(worker.ctx.hub().streams().len(), 0);
    });
}

#[test]
fn a_kick_ends_a_connection_and_is_counted() {
    run(|| async {
        let worker = Worker::new(Config::default());
        let mut publisher = publisher(&worker, "cam").await;
        publisher.frames(0, 0).await;
        let mut viewer = player(&worker, "cam", usize::MAX).await;
        assert!(worker.ctx.ops().kick(viewer.id).await);
        timeout(T, viewer.until_closed()).await.expect("kicked");
        assert_eq!(worker.ended("rtmp", "kicked"), 1);
        assert_eq!(worker.ctx.ops().kick_publishers("live/cam").await, 1);
        timeout(T, publisher.until_closed()).await.expect("kicked");
        assert_eq!(worker.ended("rtmp", "kicked"), 2);
        assert!(!worker.ctx.ops().kick(viewer.id).await, "gone already");
    });
}

#[test]
fn shutdown_ends_streams_and_connections_within_the_grace() {
    run(|| async {
        let worker = Worker::new(Config::default());
        let mut publisher = publisher(&worker, "cam").await;
        publisher.frames(0, 0).await;
        let mut viewer = player(&worker, "cam", usize::MAX).await;
        let stuck = player(&worker, "cam", usize::MAX).await;
        stuck.peer().set_window(0);
        let silent = worker.rtmp(usize::MAX).expect("admitted");
        // Its task registers it when it first runs (a connection accepted in the same
        // turn as the shutdown is not kicked: the listeners are stopped first).
        tokio::time::sleep(Duration::from_millis(10)).await;
        let asked = Instant::now();
        crate::server::wind_down(&worker.ctx).await;
        let took = asked.elapsed();
        let grace = Duration::from_millis(worker.ctx.config().limits.shutdown_grace_ms);
        assert!(took <= grace, "{took:?}");
        assert_eq!(worker.ctx.clients().len(), 0, "after {took:?}");
        let events = timeout(T, viewer.until_closed()).await.expect("the end");
        assert!(events.iter().any(unpublished), "{events:?}");
        timeout(T, publisher.until_closed()).await.expect("closed");
        drop((stuck, silent));
    });
}

/// A start that trickles in, a byte every 100 ms, never idle, is closed at the
/// handshake timeout (moved here from the end-to-end `limits`).
#[test]
fn a_slow_start_is_closed_at_the_handshake_timeout() {
    run(|| async {
        let mut config = Config::default();
        config.limits.handshake_timeout_ms = 1000;
        let worker = Worker::new(config);
        let conn = worker.rtmp(usize::MAX).expect("admitted");
        let started = Instant::now();
        conn.peer().send(&[3]);
        let closed = timeout(T, async {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                conn.peer().send(&[0]);
                if worker.ctx.clients().len() == 0 {
                    return started.elapsed();
                }
            }
        })
        .await
        .expect("closed");
        assert!(
            closed >= Duration::from_millis(1000) && closed <= Duration::from_millis(1100),
            "closed after {closed:?}"
        );
        assert_eq!(worker.ended("rtmp", "handshake_timeout"), 1);
    });
}

/// Players that vanish without a FIN (they stop reading and never close, as a peer
/// whose network went away looks from here), one HTTP-FLV and one RTMP, are closed as
/// too slow within the lag bound and the skips allowed, while a witness of the same
/// stream gets every frame (moved here from the end-to-end `bad_input`).
#[test]
fn players_that_vanish_are_closed_as_too_slow_and_a_witness_gets_every_frame() {
    run(|| async {
        let mut config = Config::default();
        config.players.merge_ms = 50;
        config.players.max_lag_ms = 500;
        config.players.max_skips = 1;
        let worker = Worker::new(config);
        let mut publisher = publisher(&worker, "victim").await;
        publisher.frames(0, 0).await;
        let mut witness = player(&worker, "victim", usize::MAX).await;
        let mut flv = super::http::FlvPlayer::get(worker.http(4096).expect("admitted"), "victim");
        assert_eq!(
            timeout(T, flv.next_video()).await.expect("a tag"),
            Some(Video::Config)
        );
        assert_eq!(flv.status, Some(200));
        let rtmp = player(&worker, "victim", 4096).await;
        // Neither reads again.
        let publishing = tokio::task::spawn_local(async move {
            publisher.frames(FRAME_MS, 8000).await;
            publisher
        });
        let got = timeout(T, witness.video_until(8000))
            .await
            .expect("the witness");
        assert_every_frame_from(&got, 0, 8000);
        drop(publishing.await);
        assert_eq!(worker.ended("http", "too_slow"), 1);
        assert_eq!(worker.ended("rtmp", "too_slow"), 1);
        drop((flv, rtmp));
    });
}

/// An HTTP connection that sends no request is closed at the idle timeout: the
/// session's own timer, read on tokio's clock (`driver::now`).
#[test]
fn a_silent_http_connection_is_closed_at_the_idle_timeout() {
    run(|| async {
        let mut config = Config::default();
        config.limits.idle_timeout_ms = 1000;
        let worker = Worker::new(config);
        let peer = worker.http(usize::MAX).expect("admitted");
        let started = Instant::now();
        timeout(T, peer.recv()).await.expect("closed");
        let closed = started.elapsed();
        assert!(
            closed >= Duration::from_millis(1000) && closed <= Duration::from_millis(1100),
            "closed after {closed:?}"
        );
        assert_eq!(worker.ctx.clients().len(), 0);
    });
}

#[test]
fn a_reload_changes_what_new_streams_get_and_live_ones_keep_theirs() {
    use crate::config::AppConfig;
    use crate::hls::HlsStream;
    run(|| async {
        let mut config = Config::default();
        config.apps.push(AppConfig {
            name: "live".into(),
            hls: Some(false),
            merge_ms: Some(0),
            ..AppConfig::default()
        });
        let mut fresh = config.clone();
        fresh.apps[0].hls = Some(true);
        fresh.apps[0].merge_ms = Some(50);
        let worker = Worker::new(config);
        let _a = publisher(&worker, "a").await;
        let ops = worker.ctx.ops();
        ops.set_source(Box::new(move || Ok(fresh.clone())));
        let reloaded = ops.reload(worker.ctx.config()).expect("reloaded");
        assert!(reloaded.done.contains(&"new_streams"), "{reloaded:?}");
        assert_eq!(reloaded.restart, Vec::<String>::new());
        let _b = publisher(&worker, "b").await;
        let hub = worker.ctx.hub();
        let (a, b) = (hub.find("live/a").unwrap(), hub.find("live/b").unwrap());
        assert!(
            a.tap::<HlsStream>().is_none(),
            "a live stream keeps its HLS off"
        );
        assert!(
            b.tap::<HlsStream>().is_some(),
            "a new one gets the reloaded entry's"
        );
        assert_eq!(
            (a.merge, b.merge),
            (Duration::ZERO, Duration::from_millis(50))
        );
    });
}

#[test]
fn an_rtsp_player_gets_every_frame_from_the_gop_cache_on_and_ends_with_the_stream() {
    run(|| async {
        let worker = Worker::new(Config::default());
        let mut publisher = publisher(&worker, "cam").await;
        publisher.frames(0, 960).await;
        let mut player = worker.rtsp("live/cam", usize::MAX).expect("admitted");
        assert!(timeout(T, player.play()).await.expect("answered"), "plays");
        let publishing = tokio::task::spawn_local(async move {
            publisher.frames(1000, 3000).await;
            publisher.close_stream();
            publisher
        });
        // A frame's last packet carries the marker: one per frame, 90 kHz apart by
        // 40 ms, from the keyframe at 0 to 3 s.
        let mut frames = Vec::new();
        while frames.len() < 76 {
            let rtp = timeout(T, player.next_rtp()).await.expect("in time");
            let rtp = rtp.expect("frames until 3 s");
            if rtp.marker {
                frames.push(rtp.timestamp);
            }
        }
        let steps: Vec<u32> = frames.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(steps.iter().all(|&s| s == 3600), "{steps:?}");
        let _publisher = publishing.await.expect("published");
        // The stream ends (no grace by default): the player's connection is closed.
        while timeout(T, player.next_rtp())
            .await
            .expect("closed")
            .is_some()
        {}
        // Told as the end of what it played: the adapter closes, no error.
        let ended = worker.ctx.clients().ended();
        assert_eq!(worker.ended("rtsp", "closed"), 1, "{ended:?}");
    });
}

#[test]
fn an_rtsp_connection_that_neither_plays_nor_publishes_is_closed_at_the_handshake_bound() {
    run(|| async {
        let mut config = Config::default();
        config.limits.handshake_timeout_ms = 5_000;
        let worker = Worker::new(config);
        let mut client = worker.rtsp("live/none", usize::MAX).expect("admitted");
        // Answering requests is no start: the bound runs from the connection on.
        let start = Instant::now();
        assert!(timeout(T, client.options()).await.expect("answered"));
        let end = timeout(T, client.next()).await;
        assert!(matches!(end, Ok(None)), "closed: {end:?}");
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
            "{waited:?}"
        );
        assert_eq!(worker.ended("rtsp", "handshake_timeout"), 1);
    });
}
