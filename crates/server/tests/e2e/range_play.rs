//! Recorded ranges over the live-style protocols (`APP/NAME@FROM..TO` over RTMP,
//! HTTP-FLV and RTSP), on `playback`'s recording of two runs with a gap: ffprobe reads
//! each paced in real time, every frame of the range with timestamps running on across
//! the gap (closed up); a raw RTSP session seeks with `Range: clock=`, pauses and
//! resumes, and plays at `Scale: 2` and 4 (keyframes only); GStreamer's rtspsrc plays
//! the range; bad ranges and empty ones are refused per protocol.

use crate::common::{have_ffmpeg, http_request, Rtsp};
use crate::playback::{record_two_runs, Recorded};
use crate::rtsp::{gst, have_gstreamer};
use std::process::Command;
use std::time::{Duration, Instant};

/// The video packets' times ffprobe reads from `url` to its end.
fn probe_times(url: &str) -> Vec<f64> {
    let mut cmd = Command::new("ffprobe");
    cmd.args(["-v", "error", "-rw_timeout", "15000000"]);
    if url.starts_with("rtsp:") {
        cmd.args(["-rtsp_transport", "tcp"]);
    }
    let out = cmd
        .args(["-select_streams", "v:0", "-show_entries", "packet=pts_time"])
        .args(["-of", "csv=p=0", url])
        .output()
        .expect("ffprobe");
    assert!(
        out.status.success(),
        "ffprobe {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().trim_end_matches(',').parse().ok())
        .collect()
}

/// `ms` as an RTSP clock time, `YYYYMMDDThhmmss.mmmZ`.
fn clock(ms: i64) -> String {
    let t = sluice_archive::time::format_rfc3339(ms);
    t.replace(['-', ':'], "")
}

/// The `Range:` line of an RTSP answer.
fn range_of(resp: &str) -> &str {
    resp.lines()
        .find_map(|l| l.strip_prefix("Range: "))
        .unwrap_or_else(|| panic!("no Range in {resp}"))
}

/// The start of an answer's `Range: npt=START-...`, in seconds.
fn npt_start(resp: &str) -> f64 {
    let range = range_of(resp);
    range
        .strip_prefix("npt=")
        .and_then(|r| r.split('-').next()?.parse().ok())
        .unwrap_or_else(|| panic!("not an npt range: {range}"))
}

/// Seconds of media the RTP timestamps received since `from` span.
fn media_secs(times: &[u32], from: usize) -> f64 {
    let seen = &times[from.min(times.len())..];
    match (seen.iter().min(), seen.iter().max()) {
        (Some(a), Some(b)) => f64::from(b - a) / 90_000.0,
        _ => 0.0,
    }
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
fn a_recorded_range_plays_over_rtmp_http_flv_and_rtsp() {
    if !have_ffmpeg() {
        return;
    }
    let Recorded {
        mut server,
        root,
        first: (first_start, first_end),
        second: (second_start, second_end),
    } = record_two_runs("range-play", &[]);
    // From 1.3 s into the first run (not at a keyframe) to 1 s before the end. Playing
    // starts at the keyframe before FROM (up to a GOP, 1 s, earlier) and the gap is
    // closed up: the media lasts the range less the gap, plus up to a GOP.
    let (from, to) = (first_start + 1300, second_end - 1000);
    let wanted = ((first_end - from) + (to - second_start)) as f64 / 1000.0;
    let range = format!("{from}..{to}");
    let rtsp = server.rtsp.expect("rtsp");
    let urls = [
        format!("rtmp://{}/live/cam@{range}", server.rtmp),
        format!("http://{}/live/cam@{range}.flv", server.http),
        format!("rtsp://{rtsp}/live/cam@{range}"),
    ];
    // The three players at once: each is paced in real time.
    let probes: Vec<_> = urls
        .iter()
        .cloned()
        .map(|url| std::thread::spawn(move || (probe_times(&url), url)))
        .collect();
    for probe in probes {
        let (times, url) = probe.join().expect("probe");
        let expected = wanted * 25.0;
        // At 25 fps: one GOP (25 frames) of slack before FROM, a few frames at the ends.
        let n = times.len() as f64;
        assert!(
            n >= expected - 5.0 && n <= expected + 30.0,
            "{url}: {n} frames, {expected} expected"
        );
        assert!(
            times.windows(2).all(|w| w[1] > w[0]),
            "{url}: timestamps run forward: {times:?}"
        );
        let jump = times.windows(2).map(|w| w[1] - w[0]).fold(0.0f64, f64::max);
        assert!(
            jump < 0.2,
            "{url}: the gap is closed up, largest step {jump} s"
        );
        let span = times.last().unwrap_or(&0.0) - times.first().unwrap_or(&0.0);
        assert!(
            span >= wanted - 0.5 && span <= wanted + 1.5,
            "{url}: {span} s of media for {wanted} s wanted"
        );
    }

    // A raw RTSP session on all the recordings, seeking by wall clock.
    let url = format!("rtsp://{rtsp}/live/cam@..");
    let mut c = Rtsp::connect(rtsp);
    let describe = c.request("DESCRIBE", &url, &["Accept: application/sdp"]);
    assert!(describe.starts_with("RTSP/1.0 200"), "{describe}");
    assert!(describe.contains("a=range:npt=0-"), "{describe}");
    let setup = c.request(
        "SETUP",
        &format!("{url}/trackID=0"),
        &["Transport: RTP/AVP/TCP;unicast;interleaved=0-1"],
    );
    assert!(setup.starts_with("RTSP/1.0 200"), "{setup}");
    let asked = format!("Range: clock={}-{}", clock(from), clock(to));
    let play = c.request("PLAY", &url, &[&asked]);
    assert!(play.starts_with("RTSP/1.0 200"), "{play}");
    assert!(play.contains("RTP-Info:"), "{play}");
    // Served from the keyframe at or before FROM, to TO.
    let served = range_of(&play)
        .strip_prefix("clock=")
        .expect("a clock range");
    let (start, end) = served.split_once('-').expect("start-end");
    let wall = |t: &str| {
        let iso = format!(
            "{}-{}-{}T{}:{}:{}",
            &t[0..4],
            &t[4..6],
            &t[6..8],
            &t[9..11],
            &t[11..13],
            &t[13..]
        );
        sluice_archive::time::parse(&iso).unwrap_or_else(|e| panic!("{t}: {e:?}"))
    };
    let (start, end) = (wall(start), wall(end));
    assert!(start <= from && start > from - 1500, "{play}");
    assert!((end - to).abs() <= 100, "{play}");
    // RTP time runs with the clock: 2 s read, plus the 1 s the server leads by.
    let t0 = Instant::now();
    c.read_for(Duration::from_secs(2));
    let normal = media_secs(&c.times, 0);
    let real = t0.elapsed().as_secs_f64();
    assert!(
        normal >= real - 0.5 && normal <= real + 1.6,
        "{normal} s of RTP time in {real} s"
    );
    // PAUSE, then PLAY resumes near where it stopped (npt on the clock range played).
    let pause = c.request("PAUSE", &url, &[]);
    assert!(pause.starts_with("RTSP/1.0 200"), "{pause}");
    let resume = c.request("PLAY", &url, &[]);
    assert!(resume.starts_with("RTSP/1.0 200"), "{resume}");
    let at = npt_start(&resume);
    assert!((0.5..=3.5).contains(&at), "resumed at {at}: {resume}");
    // Scale 2: twice the media in the same time. (What came before an answer is the
    // earlier PLAY's media.)
    let fast = c.request("PLAY", &url, &["Range: npt=0-", "Scale: 2"]);
    let mark = c.times.len();
    assert!(fast.starts_with("RTSP/1.0 200"), "{fast}");
    assert!(fast.contains("Scale: 2\r\n"), "{fast}");
    c.read_for(Duration::from_secs(2));
    let doubled = media_secs(&c.times, mark);
    assert!(
        doubled >= 1.5 * normal,
        "{doubled} s at Scale 2, {normal} s at 1"
    );
    // Scale 4: keyframes only, one a second of media.
    let faster = c.request("PLAY", &url, &["Range: npt=0-", "Scale: 4"]);
    let mark = c.times.len();
    assert!(faster.contains("Scale: 4\r\n"), "{faster}");
    c.read_for(Duration::from_secs(1));
    let mut keys: Vec<u32> = c.times[mark..].to_vec();
    keys.dedup();
    assert!(keys.len() >= 3, "keyframes at Scale 4: {keys:?}");
    assert!(
        keys.windows(2).all(|w| w[1].wrapping_sub(w[0]) >= 80_000),
        "only keyframes, a second apart: {keys:?}"
    );
    // Reverse play is not supported; a clock range with nothing recorded is invalid.
    let reverse = c.request("PLAY", &url, &["Scale: -1"]);
    assert!(reverse.starts_with("RTSP/1.0 456"), "{reverse}");
    let later = format!("Range: clock={}-", clock(second_end + 60_000));
    let nothing = c.request("PLAY", &url, &[&later]);
    assert!(nothing.starts_with("RTSP/1.0 457"), "{nothing}");
    let teardown = c.request("TEARDOWN", &url, &[]);
    assert!(teardown.starts_with("RTSP/1.0 200"), "{teardown}");

    // Errors, per protocol: malformed ranges and ranges with nothing recorded.
    let gap = format!("{}..{}", first_end + 300, second_start - 300);
    let (status, _, body) = http_request(server.http, "GET", "/live/cam@yesterday...flv", "");
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        http_request(server.http, "GET", &format!("/live/cam@{gap}.flv"), "").0,
        404
    );
    let head = |path: &str| http_request(server.http, "HEAD", path, "").0;
    assert_eq!(head(&format!("/live/cam@{range}.flv")), 200);
    assert_eq!(head(&format!("/live/cam@{gap}.flv")), 404);
    for (name, status) in [("cam@yesterday..", "457"), (&*format!("cam@{gap}"), "404")] {
        let mut c = Rtsp::connect(rtsp);
        let answer = c.request(
            "DESCRIBE",
            &format!("rtsp://{rtsp}/live/{name}"),
            &["Accept: application/sdp"],
        );
        assert!(
            answer.starts_with(&format!("RTSP/1.0 {status}")),
            "{name}: {answer}"
        );
    }
    for name in ["cam@yesterday..", &*format!("cam@{gap}")] {
        let out = Command::new("ffprobe")
            .args(["-v", "error", "-rw_timeout", "5000000"])
            .arg(format!("rtmp://{}/live/{name}", server.rtmp))
            .output()
            .expect("ffprobe");
        assert!(!out.status.success(), "RTMP {name} refused");
    }

    // GStreamer's RTSP client plays the range to its end.
    if have_gstreamer() {
        let out = gst(&format!(
            "-v rtspsrc location=rtsp://{rtsp}/live/cam@{range} protocols=tcp ! rtph264depay ! avdec_h264 ! fakesink silent=false"
        ));
        let log = String::from_utf8_lossy(&out.stdout);
        let frames = log.matches("fakesink0: last-message = chain").count();
        assert!(
            frames as f64 >= wanted * 25.0 - 30.0,
            "GStreamer decoded {frames} frames: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(server.alive());
    drop(server);
    let _ = std::fs::remove_dir_all(root);
}
