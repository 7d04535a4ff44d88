//! RTMP publish; RTMP, HTTP-FLV and WebSocket-FLV play, with our own clients.

use crate::common::{avc_track, frame_number, hevc_track, synthetic_clip, TestServer};
use sluice_bench::player::{Player, Protocol};
use sluice_bench::publish::publish_clip;
use sluice_bench::rtmp::RtmpConn;
use sluice_bench::{ClientError, Tag};
use sluice_media::flv::{self, VideoTag, TAG_AUDIO, TAG_SCRIPT, TAG_VIDEO};
use sluice_media::{TrackConfig, VideoCodec};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout, Instant};

const T: Duration = Duration::from_secs(20);

/// Reads tags until the video frame numbered `last`, returning them all.
async fn collect_until(player: &mut Player, last: u32) -> Vec<Tag> {
    let mut tags = Vec::new();
    loop {
        let tag = timeout(T, player.next_tag())
            .await
            .expect("tag in time")
            .expect("tag");
        let done = frame_number(&tag) == Some(last);
        tags.push(tag);
        if done {
            return tags;
        }
    }
}

/// Checks what every player must see: script data, then both sequence headers, then
/// a keyframe, then every video frame in order with rising timestamps.
fn check_start_and_order(tags: &[Tag], protocol: Protocol) {
    let first_frame = tags
        .iter()
        .position(|t| t.is_video_frame())
        .expect("a frame");
    let head: Vec<u8> = tags[..first_frame].iter().map(|t| t.tag_type).collect();
    assert!(
        head.contains(&TAG_SCRIPT),
        "{protocol:?}: metadata first: {head:?}"
    );
    assert!(
        head.contains(&TAG_VIDEO),
        "{protocol:?}: video config first: {head:?}"
    );
    assert!(
        head.contains(&TAG_AUDIO),
        "{protocol:?}: audio config first: {head:?}"
    );
    assert!(
        tags[first_frame].is_keyframe(),
        "{protocol:?}: starts on a keyframe"
    );
    let numbers: Vec<u32> = tags.iter().filter_map(frame_number).collect();
    for w in numbers.windows(2) {
        assert_eq!(
            w[1],
            w[0] + 1,
            "{protocol:?}: frames in order, none missing"
        );
    }
    let ts: Vec<i64> = tags
        .iter()
        .filter(|t| t.is_video_frame())
        .map(|t| t.ts_ms)
        .collect();
    assert!(
        ts.windows(2).all(|w| w[1] > w[0]),
        "{protocol:?}: rising timestamps"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_of_every_protocol_get_gop_then_every_frame() {
    let server = TestServer::start(&["--workers", "2"]);
    let clip = synthetic_clip(&avc_track(), 4, 25, 2000);
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    publisher.publish("cam1?token=abc").await.unwrap();
    let publishing = tokio::spawn(async move {
        publish_clip(
            &mut publisher,
            &clip,
            Instant::now() + Duration::from_millis(4200),
            true,
            None,
        )
        .await
        .unwrap();
        publisher
    });
    // Join after the second GOP began, so the players start from the GOP cache.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut players = Vec::new();
    for protocol in [Protocol::Rtmp, Protocol::Flv, Protocol::WsFlv] {
        let addr = if protocol == Protocol::Rtmp {
            server.rtmp
        } else {
            server.http
        };
        let player = Player::connect(protocol, addr, "live", "cam1")
            .await
            .unwrap();
        players.push((protocol, player));
    }
    for (protocol, player) in &mut players {
        let tags = collect_until(player, 99).await;
        check_start_and_order(&tags, *protocol);
        let first = tags.iter().find_map(frame_number).unwrap();
        assert_eq!(first, 25, "{protocol:?}: joined at the GOP cache");
    }
    publishing.await.unwrap().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_handshake_and_low_latency_mode() {
    let server = TestServer::start(&["--merge-ms", "0"]);
    let clip = synthetic_clip(&avc_track(), 2, 25, 500);
    let mut publisher = RtmpConn::connect(server.rtmp, "live", true).await.unwrap();
    publisher.publish("digest").await.unwrap();
    publish_clip(
        &mut publisher,
        &clip,
        Instant::now() + Duration::from_millis(100),
        false,
        Some(1),
    )
    .await
    .unwrap();
    let mut player = Player::connect(Protocol::Rtmp, server.rtmp, "live", "digest")
        .await
        .unwrap();
    let tags = collect_until(&mut player, 49).await;
    check_start_and_order(&tags, Protocol::Rtmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_publisher_is_refused() {
    let server = TestServer::start(&[]);
    let mut first = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    first.publish("taken").await.unwrap();
    let mut second = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    match second.publish("taken").await {
        Err(ClientError::Refused(why)) => assert!(why.contains("BadName"), "{why}"),
        other => panic!("second publisher not refused: {:?}", other.err()),
    }
    // The first one is unaffected.
    let mut player = Player::connect(Protocol::Flv, server.http, "live", "taken")
        .await
        .unwrap();
    let clip = synthetic_clip(&avc_track(), 1, 25, 100);
    publish_clip(
        &mut first,
        &clip,
        Instant::now() + Duration::from_secs(1),
        false,
        Some(1),
    )
    .await
    .unwrap();
    collect_until(&mut player, 24).await;
}

async fn http(addr: std::net::SocketAddr, request: &str) -> String {
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = timeout(Duration::from_secs(5), sock.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_are_not_live_are_not_found() {
    let server = TestServer::start(&["--play-wait-ms", "300"]);
    let started = Instant::now();
    match Player::connect(Protocol::Rtmp, server.rtmp, "live", "nobody").await {
        Err(ClientError::Refused(why)) => assert!(why.contains("StreamNotFound"), "{why}"),
        other => panic!("play of a missing stream: {:?}", other.err()),
    }
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited for a publisher first"
    );
    match Player::connect(Protocol::Flv, server.http, "live", "nobody").await {
        Err(ClientError::Refused(status)) => assert!(status.contains("404"), "{status}"),
        other => panic!("HTTP-FLV of a missing stream: {:?}", other.err()),
    }
    let head = http(
        server.http,
        "HEAD /live/nobody.flv HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    publisher.publish("nobody").await.unwrap();
    let head = http(
        server.http,
        "HEAD /live/nobody.flv HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("Access-Control-Allow-Origin: *"), "{head}");
    let other = http(
        server.http,
        "GET /nothing/here HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_survive_a_publisher_that_comes_back() {
    let server = TestServer::start(&["--publish-grace-ms", "5000", "--merge-ms", "50"]);
    let clip = synthetic_clip(&avc_track(), 2, 25, 300);
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    publisher.publish("flaky").await.unwrap();
    let first_run = tokio::spawn(async move {
        publish_clip(
            &mut publisher,
            &clip,
            Instant::now() + Duration::from_millis(1500),
            true,
            None,
        )
        .await
        .unwrap();
        publisher.close().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut rtmp = Player::connect(Protocol::Rtmp, server.rtmp, "live", "flaky")
        .await
        .unwrap();
    let mut flv = Player::connect(Protocol::Flv, server.http, "live", "flaky")
        .await
        .unwrap();
    first_run.await.unwrap();
    let clip = synthetic_clip(&avc_track(), 2, 25, 300);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The same clip again: its timestamps restart at 0, the players' must not.
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    publisher.publish("flaky").await.unwrap();
    let again = tokio::spawn(async move {
        publish_clip(
            &mut publisher,
            &clip,
            Instant::now() + Duration::from_millis(1500),
            true,
            None,
        )
        .await
        .unwrap();
        publisher
    });
    for (name, player) in [("rtmp", &mut rtmp), ("flv", &mut flv)] {
        let mut last_ts = -1;
        let mut frames_after_return = 0;
        let mut seen_restart = false;
        while frames_after_return < 20 {
            let tag = timeout(T, player.next_tag())
                .await
                .expect("in time")
                .expect("tag");
            if !tag.is_video_frame() {
                continue;
            }
            assert!(
                tag.ts_ms > last_ts,
                "{name}: timestamps continue: {} after {last_ts}",
                tag.ts_ms
            );
            if last_ts >= 0 && frame_number(&tag) == Some(0) {
                assert!(
                    tag.ts_ms - last_ts <= 200,
                    "{name}: no gap in the timeline: {} after {last_ts}",
                    tag.ts_ms
                );
                seen_restart = true;
            }
            if seen_restart {
                frames_after_return += 1;
            }
            last_ts = tag.ts_ms;
        }
    }
    again.await.unwrap().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_are_told_when_the_stream_ends() {
    let server = TestServer::start(&["--publish-grace-ms", "300"]);
    let clip = synthetic_clip(&avc_track(), 1, 25, 300);
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
    publisher.publish("ending").await.unwrap();
    publish_clip(
        &mut publisher,
        &clip,
        Instant::now() + Duration::from_millis(100),
        false,
        Some(1),
    )
    .await
    .unwrap();
    let mut rtmp = Player::connect(Protocol::Rtmp, server.rtmp, "live", "ending")
        .await
        .unwrap();
    let mut flv = Player::connect(Protocol::Flv, server.http, "live", "ending")
        .await
        .unwrap();
    publisher.close().await.unwrap();
    for player in [&mut rtmp, &mut flv] {
        let end = timeout(Duration::from_secs(5), async {
            loop {
                if let Err(e) = player.next_tag().await {
                    return e;
                }
            }
        })
        .await
        .expect("player closed after the grace window");
        assert!(
            matches!(end, ClientError::Closed | ClientError::Io(_)),
            "{end}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hevc_in_legacy_and_enhanced_form_reaches_players_in_the_same_form() {
    let server = TestServer::start(&["--merge-ms", "0"]);
    for legacy in [true, false] {
        let name = if legacy { "hevc12" } else { "hvc1" };
        let track = hevc_track(legacy);
        let clip = synthetic_clip(&track, 1, 25, 400);
        let mut publisher = RtmpConn::connect(server.rtmp, "live", false).await.unwrap();
        publisher.publish(name).await.unwrap();
        publish_clip(
            &mut publisher,
            &clip,
            Instant::now() + Duration::from_millis(50),
            false,
            Some(1),
        )
        .await
        .unwrap();
        for protocol in [Protocol::Rtmp, Protocol::Flv] {
            let addr = if protocol == Protocol::Rtmp {
                server.rtmp
            } else {
                server.http
            };
            let mut player = Player::connect(protocol, addr, "live", name).await.unwrap();
            let tags = collect_until(&mut player, 24).await;
            let config = tags
                .iter()
                .filter(|t| t.tag_type == TAG_VIDEO)
                .find_map(|t| match flv::parse_video(&t.body) {
                    Ok(VideoTag::Config(track)) => Some(track),
                    _ => None,
                })
                .expect("video config");
            assert!(matches!(config.config, TrackConfig::H265(_)));
            assert_eq!(config.legacy_codec_id, legacy, "{protocol:?} {name}");
            assert_eq!(config, track, "{protocol:?}: the same hvcC");
            let frame = tags.iter().find(|t| t.is_video_frame()).unwrap();
            match flv::parse_video(&frame.body).unwrap() {
                VideoTag::Frame {
                    codec, keyframe, ..
                } => {
                    assert_eq!(codec, VideoCodec::H265);
                    assert!(keyframe);
                }
                other => panic!("{other:?}"),
            }
        }
        publisher.close().await.unwrap();
    }
}

/// An RTMP publisher's ad cue point (`onCuePoint` in YouTube's form, as encoders send
/// it for YouTube) is the cue it stands for: HLS cuts a segment at the first keyframe
/// from the message's time plus its pre-roll, and lists it there as an
/// `EXT-X-DATERANGE` with `SCTE35-OUT` and the break's planned length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_cue_point_marks_and_cuts_the_hls_segments() {
    if !crate::common::have_ffmpeg() {
        return;
    }
    let dir = crate::common::scratch("cue-point");
    std::fs::create_dir_all(&dir).expect("scratch");
    let path = dir.join("clip.flv");
    let status = std::process::Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi"])
        .args(["-i", "testsrc2=size=320x240:rate=25", "-t", "14"])
        .args([
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-g",
            "25",
            "-bf",
            "0",
        ])
        .args(["-pix_fmt", "yuv420p", "-an", "-f", "flv"])
        .arg(&path)
        .status()
        .expect("ffmpeg");
    assert!(status.success());
    let clip = sluice_bench::clip::Clip::load(&path).expect("the clip");
    let server = TestServer::start(&[]);
    let mut publisher = RtmpConn::connect(server.rtmp, "live", false)
        .await
        .expect("connect");
    publisher.publish("cued").await.expect("publish");
    // 3 s in: a 4 s break starting 2.5 s on, between two keyframes.
    let mut cue = bytes::BytesMut::new();
    sluice_media::amf0::Amf0Value::from("onCuePoint").encode(&mut cue);
    sluice_media::amf0::Amf0Value::Object(vec![
        ("type".into(), "com.youtube.cuepoint".into()),
        ("version".into(), "0.1".into()),
        ("pre_roll_time_sec".into(), 2.5.into()),
        ("cue_point_start".into(), true.into()),
        ("break_duration_sec".into(), 4.0.into()),
        ("splice_event_id".into(), 5.0.into()),
    ])
    .encode(&mut cue);
    let http = server.http;
    let hls = tokio::task::spawn_blocking(move || {
        // HLS runs from the first request on: asked for before the cue.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (status, _, body) = crate::common::http_request(http, "GET", "/live/cued.m3u8", "");
            let text = String::from_utf8_lossy(&body).into_owned();
            if status == 200 && text.contains("SCTE35-OUT=") {
                return text;
            }
            assert!(std::time::Instant::now() < deadline, "no cue in\n{text}");
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let start = Instant::now();
    let mut cued = false;
    for tag in &clip.tags {
        tokio::time::sleep_until(start + Duration::from_millis(tag.ts_ms as u64)).await;
        if !cued && tag.ts_ms >= 3000 {
            publisher.send_data(tag.ts_ms as u32, &cue);
            cued = true;
        }
        publisher.send(tag.tag_type, tag.ts_ms as u32, &tag.body);
        publisher.flush().await.expect("publish");
        if hls.is_finished() {
            break;
        }
    }
    let playlist = hls.await.expect("playlist");
    let (_, _, body) = crate::common::http_request(http, "GET", "/api/v1/streams/live/cued", "");
    let stream: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    let cue = &stream["cues"][0];
    assert_eq!(cue["command"], "splice_insert", "{stream}");
    assert_eq!(
        (cue["direction"].as_str(), cue["event_id"].as_u64()),
        (Some("out"), Some(5))
    );
    assert_eq!(cue["duration_ms"], 4000);
    let at_ticks = cue["at_ms"].as_i64().expect("at_ms") * 90;
    // The segment after the tag begins at the first keyframe (1 s apart) from there.
    let lines: Vec<&str> = playlist.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.starts_with("#EXT-X-DATERANGE:ID=\"splice-5\""))
        .unwrap_or_else(|| panic!("no tag in\n{playlist}"));
    assert!(
        lines[i].contains(",PLANNED-DURATION=4.000,SCTE35-OUT=0xFC30"),
        "{}",
        lines[i]
    );
    assert!(
        lines[i - 1].starts_with("#EXT-X-PROGRAM-DATE-TIME:"),
        "{playlist}"
    );
    let uri = lines[i..]
        .iter()
        .find(|l| !l.starts_with('#'))
        .expect("segment");
    let name: i64 = uri
        .rsplit(['-', '.'])
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("name of {uri}"));
    assert!(
        (at_ticks..at_ticks + 90_000).contains(&name),
        "segment {name} for a splice at {at_ticks}\n{playlist}"
    );
}
