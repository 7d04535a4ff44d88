//! A second, independent RTSP client: retina (a Rust RTSP client library) plays a live
//! stream over TCP and over UDP, and a file on demand; its own depacketizers must
//! accept our SDP, RTP-Info and packets.

use crate::common::{have_ffmpeg, publish_test_pattern, TestServer};
use futures::StreamExt;
use retina::client::{
    PlayOptions, Session, SessionOptions, SetupOptions, TcpTransportOptions, Transport,
    UdpTransportOptions,
};
use retina::codec::CodecItem;
use std::time::Duration;

/// What retina got: the streams' encodings, video frames, keyframes among them, and
/// audio frames.
#[derive(Debug, Default)]
struct Got {
    encodings: Vec<String>,
    video: usize,
    keyframes: usize,
    audio: usize,
}

async fn play(url: &str, udp: bool, frames: usize) -> Got {
    let url = url::Url::parse(url).expect("url");
    let mut session = Session::describe(url, SessionOptions::default())
        .await
        .expect("DESCRIBE");
    let mut got = Got {
        encodings: session
            .streams()
            .iter()
            .map(|s| s.encoding_name().to_string())
            .collect(),
        ..Got::default()
    };
    for i in 0..session.streams().len() {
        let transport = if udp {
            Transport::Udp(UdpTransportOptions::default())
        } else {
            Transport::Tcp(TcpTransportOptions::default())
        };
        session
            .setup(i, SetupOptions::default().transport(transport))
            .await
            .expect("SETUP");
    }
    let playing = session
        .play(PlayOptions::default())
        .await
        .expect("PLAY")
        .demuxed()
        .expect("demuxed");
    tokio::pin!(playing);
    let read = async {
        while got.video < frames {
            match playing.next().await {
                Some(Ok(CodecItem::VideoFrame(f))) => {
                    got.video += 1;
                    got.keyframes += usize::from(f.is_random_access_point());
                    assert!(!f.data().is_empty());
                }
                Some(Ok(CodecItem::AudioFrame(_))) => got.audio += 1,
                Some(Ok(_)) => {}
                Some(Err(e)) => panic!("retina: {e}"),
                None => break,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .expect("frames within 15 s");
    got
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn retina_plays_live_over_tcp_and_udp() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--rtp-ports", "0"]);
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/r", server.rtmp),
        "flv",
        "libx264",
        15,
    );
    std::thread::sleep(Duration::from_secs(2));
    let url = format!("rtsp://{}/live/r", server.rtsp.expect("rtsp"));
    let rt = runtime();
    for udp in [false, true] {
        let got = rt.block_on(play(&url, udp, 50));
        assert_eq!(got.encodings, ["h264", "mpeg4-generic"], "udp={udp}");
        assert_eq!(got.video, 50, "udp={udp}: {got:?}");
        assert!(got.keyframes >= 2, "udp={udp}: {got:?}");
        assert!(got.audio >= 50, "udp={udp}: {got:?}");
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn retina_plays_a_file_on_demand() {
    if !have_ffmpeg() {
        return;
    }
    let root = crate::common::scratch("retina-root");
    let clip = root.join("clip.mp4");
    if !clip.exists() {
        let tmp = root.join("clip.tmp.mp4");
        let status = std::process::Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-y"])
            .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
            .args([
                "-t",
                "3",
                "-c:v",
                "libx264",
                "-preset",
                "ultrafast",
                "-g",
                "25",
            ])
            .args(["-pix_fmt", "yuv420p", "-c:a", "aac"])
            .arg(&tmp)
            .status()
            .expect("ffmpeg");
        assert!(status.success());
        std::fs::rename(&tmp, &clip).expect("rename");
    }
    let server = TestServer::start(&["--media-root", root.to_str().expect("utf-8")]);
    let url = format!("rtsp://{}/vod/clip.mp4", server.rtsp.expect("rtsp"));
    let got = runtime().block_on(play(&url, false, 60));
    assert_eq!(got.encodings, ["h264", "mpeg4-generic"]);
    assert_eq!(got.video, 60, "{got:?}");
    assert!(got.keyframes >= 2, "{got:?}");
}
