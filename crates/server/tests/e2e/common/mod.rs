//! Shared pieces of the end-to-end tests: a `sluice` process on ports chosen at run
//! time, synthetic media, and the external tools (ffmpeg) when a test needs them.
#![allow(dead_code)]

pub mod netns;
pub mod nginx;

use bytes::{Bytes, BytesMut};
use sluice_bench::clip::Clip;
use sluice_bench::Tag;
use sluice_media::codec::{AacConfig, AvcConfig, HevcConfig};
use sluice_media::flv::{self, TAG_AUDIO, TAG_SCRIPT, TAG_VIDEO};
use sluice_media::{Track, TrackConfig};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A `sluice` process, killed when dropped.
pub struct TestServer {
    child: Child,
    pub rtmp: SocketAddr,
    pub http: SocketAddr,
    /// Set when started with `--https 127.0.0.1:0 --tls-self-signed`.
    pub https: Option<SocketAddr>,
    /// Set when started with `--api 127.0.0.1:0`.
    pub api: Option<SocketAddr>,
    /// RTSP, on a kernel-chosen port unless the flags say otherwise.
    pub rtsp: Option<SocketAddr>,
    /// WebRTC's UDP port, when the flags turn it on.
    pub webrtc: Option<SocketAddr>,
    /// WebRTC's ICE-TCP port, when the flags turn it on.
    pub webrtc_tcp: Option<SocketAddr>,
    /// RTMPS, when the flags turn it on (with a certificate).
    pub rtmps: Option<SocketAddr>,
    /// SRT, on a kernel-chosen port unless the flags say otherwise.
    pub srt: Option<SocketAddr>,
}

impl TestServer {
    /// Starts the binary on 127.0.0.1 with kernel-chosen ports and the given flags.
    pub fn start(args: &[&str]) -> TestServer {
        TestServer::start_in(&[], args)
    }

    /// [`TestServer::start`] through `prefix` (a program and its arguments that run the
    /// binary, such as `nsenter` into a test's own network namespace).
    pub fn start_in(prefix: &[&str], args: &[&str]) -> TestServer {
        let rtsp: &[&str] = if args.contains(&"--rtsp") {
            &[]
        } else {
            &["--rtsp", "127.0.0.1:0"]
        };
        // WebRTC only where a test asks for it (its default port is fixed).
        let webrtc: &[&str] = if args.contains(&"--webrtc-udp") {
            &[]
        } else {
            &["--webrtc-udp", "off"]
        };
        // SRT's default port is fixed too: a kernel-chosen one unless asked.
        let srt: &[&str] = if args.contains(&"--srt") {
            &[]
        } else {
            &["--srt", "127.0.0.1:0"]
        };
        let mut command = match prefix.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(env!("CARGO_BIN_EXE_sluice"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_sluice")),
        };
        let mut child = command
            .args([
                "--rtmp",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                "--log",
                "warn",
            ])
            .args(rtsp)
            .args(webrtc)
            .args(srt)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start sluice");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read listening line");
        let field = |name: &str| -> SocketAddr {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("no {name} address in {line:?}"))
        };
        let optional = |name: &str| -> Option<SocketAddr> {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .and_then(|a| a.parse().ok())
        };
        TestServer {
            https: optional("https"),
            api: optional("api"),
            rtsp: optional("rtsp"),
            webrtc: optional("webrtc"),
            webrtc_tcp: optional("webrtc_tcp"),
            rtmps: optional("rtmps"),
            srt: optional("srt"),
            rtmp: field("rtmp"),
            http: field("http"),
            child,
        }
    }

    /// Resident memory of the server process in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("read /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// The server's process id (for its CPU time in `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `kill -9`: the server gets no chance to clean up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (a graceful stop); waits up to `wait` for the exit and returns its status.
    pub fn terminate(&mut self, wait: std::time::Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.wait_exit(wait)
    }

    /// Waits up to `wait` for the process to exit by itself; its status.
    pub fn wait_exit(&mut self, wait: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plausible H.264 baseline SPS/PPS (the server never decodes pictures).
pub fn avc_track() -> Track {
    let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
    let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
    Track::new(TrackConfig::H264(
        AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
    ))
}

pub fn hevc_track(legacy: bool) -> Track {
    let vps = Bytes::from_static(&[
        0x40, 0x01, 0x0c, 0x01, 0xff, 0xff, 0x01, 0x60, 0x00, 0x00, 0x03, 0x00, 0x00, 0x03, 0x00,
        0x00, 0x03, 0x00, 0x00, 0x03, 0x00, 0x5d, 0xac, 0x09,
    ]);
    let sps = Bytes::from_static(&[
        0x42, 0x01, 0x01, 0x01, 0x60, 0x00, 0x00, 0x03, 0x00, 0x00, 0x03, 0x00, 0x00, 0x03, 0x00,
        0x00, 0x03, 0x00, 0x5d, 0xa0, 0x02, 0x80, 0x80, 0x2d, 0x16, 0x59, 0x59, 0xa4, 0x93, 0x2b,
        0xc0, 0x40, 0x40, 0x00, 0x00, 0x03, 0x00, 0x40, 0x00, 0x00, 0x06, 0x42,
    ]);
    let pps = Bytes::from_static(&[0x44, 0x01, 0xc1, 0x72, 0xb4, 0x62, 0x40]);
    let mut track = Track::new(TrackConfig::H265(
        HevcConfig::from_parameter_sets(&[vps], &[sps], &[pps]).expect("hvcC"),
    ));
    track.legacy_codec_id = legacy;
    track
}

pub fn aac_track() -> Track {
    Track::new(TrackConfig::Aac(
        AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).expect("asc"),
    ))
}

