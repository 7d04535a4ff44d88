//! HTTP-TS: a live stream's MPEG-TS as one HTTP byte stream (`GET /app/name.ts`), as
//! set-top boxes and IPTV middleware play it; read by ffprobe and GStreamer.

use crate::common::TestServer;
use crate::common::{have_ffmpeg, http_request, probe_video, publish_test_pattern, wait_live};
use crate::rtsp::{gst, have_gstreamer};

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn ffprobe_and_gstreamer_play_a_live_stream_over_http_ts() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[]);
    let _publisher = publish_test_pattern(
        &format!("rtmp://{}/live/cam", server.rtmp),
        "flv",
        "libx264",
        30,
    );
    wait_live(server.http, "live/cam");
    let url = format!("http://{}/live/cam.ts", server.http);
    // Both tracks, from a keyframe on, video in order without a hole.
    let (streams, times) = probe_video(&url, "%+3");
    assert!(streams.contains("h264,320,240"), "{streams}");
    assert!(streams.lines().any(|l| l.starts_with("aac")), "{streams}");
    assert!(times.len() >= 50, "{} video packets", times.len());
    assert!(
        times.windows(2).all(|w| w[1] > w[0] && w[1] - w[0] < 0.1),
        "{times:?}"
    );

    let (status, head, _) = http_request(server.http, "HEAD", "/live/cam.ts", "");
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: video/mp2t"),
        "{head}"
    );
    assert_eq!(
        http_request(server.http, "GET", "/live/nobody.ts", "").0,
        404
    );
    // A name of HLS's segments stays HLS's: not the stream `live/cam/ab-1`.
    let (status, _, body) = http_request(server.http, "GET", "/live/cam/ab-1.ts", "");
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));

    // GStreamer demuxes and decodes it: 50 pictures reach the sink.
    if have_gstreamer() {
        let out = gst(&format!(
            "-v souphttpsrc location={url} ! tsdemux ! h264parse ! avdec_h264 ! fakesink silent=false num-buffers=50"
        ));
        let text = String::from_utf8_lossy(&out.stdout);
        let pictures = text.matches("last-message = chain").count();
        assert!(
            pictures >= 50,
            "GStreamer: {pictures} pictures; {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
