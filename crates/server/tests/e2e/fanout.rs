//! The fan-out end to end: a slow HTTP-FLV player is moved to the newest keyframe past
//! a change of resolution (a new sequence header), and what it got still decodes.

use crate::common::{have_ffmpeg, scratch, TestServer};
use sluice_bench::clip::Clip;
use sluice_bench::player::{Player, Protocol};
use sluice_bench::rtmp::RtmpConn;
use sluice_bench::Tag;
use sluice_media::flv::{self, TagReader, VideoTag, TAG_VIDEO};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::time::{timeout, Instant};

/// Generous: every wait is for an event, and the machine may be loaded.
const T: Duration = Duration::from_secs(60);
/// The players' lag bound (`--player-max-lag-ms`), far less than the slow player's lag.
const MAX_LAG_MS: i64 = 300;

/// A `seconds` long H.264 test pattern of `size` as FLV: baseline (no B-frames),
/// 25 fps, a keyframe every second.
fn make_clip(dir: &Path, size: &str, seconds: u32) -> Clip {
    let path = dir.join(format!("{size}.flv"));
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-f", "lavfi"])
        .args(["-i", &format!("testsrc=size={size}:rate=25")])
        .args(["-t", &seconds.to_string(), "-c:v", "libx264"])
        .args(["-profile:v", "baseline", "-preset", "ultrafast", "-bf", "0"])
        .args(["-g", "25", "-keyint_min", "25", "-sc_threshold", "0"])
        .args(["-pix_fmt", "yuv420p", "-an", "-f", "flv"])
        .arg(&path)
        .output()
        .expect("run ffmpeg");
    assert!(
        out.status.success(),
        "ffmpeg {size}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Clip::load(&path).expect("read the clip")
}

/// Sends `tags` in real time (by their timestamps), then leaves.
async fn publish(mut conn: RtmpConn, tags: Vec<Tag>) {
    let start = Instant::now();
    for tag in tags {
        let due = start + Duration::from_millis(u64::try_from(tag.ts_ms).unwrap_or(0));
        if due > Instant::now() {
            conn.flush().await.expect("publish");
            tokio::time::sleep_until(due).await;
        }
        conn.send(tag.tag_type, tag.ts_ms as u32, &tag.body);
    }
    conn.flush().await.expect("publish");
    conn.close().await.expect("close");
}

/// What an FLV stream holds: each video tag as `Some((ts, keyframe))` for a frame or
/// `None` for a sequence header.
fn video_tags(flv_bytes: &[u8]) -> Vec<Option<(i64, bool)>> {
    let mut buf = bytes::BytesMut::from(flv_bytes);
    let mut reader = TagReader::new();
    let mut tags = Vec::new();
    while let Some(tag) = reader.read(&mut buf).expect("FLV") {
        if tag.tag_type != TAG_VIDEO {
            continue;
        }
        match flv::parse_video(&tag.body).expect("video tag") {
            VideoTag::Config(_) => tags.push(None),
            VideoTag::Frame { keyframe, .. } => {
                tags.push(Some((i64::from(tag.timestamp_ms), keyframe)))
            }
            _ => {}
        }
    }
    tags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn a_slow_player_moved_past_a_resolution_change_still_decodes() {
    if !have_ffmpeg() {
        return;
    }
    let dir = scratch("fanout");
    let big = make_clip(&dir, "1280x720", 5);
    let small = make_clip(&dir, "640x360", 3);
    // The 720p clip, then the 360p one (its sequence header and all) continuing the
    // timeline.
    let switch_ms = big.duration_ms;
    let mut tags = big.tags.clone();
    tags.extend(small.tags.iter().map(|t| Tag {
        ts_ms: t.ts_ms + switch_ms,
        ..t.clone()
    }));

    let server = TestServer::start(&[
        "--workers",
        "1",
        "--player-max-lag-ms",
        &MAX_LAG_MS.to_string(),
        "--player-max-skips",
        "1000",
        "--player-send-buffer",
        "8192",
        "--merge-ms",
        "40",
        "--publish-grace-ms",
        "200",
    ]);
    let mut conn = RtmpConn::connect(server.rtmp, "live", false)
        .await
        .expect("connect");
    conn.publish("switch").await.expect("publish");
    let publishing = tokio::spawn(publish(conn, tags));

    // The slow player: a small receive buffer, and nothing read for now.
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut slow = socket.connect(server.http).await.expect("connect");
    slow.write_all(b"GET /live/switch.flv HTTP/1.1\r\nHost: sluice\r\n\r\n")
        .await
        .expect("request");

    // A player that keeps up: once it has 360p frames a second past the switch, the
    // fan-out has moved the slow one (far more than the lag bound behind) past it.
    let mut fast = Player::connect(Protocol::Flv, server.http, "live", "switch")
        .await
        .expect("play");
    timeout(T, async {
        loop {
            let tag = fast.next_tag().await.expect("tag");
            if tag.is_video_frame() && tag.ts_ms >= switch_ms + 1000 {
                return;
            }
        }
    })
    .await
    .expect("the fast player reached the 360p part");
    drop(fast);

    // Now the slow player reads everything, to the end of the stream.
    let mut got = Vec::new();
    timeout(T, slow.read_to_end(&mut got))
        .await
        .expect("the stream ended")
        .expect("read");
    publishing.await.expect("publisher");
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head")
        + 4;
    let head = String::from_utf8_lossy(&got[..head_end]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let out = dir.join("slow.flv");
    std::fs::write(&out, &got[head_end..]).expect("write slow.flv");

    // It was moved past the switch: no frame within the lag bound on either side.
    let video = video_tags(&got[head_end..]);
    let frames: Vec<(i64, bool)> = video.iter().flatten().copied().collect();
    let last_720p = frames.iter().rev().find(|f| f.0 < switch_ms);
    let first_360p = frames.iter().find(|f| f.0 >= switch_ms);
    let (Some(&(before, _)), Some(&(after, key))) = (last_720p, first_360p) else {
        panic!("frames from both clips: {frames:?}");
    };
    assert!(
        after - before > MAX_LAG_MS,
        "the slow player skipped over the switch at {switch_ms} ms: {before} ms, then {after} ms"
    );
    assert!(key, "it went on at a keyframe");
    let at = video
        .iter()
        .position(|v| v.is_some_and(|f| f.0 >= switch_ms))
        .unwrap_or(0);
    assert_eq!(
        video.get(at.wrapping_sub(1)),
        Some(&None),
        "the 360p sequence header came right before"
    );

    // What it got decodes, to the end, in 360p.
    let decode = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&out)
        .args(["-f", "null", "-"])
        .output()
        .expect("run ffmpeg");
    let errors = String::from_utf8_lossy(&decode.stderr);
    assert!(
        decode.status.success() && errors.trim().is_empty(),
        "ffmpeg decoding {}: {errors}",
        out.display()
    );
    let probe = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0"])
        .args(["-show_entries", "frame=width,height", "-of", "csv=p=0"])
        .arg(&out)
        .output()
        .expect("run ffprobe");
    assert!(probe.status.success(), "ffprobe {}", out.display());
    // Lines of "width,height" (and, for some frames, side data after them).
    let sizes = String::from_utf8_lossy(&probe.stdout);
    let sizes: Vec<(&str, &str)> = sizes
        .lines()
        .filter_map(|l| {
            let mut fields = l.trim().split(',');
            Some((fields.next()?, fields.next()?))
        })
        .collect();
    assert!(
        sizes.contains(&("1280", "720")),
        "720p frames first: {sizes:?}"
    );
    assert_eq!(
        sizes.last(),
        Some(&("640", "360")),
        "360p frames at the end"
    );
}