/// A synthetic clip: metadata, sequence headers, `seconds` of 25 fps video with a
/// keyframe every `gop` frames and ~47 AAC frames/s. Each video frame is one NAL
/// unit of `frame_len` bytes whose first payload bytes hold the frame number, so a
/// player can check that it got every frame in order.
pub fn synthetic_clip(video: &Track, seconds: u32, gop: u32, frame_len: usize) -> Clip {
    let mut tags = Vec::new();
    let mut meta = BytesMut::new();
    sluice_media::amf0::Amf0Value::String("onMetaData".into()).encode(&mut meta);
    sluice_media::amf0::Amf0Value::EcmaArray(vec![
        ("width".into(), sluice_media::amf0::Amf0Value::Number(320.0)),
        (
            "height".into(),
            sluice_media::amf0::Amf0Value::Number(240.0),
        ),
    ])
    .encode(&mut meta);
    tags.push(Tag {
        tag_type: TAG_SCRIPT,
        ts_ms: 0,
        body: meta.freeze(),
    });
    let mut body = BytesMut::new();
    flv::write_video_config(&mut body, video).expect("video config");
    tags.push(Tag {
        tag_type: TAG_VIDEO,
        ts_ms: 0,
        body: body.split().freeze(),
    });
    let audio = aac_track();
    assert!(flv::write_audio_config(&mut body, &audio).expect("audio config"));
    tags.push(Tag {
        tag_type: TAG_AUDIO,
        ts_ms: 0,
        body: body.split().freeze(),
    });
    let frames = seconds * 25;
    let mut audio_ts = 0f64;
    for n in 0..frames {
        let ts = i64::from(n) * 40;
        while audio_ts <= ts as f64 {
            flv::audio_frame_header(&mut body, &audio).expect("audio header");
            body.extend_from_slice(&[0x21, 0x10, 0x04, 0x60, 0x8c, 0x1c]);
            tags.push(Tag {
                tag_type: TAG_AUDIO,
                ts_ms: audio_ts as i64,
                body: body.split().freeze(),
            });
            audio_ts += 1024.0 * 1000.0 / 48000.0;
        }
        let key = n % gop == 0;
        flv::video_frame_header(&mut body, video, key, 0).expect("video header");
        let nal_type = match (video.video_codec(), key) {
            (Some(sluice_media::VideoCodec::H265), true) => 19 << 1,
            (Some(sluice_media::VideoCodec::H265), false) => 1 << 1,
            (_, true) => 0x65,
            (_, false) => 0x41,
        };
        let len = frame_len.max(8);
        body.extend_from_slice(&(len as u32).to_be_bytes());
        body.extend_from_slice(&[nal_type, 0x01]);
        body.extend_from_slice(&n.to_be_bytes());
        body.resize(body.len() + len - 6, 0xab);
        tags.push(Tag {
            tag_type: TAG_VIDEO,
            ts_ms: ts,
            body: body.split().freeze(),
        });
    }
    Clip {
        tags,
        duration_ms: i64::from(frames) * 40,
    }
}

/// The frame number a synthetic video frame carries (see [`synthetic_clip`]).
pub fn frame_number(tag: &Tag) -> Option<u32> {
    if tag.tag_type != TAG_VIDEO {
        return None;
    }
    match flv::parse_video(&tag.body).ok()? {
        flv::VideoTag::Frame { data, .. } => {
            let n = data.get(6..10)?;
            Some(u32::from_be_bytes([n[0], n[1], n[2], n[3]]))
        }
        _ => None,
    }
}

/// Whether every command of `checks` (a program and its arguments) runs and succeeds:
/// the external tools a test needs (`what` names them). Their absence fails the test
/// instead of skipping it where `SLUICE_REQUIRE_TOOLS=1` (CI), and where the build
/// script found them (`found_at_build`, their cfg): a test that skips is then one cargo
/// did not list as ignored.
pub fn tools_present(what: &str, found_at_build: bool, checks: &[&[&str]]) -> bool {
    let ok = checks.iter().all(|check| {
        let Some((program, args)) = check.split_first() else {
            return true;
        };
        Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ok {
        assert!(
            std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "{what} missing but SLUICE_REQUIRE_TOOLS=1"
        );
        assert!(
            !found_at_build,
            "{what} was there when the tests were built but is not now: rebuild them \
             (touch crates/server/build.rs) to have the tests that need it ignored"
        );
        eprintln!("skipping: {what} not installed");
    }
    ok
}

/// Fails where `SLUICE_REQUIRE_TOOLS=1` if the build script found any of `tools`
/// (whether its cfg is set, what it is) missing: the tests that need it were then
/// compiled as ignored, and would not fail on their own (see `scripts/e2e_tools.rs`).
pub fn require_tools_found_at_build(tools: &[(bool, &str)]) {
    if std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1") {
        return;
    }
    let missing: Vec<&str> = tools.iter().filter(|t| !t.0).map(|t| t.1).collect();
    assert!(
        missing.is_empty(),
        "SLUICE_REQUIRE_TOOLS=1, but the build found no {missing:?}: the tests that need \
         them were ignored (install them, or run bash scripts/test.sh)"
    );
}

/// Whether `tool` is here (`tool --version` succeeds); see [`tools_present`].
pub fn have(tool: &str) -> bool {
    let found_at_build = [
        ("chromium", cfg!(have_chromium)),
        ("curl", cfg!(have_curl)),
        ("wget", cfg!(have_wget)),
    ]
    .iter()
    .any(|&(t, found)| t == tool && found);
    tools_present(tool, found_at_build, &[&[tool, "--version"]])
}

/// Whether ffmpeg and ffprobe are here; see [`tools_present`].
pub fn have_ffmpeg() -> bool {
    tools_present(
        "ffmpeg/ffprobe",
        cfg!(have_ffmpeg),
        &[&["ffmpeg", "-version"], &["ffprobe", "-version"]],
    )
}

/// A scratch directory for this test binary.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The clips `scripts/make-test-media.sh` makes (those the tests play).
pub const TEST_CLIPS: [&str; 6] = [
    "h264_aac_720p.mp4",
    "h264_aac_720p.flv",
    "h264_bframes_720p.mp4",
    "h264_bframes_720p.flv",
    "h265_aac_1080p.mp4",
    "h264_opus_720p.mkv",
];

/// The folder of the standard test clips: `SLUICE_TEST_MEDIA` if set, else one per
/// target directory. Clips missing there are made with the repository's
/// `scripts/make-test-media.sh` (8 s each, to keep the suite fast; needs ffmpeg).
pub fn test_media() -> PathBuf {
    let dir = std::env::var_os("SLUICE_TEST_MEDIA").map_or_else(
        || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-media"),
        PathBuf::from,
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/make-test-media.sh");
    let lock =
        std::fs::File::create(std::env::temp_dir().join("sluice-media.lock")).expect("lock file");
    // Test binaries run in parallel; one makes the clips, the others wait for it.
    lock.lock().expect("lock");
    if !TEST_CLIPS.iter().all(|c| dir.join(c).exists()) {
        let status = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .arg("8")
            .stdout(Stdio::null())
            .status()
            .expect("run scripts/make-test-media.sh");
        assert!(status.success(), "scripts/make-test-media.sh failed");
    }
    dir
}

/// A child process (ffmpeg, a browser) killed when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// ffmpeg sends `seconds` of a 320x240 25 fps test pattern (1 s GOP, no B-frames)
/// and a 48 kHz tone to `url`, in real time, as `format` (`flv` for RTMP, `rtsp` over
/// TCP, `rtsp-udp`).
pub fn publish_test_pattern(url: &str, format: &str, video_codec: &str, seconds: u32) -> Kill {
    let mut cmd = test_pattern(video_codec, seconds);
    let (format, transport) = match format {
        "rtsp" => ("rtsp", Some("tcp")),
        "rtsp-udp" => ("rtsp", Some("udp")),
        other => (other, None),
    };
    cmd.args(["-f", format]);
    if let Some(t) = transport {
        cmd.args(["-rtsp_transport", t]);
    }
    Kill(
        cmd.arg(url)
            .stdin(Stdio::null())
            .spawn()
            .expect("start ffmpeg"),
    )
}

/// One test pattern (as [`publish_test_pattern`]) to every RTMP URL of `urls` at once,
/// through ffmpeg's tee: the same frames with the same times to each.
pub fn publish_test_pattern_to_all(urls: &[String], seconds: u32) -> Kill {
    let outputs: Vec<String> = urls.iter().map(|u| format!("[f=flv]{u}")).collect();
    let mut cmd = test_pattern("libx264", seconds);
    // Through tee, FLV needs the encoders' headers global (its sequence headers).
    cmd.args(["-map", "0:v", "-map", "1:a", "-flags", "+global_header"])
        .args(["-f", "tee"]);
    Kill(
        cmd.arg(outputs.join("|"))
            .stdin(Stdio::null())
            .spawn()
            .expect("start ffmpeg"),
    )
}

/// ffmpeg encoding the test pattern and tone in real time for `seconds`, with
/// `video_codec` (one keyframe a second, no B-frames) and AAC: the output is the
/// caller's.
fn test_pattern(video_codec: &str, seconds: u32) -> Command {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-hide_banner", "-loglevel", "error", "-re"])
        .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args(["-t", &seconds.to_string(), "-c:v", video_codec])
        .args(["-preset", "ultrafast", "-g", "25", "-bf", "0"]);
    if video_codec == "libx265" {
        cmd.args(["-x265-params", "log-level=error"]);
    }
    cmd.args(["-pix_fmt", "yuv420p", "-c:a", "aac"]);
    cmd
}

/// What ffprobe reads from `url` within `interval` (`-read_intervals`, e.g. `%+4`
/// seconds or `%+#120` packets): its stream lines (`codec,width,height`) and the
/// video packet times.
pub fn probe_video(url: &str, interval: &str) -> (String, Vec<f64>) {
    probe_video_over(url, interval, "tcp")
}

/// [`probe_video`] with RTSP's RTP over `transport` (`tcp` or `udp`).
pub fn probe_video_over(url: &str, interval: &str, transport: &str) -> (String, Vec<f64>) {
    let mut cmd = Command::new("ffprobe");
    cmd.args(["-v", "error", "-rw_timeout", "10000000"]);
    if url.starts_with("rtsp:") {
        cmd.args(["-rtsp_transport", transport]);
    }
    let out = cmd
        .args(["-read_intervals", interval])
        .args([
            "-show_entries",
            "stream=codec_name,width,height:packet=codec_type,pts_time",
        ])
        .args(["-of", "csv=p=0", url])
        .output()
        .expect("ffprobe");
    assert!(
        out.status.success(),
        "ffprobe {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let times = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("video,"))
        .filter_map(|t| t.split(',').next()?.parse().ok())
        .collect();
    (stdout, times)
}

/// An RTSP exchange on one connection: sends `request`, then reads interleaved
/// frames (counted) until the response with this `cseq`, which it returns.
pub struct Rtsp {
    sock: std::net::TcpStream,
    buf: Vec<u8>,
    cseq: u32,
    session: Option<String>,
    /// Interleaved RTP frames seen so far.
    pub frames: usize,
    /// The RTP timestamps of the frames on channel 0 (the first track's RTP) seen so
    /// far.
    pub times: Vec<u32>,
}

impl Rtsp {
    pub fn connect(addr: std::net::SocketAddr) -> Rtsp {
        let sock = std::net::TcpStream::connect(addr).expect("connect");
        sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        Rtsp {
            sock,
            buf: Vec::new(),
            cseq: 0,
            session: None,
            frames: 0,
            times: Vec::new(),
        }
    }

    pub fn request(&mut self, method: &str, url: &str, headers: &[&str]) -> String {
        use std::io::Write;
        self.cseq += 1;
        let mut req = format!("{method} {url} RTSP/1.0\r\nCSeq: {}\r\n", self.cseq);
        if let Some(s) = &self.session {
            req.push_str(&format!("Session: {s}\r\n"));
        }
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        self.sock.write_all(req.as_bytes()).expect("send");
        let resp = self.response();
        if let Some(line) = resp.lines().find(|l| l.starts_with("Session:")) {
            let id = line["Session:".len()..]
                .split(';')
                .next()
                .unwrap_or("")
                .trim();
            self.session = Some(id.to_string());
        }
        resp
    }

    /// Reads until a whole response (head and body), skipping interleaved frames.
    pub fn response(&mut self) -> String {
        use std::io::Read;
        loop {
            self.take_frames();
            if self.buf.first().is_some_and(|&b| b != b'$') {
                if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&self.buf[..end + 4]).into_owned();
                    let body_len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if self.buf.len() >= end + 4 + body_len {
                        let all =
                            String::from_utf8_lossy(&self.buf[..end + 4 + body_len]).into_owned();
                        self.buf.drain(..end + 4 + body_len);
                        return all;
                    }
                }
            }
            let mut chunk = [0u8; 16384];
            let n = self.sock.read(&mut chunk).expect("read");
            assert!(n > 0, "connection closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Drops the interleaved frames (`$`, channel, length) at the head of the buffer,
    /// counting them.
    fn take_frames(&mut self) {
        while self.buf.first() == Some(&b'$') && self.buf.len() >= 4 {
            let len = usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]]));
            if self.buf.len() < 4 + len {
                break;
            }
            if self.buf[1] == 0 && len >= 12 {
                let ts = u32::from_be_bytes([self.buf[8], self.buf[9], self.buf[10], self.buf[11]]);
                self.times.push(ts);
            }
            self.buf.drain(..4 + len);
            self.frames += 1;
        }
    }

    /// Reads media for `d`, counting frames.
    pub fn read_for(&mut self, d: std::time::Duration) {
        use std::io::Read;
        let end = std::time::Instant::now() + d;
        while std::time::Instant::now() < end {
            let mut chunk = [0u8; 16384];
            self.sock
                .set_read_timeout(Some(std::time::Duration::from_millis(50)))
                .expect("timeout");
            if let Ok(n) = self.sock.read(&mut chunk) {
                assert!(n > 0, "connection closed");
                self.buf.extend_from_slice(&chunk[..n]);
            }
            self.take_frames();
        }
        self.sock
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
    }
}

impl Rtsp {
    /// Whether the server closes the connection within `d` (media is skipped).
    pub fn closed_within(&mut self, d: std::time::Duration) -> bool {
        use std::io::Read;
        let end = std::time::Instant::now() + d;
        while std::time::Instant::now() < end {
            self.sock
                .set_read_timeout(Some(std::time::Duration::from_millis(100)))
                .expect("timeout");
            let mut chunk = [0u8; 16384];
            match self.sock.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => {}
            }
        }
        false
    }
}

/// One HTTP/1.1 request with `Connection: close` (`extra`: more header lines, each
/// ending in CRLF): the status code, the response head and the whole body.
/// The value of `series` (name and labels, as `/metrics` prints them) at `addr`.
pub fn metric(addr: SocketAddr, series: &str) -> f64 {
    let (_, _, body) = http_request(addr, "GET", "/metrics", "");
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra: &str,
) -> (u16, String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut sock = std::net::TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    write!(
        sock,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
    )
    .expect("send");
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).expect("read");
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    (status, head, raw[end..].to_vec())
}

/// Headless Chromium with a fresh profile in `profile`: no sandbox, GPU, first-run or
/// background traffic, and autoplay allowed; callers add their own flags and the page.
pub fn chromium(profile: &std::path::Path) -> Command {
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--autoplay-policy=no-user-gesture-required",
        // WebRTC to a server on 127.0.0.1.
        "--allow-loopback-in-peer-connection",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    // A browser outlives its test when the test's thread never drops it (a helper
    // thread left running when the test binary exits): the kernel kills it with the
    // thread that started it.
    // SAFETY: prctl is async-signal-safe and touches only the child being made.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    cmd
}

/// The value of `name` in a test page's report (`a=1&b=2`), or `""`.
pub fn report_field<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .split('&')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or("")
}

/// Waits until `key` is live on the server at `http` (the API knows it), up to 10 s.
pub fn wait_live(http: SocketAddr, key: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while http_request(http, "GET", &format!("/api/v1/streams/{key}"), "").0 != 200 {
        assert!(std::time::Instant::now() < deadline, "{key} never appeared");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// [`wait_live`] from async code, without holding up its runtime.
pub async fn wait_live_async(http: SocketAddr, key: &str) {
    let key = key.to_owned();
    tokio::task::spawn_blocking(move || wait_live(http, &key))
        .await
        .expect("wait_live");
}

/// A self-signed certificate for `localhost`, as (certificate PEM, key PEM).
pub fn localhost_certificate() -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("rcgen");
    (cert.cert.pem(), cert.signing_key.serialize_pem())
}

/// A root and a certificate for 127.0.0.1 signed by it, as PEM files in `dir`:
/// (certificate, key, root).
pub fn private_ca(dir: &std::path::Path) -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("root");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("certificate");
    let path = |name: &str, pem: String| {
        let p = dir.join(name);
        std::fs::write(&p, pem).expect("write");
        p.to_str().expect("utf-8").to_string()
    };
    (
        path("cert.pem", cert.pem()),
        path("key.pem", key.serialize_pem()),
        path("ca.pem", ca_cert.pem()),
    )
}

/// Waits until `check` holds, up to `limit`; whether it did.
pub fn wait_for(limit: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    check()
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `expires=...&sign=...` for `action` on `path`, as an operator's backend makes it
/// (HMAC-SHA256 under `key`).
pub fn signed(key: &str, action: &str, path: &str, expires: u64) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(format!("{action}:{path}:{expires}").as_bytes());
    let sign: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("expires={expires}&sign={sign}")
}

/// The `name=value` of the first `Set-Cookie` of a response head.
pub fn set_cookie(head: &str) -> Option<String> {
    head.lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .and_then(|c| c.split(';').next())
        .map(str::to_string)
}
