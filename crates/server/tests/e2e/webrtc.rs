//! WebRTC (WHEP) end to end with an in-process client built on str0m: a real ICE,
//! DTLS and SRTP handshake over loopback against a stream ffmpeg publishes over RTMP;
//! the H.264 it receives decodes with ffmpeg. Bad offers get clear errors, and DELETE
//! ends a session.

use crate::common::{have_ffmpeg, publish_test_pattern, scratch, TestServer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use str0m::change::SdpAnswer;
use str0m::media::{Direction, MediaKind, Mid};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, Input, Output, Rtc, RtcConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// ffmpeg publishes 20 s of the test pattern to `live/{name}` over RTMP; returns once
/// the stream is live.
async fn publish_live(server: &TestServer, name: &str) -> crate::common::Kill {
    let url = format!("rtmp://{}/live/{name}", server.rtmp);
    let publisher = publish_test_pattern(&url, "flv", "libx264", 20);
    crate::common::wait_live_async(server.http, &format!("live/{name}")).await;
    publisher
}

/// A raw HTTP/1.1 request with a body: status, head and body of the answer.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, String, String) {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    sock.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

/// What a WHEP viewer got.
struct Watched {
    /// H.264 access units, Annex B.
    frames: Vec<Vec<u8>>,
    /// Opus packets.
    audio: Vec<Vec<u8>>,
    first_frame: Option<Duration>,
    location: String,
}

/// A str0m peer (H.264, and Opus with `audio`) on a fresh loopback socket, whose offer
/// of media in `direction` is POSTed to `path` and answered: the peer, its socket and
/// address, the session's `Location`, and the video section.
async fn offer(
    http: SocketAddr,
    path: &str,
    direction: Direction,
    audio: bool,
) -> (Rtc, UdpSocket, SocketAddr, String, Mid, Option<Mid>) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let local = sock.local_addr().unwrap();
    let mut config = RtcConfig::new()
        .set_crypto_provider(Arc::new(str0m::crypto::from_feature_flags()))
        .clear_codecs()
        .enable_h264(true);
    if audio {
        config = config.enable_opus(true, false);
    }
    let mut rtc: Rtc = config.build(Instant::now());
    rtc.add_local_candidate(Candidate::host(local, "udp").unwrap());
    let mut api = rtc.sdp_api();
    let video = api.add_media(MediaKind::Video, direction, None, None, None);
    let audio = audio.then(|| api.add_media(MediaKind::Audio, direction, None, None, None));
    let (offer, pending) = api.apply().unwrap();
    if let Ok(dir) = std::env::var("SLUICE_DUMP_OFFER") {
        std::fs::write(format!("{dir}/offer.sdp"), offer.to_sdp_string()).unwrap();
    }
    let sdp = offer.to_sdp_string();
    let (status, head, body) = request(http, "POST", path, "application/sdp", &sdp).await;
    assert_eq!(status, 201, "{head}{body}");
    let location = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("location: ")
                .or(l.strip_prefix("Location: "))
        })
        .expect("a Location")
        .trim()
        .to_owned();
    let answer = SdpAnswer::from_sdp_string(&body).unwrap();
    rtc.sdp_api().accept_answer(pending, answer).unwrap();
    (rtc, sock, local, location, video, audio)
}

/// Hands the peer the next datagram on `sock`, or the time once `until` passed.
async fn step(rtc: &mut Rtc, sock: &UdpSocket, local: SocketAddr, buf: &mut [u8], until: Instant) {
    step_losing(rtc, sock, local, buf, until, None).await
}

/// A lossy link to a viewer: every `every`-th video packet (an SRTP datagram over
/// 300 bytes; Opus packets are smaller) is lost, from the 40th on.
#[derive(Debug)]
struct Loss {
    every: usize,
    seen: usize,
    lost: usize,
}

/// [`step`], losing what `loss` says.
async fn step_losing(
    rtc: &mut Rtc,
    sock: &UdpSocket,
    local: SocketAddr,
    buf: &mut [u8],
    until: Instant,
    loss: Option<&mut Loss>,
) {
    let wait = until.saturating_duration_since(Instant::now());
    let input = match tokio::time::timeout(wait, sock.recv_from(buf)).await {
        Ok(Ok((n, from))) => {
            let media = n > 300 && (128..192).contains(&buf[0]) && !(200..224).contains(&buf[1]);
            if let (true, Some(loss)) = (media, loss) {
                loss.seen += 1;
                if loss.seen >= 40 && loss.seen.is_multiple_of(loss.every) {
                    loss.lost += 1;
                    return;
                }
            }
            let r = Receive::new(Protocol::Udp, from, local, &buf[..n]).unwrap();
            Input::Receive(Instant::now(), r)
        }
        _ => Input::Timeout(Instant::now()),
    };
    rtc.handle_input(input).unwrap();
}

/// Plays `path` (`/app/stream/whep`) over WHEP until `frames` video frames came in or
/// `limit` passed.
async fn watch(http: SocketAddr, path: &str, frames: usize, limit: Duration) -> Watched {
    watch_asking(http, path, frames, limit, None).await
}

/// [`watch`], asking for a keyframe (a PLI) once `pli_after` frames came.
async fn watch_asking(
    http: SocketAddr,
    path: &str,
    frames: usize,
    limit: Duration,
    pli_after: Option<usize>,
) -> Watched {
    watch_losing(http, path, frames, limit, pli_after, None).await
}

/// [`watch_asking`] over a link that loses what `loss` says.
async fn watch_losing(
    http: SocketAddr,
    path: &str,
    frames: usize,
    limit: Duration,
    pli_after: Option<usize>,
    mut loss: Option<&mut Loss>,
) -> Watched {
    let start = Instant::now();
    let (mut rtc, sock, local, location, video, _) =
        offer(http, path, Direction::RecvOnly, true).await;

    let mut got = Vec::new();
    let mut audio = Vec::new();
    let mut first_frame = None;
    let mut buf = vec![0u8; 2048];
    let deadline = start + limit;
    while got.len() < frames && Instant::now() < deadline {
        let timeout = match rtc.poll_output().unwrap() {
            Output::Timeout(t) => t,
            Output::Transmit(t) => {
                sock.send_to(&t.contents, t.destination).await.unwrap();
                continue;
            }
            Output::Event(Event::MediaData(d)) => {
                if d.mid == video {
                    first_frame.get_or_insert_with(|| start.elapsed());
                    got.push(d.data.to_vec());
                    if pli_after == Some(got.len()) {
                        rtc.writer(video)
                            .unwrap()
                            .request_keyframe(None, str0m::media::KeyframeRequestKind::Pli)
                            .unwrap();
                    }
                } else {
                    audio.push(d.data.to_vec());
                }
                continue;
            }
            Output::Event(_) => continue,
        };
        let wait = timeout.min(Instant::now() + Duration::from_millis(100));
        step_losing(&mut rtc, &sock, local, &mut buf, wait, loss.as_deref_mut()).await;
    }
    Watched {
        frames: got,
        audio,
        first_frame,
        location,
    }
}

/// Runs the client on `sock` (at `local`) until `frames` more video frames came or
/// `until`; what it sends from another address is lost. The frames that came.
async fn play_on(
    rtc: &mut Rtc,
    sock: &UdpSocket,
    local: SocketAddr,
    video: Mid,
    frames: usize,
    until: Instant,
) -> usize {
    let mut got = 0;
    let mut buf = vec![0u8; 2048];
    while got < frames && Instant::now() < until {
        let timeout = match rtc.poll_output().unwrap() {
            Output::Timeout(t) => t,
            Output::Transmit(t) => {
                if t.source == local {
                    let _ = sock.send_to(&t.contents, t.destination).await;
                }
                continue;
            }
            Output::Event(Event::MediaData(d)) => {
                got += usize::from(d.mid == video);
                continue;
            }
            Output::Event(_) => continue,
        };
        let wait = timeout.min(Instant::now() + Duration::from_millis(100));
        step(rtc, sock, local, &mut buf, wait).await;
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn an_ice_restart_through_patch_moves_a_viewer_to_its_new_address() {
    if !have_ffmpeg() {
        return;
    }
    // One worker: the new address's datagrams reach the socket that runs the session
    // (with several, the kernel may hand them to another worker's, see `webrtc::udp`).
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0", "--workers", "1"]);
    let _publisher = publish_live(&server, "move").await;
    let (mut rtc, sock, local, location, video, _) =
        offer(server.http, "/live/move/whep", Direction::RecvOnly, true).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let before = play_on(&mut rtc, &sock, local, video, 20, deadline).await;
    assert_eq!(before, 20, "no frames before the restart");

    // The viewer moves to a new socket and restarts ICE with new credentials.
    let moved = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let moved_at = moved.local_addr().unwrap();
    let theirs = sluice_webrtc::restart::IceCredentials::random().unwrap();
    let frag = format!(
        "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n",
        theirs.ufrag, theirs.pwd
    );
    let frag_type = "application/trickle-ice-sdpfrag";
    // A trickle PATCH (no If-Match: *) is not supported: 422 (RFC 9725 §4.3.1).
    let (status, _, _) = request(server.http, "PATCH", &location, frag_type, &frag).await;
    assert_eq!(status, 422);
    let with_match = format!("{frag_type}\r\nIf-Match: *");
    let (status, head, body) = request(server.http, "PATCH", &location, &with_match, &frag).await;
    assert_eq!(status, 200, "{head}{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("application/trickle-ice-sdpfrag"),
        "{head}"
    );
    let ours = sluice_webrtc::restart::credentials(&body).unwrap();
    let mut api = rtc.direct_api();
    assert_ne!(api.local_ice_credentials().ufrag, theirs.ufrag);
    api.set_local_ice_credentials(str0m::IceCreds {
        ufrag: theirs.ufrag,
        pass: theirs.pwd,
    });
    api.set_remote_ice_credentials(str0m::IceCreds {
        ufrag: ours.ufrag,
        pass: ours.pwd,
    });
    assert!(api.invalidate_candidate(&Candidate::host(local, "udp").unwrap()));
    rtc.add_local_candidate(Candidate::host(moved_at, "udp").unwrap());
    drop(sock);
    // Media comes on to the new address, with the SRTP of the first handshake.
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = play_on(&mut rtc, &moved, moved_at, video, 40, deadline).await;
    assert_eq!(after, 40, "frames after the restart");
    assert_eq!(udp_sessions(server.http), 1.0);
}

fn udp_sessions(http: SocketAddr) -> f64 {
    crate::common::metric(http, "sluice_udp_sessions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn a_whep_viewer_gets_decodable_h264_from_an_rtmp_publisher() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0", "--workers", "2"]);
    assert!(server.webrtc.is_some());
    let _publisher = publish_live(&server, "cam").await;
    let watched = watch(server.http, "/live/cam/whep", 75, Duration::from_secs(15)).await;
    assert!(
        watched.frames.len() >= 75,
        "{} frames in 15 s",
        watched.frames.len()
    );
    eprintln!("first frame after {:?}", watched.first_frame);
    // The first frame is a keyframe with its parameter sets (the GOP cache).
    let nal_types = |f: &[u8]| -> Vec<u8> {
        f.windows(4)
            .filter(|w| w[..3] == [0, 0, 1])
            .map(|w| w[3] & 0x1f)
            .collect()
    };
    let first = nal_types(&watched.frames[0]);
    assert!(first.contains(&7) && first.contains(&5), "{first:?}");
    // What came decodes: every frame, no errors.
    let file = scratch("webrtc").join("whep.h264");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, watched.frames.concat()).unwrap();
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args([
            "-show_entries",
            "stream=nb_read_frames,codec_name,width",
            "-of",
            "csv=p=0",
        ])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let errors = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(text.starts_with("h264,320,"), "{text} {errors}");
    let decoded: usize = text.trim().rsplit(',').next().unwrap().parse().unwrap();
    assert!(decoded >= 75, "{decoded} frames decoded: {errors}");
    assert!(errors.is_empty(), "{errors}");

    // The publisher's AAC (a 440 Hz tone) came as Opus, transcoded once for the stream.
    let hz = opus_tone(&watched.audio);
    assert!((hz - 440.0).abs() < 10.0, "the Opus carries {hz} Hz");

    // The viewer is counted as a WebRTC one, in the API and in `/metrics`, not as an
    // RTSP player (it takes the RTP form RTSP players take).
    let (_, _, body) =
        crate::common::http_request(server.http, "GET", "/api/v1/streams/live/cam", "");
    let stream: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(stream["viewers"]["webrtc"], 1, "{stream}");
    assert_eq!(stream["viewers"]["rtsp"], 0, "{stream}");
    let viewers = |protocol: &str| {
        crate::common::metric(
            server.http,
            &format!(
                "sluice_stream_viewers{{app=\"live\",stream=\"cam\",protocol=\"{protocol}\"}}"
            ),
        )
    };
    assert_eq!((viewers("webrtc"), viewers("rtsp")), (1.0, 0.0));

    // The viewer's RTCP (str0m's receiver reports) showed its DTLS done: str0m is
    // dropped, as `/metrics` tells.
    let sessions = |state: &str| {
        crate::common::metric(
            server.http,
            &format!("sluice_webrtc_sessions{{state=\"{state}\"}}"),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while (sessions("str0m"), sessions("settled")) != (0.0, 1.0) {
        assert!(
            Instant::now() < deadline,
            "str0m kept: {}",
            sessions("str0m")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // DELETE ends the session and gives its UDP place back; with no WebRTC player
    // left, the transcoding stops.
    assert!(transcoding(server.http, "live/cam"));
    assert_eq!(udp_sessions(server.http), 1.0);
    let (status, _, _) = request(server.http, "DELETE", &watched.location, "text/plain", "").await;
    assert_eq!(status, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    while udp_sessions(server.http) != 0.0 {
        assert!(Instant::now() < deadline, "the session outlived its DELETE");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while transcoding(server.http, "live/cam") {
        assert!(
            Instant::now() < deadline,
            "transcoding outlived its last player"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _, _) = request(server.http, "DELETE", &watched.location, "text/plain", "").await;
    assert_eq!(status, 404);
    while viewers("webrtc") != 0.0 {
        assert!(Instant::now() < deadline, "the viewer outlived its session");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!((sessions("str0m"), sessions("settled")), (0.0, 0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn lost_video_packets_are_sent_again_from_the_streams_history() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0"]);
    let _publisher = publish_live(&server, "lossy").await;
    let mut loss = Loss {
        every: 15,
        seen: 0,
        lost: 0,
    };
    let limit = Duration::from_secs(15);
    let path = "/live/lossy/whep";
    let watched = watch_losing(server.http, path, 100, limit, None, Some(&mut loss)).await;
    let resent = crate::common::metric(server.http, "sluice_webrtc_retransmissions_total");
    let missed = crate::common::metric(server.http, "sluice_webrtc_retransmission_misses_total");
    eprintln!("{loss:?}, {resent} resent, {missed} missed");
    assert!(loss.lost >= 10, "{loss:?}");
    // str0m's receiver asks for each lost packet, and every one is still kept.
    assert!(
        resent >= loss.lost as f64 * 0.9,
        "{resent} resent for {loss:?}"
    );
    assert_eq!(missed, 0.0);
    // Every frame came whole: none is left out for a lost packet.
    assert!(
        watched.frames.len() >= 100,
        "{} frames",
        watched.frames.len()
    );
}

/// Whether the API says `key`'s audio is being transcoded.
fn transcoding(http: SocketAddr, key: &str) -> bool {
    let (_, _, body) =
        crate::common::http_request(http, "GET", &format!("/api/v1/streams/{key}"), "");
    let body = String::from_utf8_lossy(&body).replace([' ', '\n'], "");
    body.contains(r#""transcoding":true"#)
}

/// Decodes Opus packets (at least a second of them); the frequency of the tone they
/// carry, from the zero crossings after the first 100 ms.
fn opus_tone(packets: &[Vec<u8>]) -> f64 {
    opus_tone_in(packets, 960)
}

/// [`opus_tone`] of packets of `samples` each.
fn opus_tone_in(packets: &[Vec<u8>], samples: usize) -> f64 {
    assert!(packets.len() >= 25, "{} Opus packets", packets.len());
    let mut decoder = opus::Decoder::new(48_000, opus::Channels::Mono).unwrap();
    let mut pcm = Vec::new();
    let mut buf = vec![0f32; 5760];
    for p in packets {
        let n = decoder
            .decode_float(p, &mut buf, false)
            .expect("Opus decodes");
        assert_eq!(n, samples, "packets of {samples} samples");
        pcm.extend_from_slice(&buf[..n]);
    }
    let steady = &pcm[4800..];
    let loud = steady.iter().map(|s| s * s).sum::<f32>() / steady.len() as f32;
    assert!(loud.sqrt() > 0.05, "silent: rms {}", loud.sqrt());
    let crossings = steady
        .windows(2)
        .filter(|w| w[0] < 0.0 && w[1] >= 0.0)
        .count();
    crossings as f64 * 48_000.0 / steady.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn with_transcoding_off_a_whep_viewer_of_aac_gets_video_only() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0", "--webrtc-transcode", "false"]);
    let _publisher = publish_live(&server, "quiet").await;
    let watched = watch(server.http, "/live/quiet/whep", 50, Duration::from_secs(15)).await;
    assert!(
        watched.frames.len() >= 50,
        "{} frames",
        watched.frames.len()
    );
    assert!(
        watched.audio.is_empty(),
        "{} audio packets",
        watched.audio.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn with_40_ms_opus_frames_a_viewer_gets_half_the_audio_packets() {
    if !have_ffmpeg() {
        return;
    }
    // Audio packets per video frame, the same publisher's, at 20 and at 40 ms.
    let mut per_frame = Vec::new();
    for ms in ["20", "40"] {
        let server =
            TestServer::start(&["--webrtc-udp", "127.0.0.1:0", "--webrtc-opus-frame-ms", ms]);
        let _publisher = publish_live(&server, "opus").await;
        let watched = watch(server.http, "/live/opus/whep", 80, Duration::from_secs(30)).await;
        assert!(
            watched.frames.len() >= 80,
            "{ms} ms: {} frames",
            watched.frames.len()
        );
        let samples = if ms == "40" { 1920 } else { 960 };
        let hz = opus_tone_in(&watched.audio, samples);
        assert!((hz - 440.0).abs() < 10.0, "the Opus carries {hz} Hz");
        let ratio = watched.audio.len() as f64 / watched.frames.len() as f64;
        eprintln!(
            "{ms} ms: {} audio packets for {} video frames ({ratio:.2} a frame)",
            watched.audio.len(),
            watched.frames.len()
        );
        per_frame.push(ratio);
    }
    let half = per_frame[1] / per_frame[0];
    assert!((0.4..0.6).contains(&half), "40 ms over 20 ms: {half:.2}");
}

#[tokio::test]
async fn bad_offers_get_clear_errors() {
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0", "--play-wait-ms", "100"]);
    let http = server.http;
    let (status, _, _) = request(http, "POST", "/live/x/whep", "text/plain", "v=0").await;
    assert_eq!(status, 415);
    // Not live.
    let (status, _, body) = request(http, "POST", "/live/x/whep", "application/sdp", "v=0").await;
    assert_eq!(status, 404, "{body}");
    let (status, _, _) = request(http, "DELETE", "/live/x/whep/1-ffff", "text/plain", "").await;
    assert_eq!(status, 404);
    let (status, head, _) = request(http, "OPTIONS", "/live/x/whep", "text/plain", "").await;
    assert_eq!(status, 204);
    assert!(
        head.to_ascii_lowercase()
            .contains("accept-post: application/sdp"),
        "{head}"
    );
    let (status, _, _) = request(http, "PATCH", "/live/x/whep/1-ffff", "text/plain", "").await;
    assert_eq!(status, 415);
    let frag = "application/trickle-ice-sdpfrag\r\nIf-Match: *";
    let (status, _, _) = request(http, "PATCH", "/live/x/whep/1-ffff", frag, "").await;
    assert_eq!(status, 404);
}

/// H.264 access units (Annex B) of a `seconds`-long 25 fps test pattern, split at the
/// access unit delimiters x264 writes.
fn h264_access_units(seconds: u32) -> Vec<Vec<u8>> {
    let file = scratch("webrtc").join(format!("whip-{seconds}.h264"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let ok = std::process::Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=320x240:rate=25",
        ])
        .args([
            "-t",
            &seconds.to_string(),
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
        ])
        .args([
            "-bf",
            "0",
            "-g",
            "25",
            "-pix_fmt",
            "yuv420p",
            "-x264-params",
            "aud=1",
        ])
        .args(["-f", "h264"])
        .arg(&file)
        .status()
        .unwrap()
        .success();
    assert!(ok, "ffmpeg made the clip");
    let data = std::fs::read(&file).unwrap();
    let starts: Vec<usize> = data
        .windows(5)
        .enumerate()
        .filter(|(_, w)| w[..4] == [0, 0, 0, 1] && w[4] & 0x1f == 9)
        .map(|(i, _)| i)
        .collect();
    starts
        .iter()
        .zip(starts.iter().skip(1).chain([&data.len()]))
        .map(|(&a, &b)| data[a..b].to_vec())
        .collect()
}

/// Publishes `aus` at 25 fps over WHIP to `path` from an in-process str0m peer, and
/// keeps the peer going until `until`. Returns the session's `Location`.
async fn publish_whip(
    http: SocketAddr,
    path: &str,
    aus: Vec<Vec<u8>>,
    until: Instant,
) -> (String, tokio::task::JoinHandle<(usize, usize)>) {
    publish_whip_late(http, path, aus, until, Duration::ZERO).await
}

/// [`publish_whip`], its audio sent `audio_late` after it was captured (as a browser
/// whose microphone path lags), with the capture times in its sender reports.
async fn publish_whip_late(
    http: SocketAddr,
    path: &str,
    aus: Vec<Vec<u8>>,
    until: Instant,
    audio_late: Duration,
) -> (String, tokio::task::JoinHandle<(usize, usize)>) {
    let (mut rtc, sock, local, location, mid, audio_mid) =
        offer(http, path, Direction::SendOnly, true).await;
    let audio_mid = audio_mid.expect("an audio section");
    let mut encoder =
        opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Audio).unwrap();
    let mut tone =
        (0..).map(|n: u64| (n as f32 * 440.0 * std::f32::consts::TAU / 48_000.0).sin() * 0.3);
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        let mut sent = 0;
        let mut keyframe_requests = 0;
        let mut connected_at = None;
        let mut held = std::collections::VecDeque::new();
        while Instant::now() < until {
            // The next access unit, 40 ms after the one before.
            if let Some(at) = connected_at {
                let due = at + Duration::from_millis(40 * sent as u64);
                if sent < aus.len() && Instant::now() >= due {
                    let w = rtc.writer(mid).unwrap();
                    let pt = w
                        .payload_params()
                        .find(|p| p.spec().codec == str0m::format::Codec::H264)
                        .unwrap()
                        .pt();
                    let time = str0m::media::MediaTime::from_90khz(3600 * sent as u64);
                    // Captured on the frame grid, however late this loop runs: the
                    // sender reports then map RTP time to the capture clock exactly.
                    w.write(pt, due, time, aus[sent].clone()).unwrap();
                    // Two 20 ms Opus packets per 40 ms video frame: a 440 Hz tone.
                    let pt = rtc
                        .writer(audio_mid)
                        .unwrap()
                        .payload_params()
                        .find(|p| p.spec().codec == str0m::format::Codec::Opus)
                        .unwrap()
                        .pt();
                    for half in 0..2u64 {
                        let pcm: Vec<f32> = tone.by_ref().take(960).collect();
                        let packet = encoder.encode_vec_float(&pcm, 1500).unwrap();
                        let at = str0m::media::MediaTime::new(
                            1920 * sent as u64 + 960 * half,
                            str0m::media::Frequency::FORTY_EIGHT_KHZ,
                        );
                        let captured = due + Duration::from_millis(20 * half);
                        held.push_back((pt, captured, at, packet));
                    }
                    sent += 1;
                }
            }
            while held
                .front()
                .is_some_and(|(_, captured, _, _)| *captured + audio_late <= Instant::now())
            {
                let (pt, captured, at, packet) = held.pop_front().unwrap();
                let w = rtc.writer(audio_mid).unwrap();
                w.write(pt, captured, at, packet).unwrap();
            }
            let timeout = match rtc.poll_output().unwrap() {
                Output::Timeout(t) => t,
                Output::Transmit(t) => {
                    let _ = sock.send_to(&t.contents, t.destination).await;
                    continue;
                }
                Output::Event(Event::Connected) => {
                    connected_at = Some(Instant::now());
                    continue;
                }
                Output::Event(Event::KeyframeRequest(_)) => {
                    keyframe_requests += 1;
                    continue;
                }
                Output::Event(_) => continue,
            };
            let wait = timeout.min(Instant::now() + Duration::from_millis(5));
            step(&mut rtc, &sock, local, &mut buf, wait).await;
        }
        (sent, keyframe_requests)
    });
    (location, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn a_whip_publisher_plays_over_http_flv_and_whep() {
    if !have_ffmpeg() {
        return;
    }
    // No regular keyframe requests during the test: only the viewer's.
    let root = scratch("webrtc-whip-record");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let server = TestServer::start(&[
        "--webrtc-udp",
        "127.0.0.1:0",
        "--workers",
        "2",
        "--webrtc-keyframe-interval-ms",
        "600000",
        "--media-root",
        root.to_str().unwrap(),
        "--record",
        "live/*",
    ]);
    let aus = h264_access_units(12);
    assert!(aus.len() >= 290, "{} access units", aus.len());
    let until = Instant::now() + Duration::from_secs(13);
    let (location, publishing) = publish_whip(server.http, "/live/whip/whip", aus, until).await;
    crate::common::wait_live_async(server.http, "live/whip").await;
    // A WHEP viewer of the WHIP stream: H.264 passed through; its keyframe request
    // (PLI) is passed on to the publisher.
    let watched = watch_asking(
        server.http,
        "/live/whip/whep",
        50,
        Duration::from_secs(6),
        Some(10),
    )
    .await;
    assert!(
        watched.frames.len() >= 50,
        "{} frames",
        watched.frames.len()
    );

    // Read by ffprobe, all at once while the publisher goes on:
    // - HTTP-FLV: H.264 at 320x240, frames decoding (and AAC made from the Opus).
    // - RTSP and HLS in fMP4 carry the Opus as it came; HLS in MPEG-TS has AAC made
    //   from it (MPEG-TS players know no Opus).
    let url = format!("http://{}/live/whip.flv", server.http);
    let flv = tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("ffprobe")
            .args(["-v", "error", "-rw_timeout", "10000000"])
            .args(["-analyzeduration", "1000000", "-probesize", "100000"])
            .args(["-read_intervals", "%+#150"])
            .args([
                "-show_entries",
                "stream=codec_name,width,height:packet=codec_type,pts_time",
            ])
            .args(["-of", "csv=p=0", &url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let video = text.lines().filter(|l| l.starts_with("video,")).count();
        (text, video)
    });
    let probes: Vec<_> = [
        (
            format!("rtsp://{}/live/whip", server.rtsp.unwrap()),
            "h264 opus",
        ),
        (
            format!("http://{}/live/whip/index.m3u8", server.http),
            "h264 opus",
        ),
        (format!("http://{}/live/whip.m3u8", server.http), "h264 aac"),
    ]
    .into_iter()
    .map(|(url, codecs)| {
        let found = tokio::task::spawn_blocking(move || (stream_codecs(&url), url));
        (found, codecs)
    })
    .collect();
    let probe = flv.await.unwrap();
    assert!(probe.0.contains("h264,320,240"), "{probe:?}");
    assert!(
        probe.1 >= 40,
        "{} video packets in 150: {}",
        probe.1,
        &probe.0[..probe.0.len().min(600)]
    );
    let sorted = |codecs: &str| {
        let mut v: Vec<String> = codecs.split_whitespace().map(str::to_owned).collect();
        v.sort();
        v
    };
    for (found, codecs) in probes {
        let (found, url) = found.await.unwrap();
        assert_eq!(sorted(&found), sorted(codecs), "{url}");
    }

    // DELETE ends the publish, and the viewer.
    for resource in [&location, &watched.location] {
        let (status, _, _) = request(server.http, "DELETE", resource, "text/plain", "").await;
        assert_eq!(status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while udp_sessions(server.http) != 0.0 {
        assert!(
            Instant::now() < deadline,
            "the sessions outlived the DELETE"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (sent, keyframe_requests) = publishing.await.unwrap();
    assert!(sent > 100, "{sent} sent");
    assert!(
        keyframe_requests >= 1,
        "the viewer's PLI never reached the publisher"
    );
    // The recording has both tracks.
    let dir = root.join("recordings/live/whip");
    let deadline = Instant::now() + Duration::from_secs(5);
    let file = loop {
        // The recording, not the stream's index (`.sluice-index`).
        let done = std::fs::read_dir(&dir)
            .ok()
            .and_then(|mut d| {
                d.find_map(|e| {
                    e.ok()
                        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                })
            })
            .map(|e| e.path())
            .filter(|p| stream_codecs(p.to_str().unwrap()) == "h264 opus");
        if let Some(f) = done {
            break f;
        }
        assert!(
            Instant::now() < deadline,
            "no recording with both tracks in {dir:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("recorded {file:?}");
}

/// The codecs of `url`'s streams as ffprobe names them, sorted, each once.
/// A WHIP publisher's media goes into its stream from the worker's receive path: its
/// session's task wakes for timers and the peer's events, not once per RTP packet
/// (each access unit here is at least one video and two Opus packets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn a_whip_publishers_media_does_not_wake_its_task_per_packet() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0", "--workers", "1"]);
    let aus = h264_access_units(3);
    // Past the last access unit only briefly: the peer's own timers wake the task too,
    // a few dozen times a second.
    let until = Instant::now() + Duration::from_millis(3500);
    let (_location, publishing) = publish_whip(server.http, "/live/wakes/whip", aus, until).await;
    crate::common::wait_live_async(server.http, "live/wakes").await;
    let (sent, _) = publishing.await.unwrap();
    assert!(sent >= 70, "{sent} access units sent");
    let frames = crate::common::metric(
        server.http,
        "sluice_stream_received_frames_total{app=\"live\",stream=\"wakes\"}",
    );
    assert!(
        frames >= 2.0 * sent as f64,
        "{frames} frames for {sent} access units"
    );
    let wakes = crate::common::metric(server.http, "sluice_webrtc_task_wakes_total");
    assert!(
        wakes < frames,
        "{wakes} task wakes for {sent} access units ({frames} frames)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn whip_audio_that_comes_late_is_put_back_in_sync_by_the_sender_reports() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&["--webrtc-udp", "127.0.0.1:0"]);
    let aus = h264_access_units(11);
    let until = Instant::now() + Duration::from_secs(11);
    // Audio captured with the video but sent 310 ms later: arrival alone would put it
    // 310 ms late, 10 ms off the 20 ms grid its packets make with the 40 ms frames.
    let late = Duration::from_millis(310);
    let path = "/live/late/whip";
    let (_location, publishing) = publish_whip_late(server.http, path, aus, until, late).await;
    // Browsers send an audio sender report every 5 s, str0m's come as rarely: the
    // move is made a few seconds in. A player joining after it sees the stream in sync.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let url = format!("http://{}/live/late.flv", server.http);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("ffprobe")
            .args(["-v", "error", "-read_intervals", "%+#200", "-show_entries"])
            .args(["packet=codec_type,pts_time", "-of", "csv=p=0"])
            .arg(&url)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let audio: Vec<i64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("audio,"))
        .filter_map(|t| t.trim().parse::<f64>().ok())
        .map(|t| (t * 1000.0).round() as i64)
        .collect();
    let video: Vec<i64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("video,"))
        .filter_map(|t| t.trim().parse::<f64>().ok())
        .map(|t| (t * 1000.0).round() as i64)
        .collect();
    assert!(audio.len() >= 50 && video.len() >= 25, "{text}");
    // Video frames lie on a 40 ms grid; in sync, the Opus lies on its 20 ms one. FLV
    // carries AAC made from it: 1024-sample frames (21.33 ms) on from the first Opus
    // packet transcoded, which is the player's first audio frame.
    let grid = video[0].rem_euclid(20);
    let first = (audio[0] - grid).rem_euclid(20);
    assert!(
        first.min(20 - first) <= 2,
        "audio starts {first} ms off the video's grid"
    );
    let frame_ms = 1024.0 / 48.0;
    let off: Vec<f64> = audio
        .iter()
        .map(|a| (a - audio[0]) as f64 / frame_ms)
        .map(|n| (n - n.round()).abs() * frame_ms)
        .collect();
    assert!(
        off.iter().all(|d| *d <= 1.0),
        "audio frames off their grid by {off:?} ms"
    );
    publishing.await.unwrap();
}

fn stream_codecs(url: &str) -> String {
    let mut cmd = std::process::Command::new("ffprobe");
    cmd.args(["-v", "error", "-rw_timeout", "10000000"]);
    if url.starts_with("rtsp:") {
        cmd.args(["-rtsp_transport", "tcp"]);
    }
    let out = cmd
        .args(["-show_entries", "stream=codec_name", "-of", "csv=p=0", url])
        .output()
        .unwrap();
    let mut codecs: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    // HLS lists its streams under its program too.
    codecs.sort();
    codecs.dedup();
    if codecs.is_empty() {
        eprintln!("ffprobe {url}: {}", String::from_utf8_lossy(&out.stderr));
    }
    codecs.join(" ")
}

/// Sessions nobody ends are ended for them: an answered offer whose ICE never starts
/// at the handshake timeout, a viewer that vanishes without a DELETE when its ICE
/// consent runs out (about 15 s). Both give their UDP place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn abandoned_sessions_are_dropped() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[
        "--webrtc-udp",
        "127.0.0.1:0",
        "--handshake-timeout-ms",
        "1000",
    ]);
    let url = format!("rtmp://{}/live/cam", server.rtmp);
    let _publisher = publish_test_pattern(&url, "flv", "libx264", 60);
    crate::common::wait_live_async(server.http, "live/cam").await;
    // An offer answered, and nothing after.
    let offer = include_str!("../../../webrtc/fuzz/offer.sdp");
    let (status, _, body) = request(
        server.http,
        "POST",
        "/live/cam/whep",
        "application/sdp",
        offer,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(udp_sessions(server.http), 1.0);
    let gone = |limit: Duration| async move {
        let t = Instant::now();
        while udp_sessions(server.http) != 0.0 {
            assert!(t.elapsed() < limit, "still there after {limit:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        t.elapsed()
    };
    gone(Duration::from_secs(4)).await;
    // A viewer that played a while, then went without a word.
    let watched = watch(server.http, "/live/cam/whep", 10, Duration::from_secs(5)).await;
    assert!(watched.frames.len() >= 10);
    let after = gone(Duration::from_secs(30)).await;
    eprintln!("a vanished viewer was dropped after {after:?}");
}

/// A STUN server on loopback that says every binding request comes from `mapped`.
fn fake_stun_server(mapped: SocketAddr) -> SocketAddr {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            if n < 20 || buf[..2] != [0x00, 0x01] {
                continue;
            }
            let SocketAddr::V4(v4) = mapped else {
                return;
            };
            let mut d = vec![0x01, 0x01, 0x00, 0x0c];
            d.extend_from_slice(&buf[4..20]);
            d.extend_from_slice(&[0x00, 0x20, 0x00, 0x08, 0x00, 0x01]);
            d.extend_from_slice(&(v4.port() ^ 0x2112).to_be_bytes());
            let ip = u32::from(*v4.ip()) ^ 0x2112_a442;
            d.extend_from_slice(&ip.to_be_bytes());
            let _ = sock.send_to(&d, from);
        }
    });
    addr
}

/// With `--webrtc-stun`, the address a STUN server sees the UDP port at is announced
/// first, before the configured ones.
#[tokio::test]
async fn the_address_stun_finds_is_announced_first() {
    let mapped: SocketAddr = "203.0.113.7:40000".parse().unwrap();
    let stun = fake_stun_server(mapped);
    let server = TestServer::start(&[
        "--webrtc-udp",
        "127.0.0.1:0",
        "--webrtc-stun",
        &stun.to_string(),
    ]);
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut rtc = RtcConfig::new()
        .set_crypto_provider(Arc::new(str0m::crypto::from_feature_flags()))
        .clear_codecs()
        .enable_h264(true)
        .build(Instant::now());
    rtc.add_local_candidate(Candidate::host(sock.local_addr().unwrap(), "udp").unwrap());
    let mut api = rtc.sdp_api();
    api.add_media(MediaKind::Video, Direction::SendOnly, None, None, None);
    let (offer, _) = api.apply().unwrap();
    let (status, head, body) = request(
        server.http,
        "POST",
        "/live/stun/whip",
        "application/sdp",
        &offer.to_sdp_string(),
    )
    .await;
    assert_eq!(status, 201, "{head}{body}");
    let candidates: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("a=candidate"))
        .collect();
    assert!(
        candidates
            .first()
            .is_some_and(|c| c.contains("203.0.113.7 40000")),
        "{candidates:?}"
    );
    let udp = server.webrtc.unwrap();
    assert!(
        candidates[1..]
            .iter()
            .any(|c| c.contains(&format!("127.0.0.1 {}", udp.port()))),
        "{candidates:?}"
    );
}

/// A WHEP viewer whose network has no UDP: ICE over TCP (an active candidate against
/// the server's passive one, RFC 4571 framing), H.264 frames received. Returns how
/// many came within `limit`.
async fn watch_over_tcp(http: SocketAddr, tcp: SocketAddr, path: &str, limit: Duration) -> usize {
    let mut conn = TcpStream::connect(tcp).await.unwrap();
    let local = conn.local_addr().unwrap();
    let mut rtc = RtcConfig::new()
        .set_crypto_provider(Arc::new(str0m::crypto::from_feature_flags()))
        .clear_codecs()
        .enable_h264(true)
        .build(Instant::now());
    let candidate = Candidate::builder()
        .tcp()
        .host(local)
        .tcptype(str0m::net::TcpType::Active)
        .build()
        .unwrap();
    rtc.add_local_candidate(candidate);
    let mut api = rtc.sdp_api();
    let video = api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    let (offer, pending) = api.apply().unwrap();
    let (status, head, body) = request(
        http,
        "POST",
        path,
        "application/sdp",
        &offer.to_sdp_string(),
    )
    .await;
    assert_eq!(status, 201, "{head}{body}");
    assert!(
        body.contains(" tcp ") && body.contains("tcptype passive"),
        "{body}"
    );
    let answer = SdpAnswer::from_sdp_string(&body).unwrap();
    rtc.sdp_api().accept_answer(pending, answer).unwrap();

    let deadline = Instant::now() + limit;
    let mut frames = 0;
    let mut inbox: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 65536];
    while Instant::now() < deadline {
        let timeout = match rtc.poll_output().unwrap() {
            Output::Timeout(t) => t,
            Output::Transmit(t) => {
                let mut framed = (t.contents.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&t.contents);
                conn.write_all(&framed).await.unwrap();
                continue;
            }
            Output::Event(Event::MediaData(d)) => {
                if d.mid == video {
                    frames += 1;
                }
                continue;
            }
            Output::Event(_) => continue,
        };
        let wait = timeout
            .min(Instant::now() + Duration::from_millis(50))
            .saturating_duration_since(Instant::now());
        let input = match tokio::time::timeout(wait, conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                inbox.extend_from_slice(&buf[..n]);
                None
            }
            Err(_) => Some(Input::Timeout(Instant::now())),
        };
        if let Some(input) = input {
            rtc.handle_input(input).unwrap();
        }
        // Every whole frame the server sent.
        while inbox.len() >= 2 {
            let len = usize::from(u16::from_be_bytes([inbox[0], inbox[1]]));
            if inbox.len() < 2 + len {
                break;
            }
            let frame: Vec<u8> = inbox.drain(..2 + len).skip(2).collect();
            let r = Receive::new(Protocol::Tcp, tcp, local, &frame).unwrap();
            rtc.handle_input(Input::Receive(Instant::now(), r)).unwrap();
        }
    }
    frames
}

/// With UDP off and ICE-TCP on, a viewer reaches the server over TCP only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn a_whep_viewer_plays_over_ice_tcp() {
    if !have_ffmpeg() {
        return;
    }
    let server = TestServer::start(&[
        "--webrtc-udp",
        "off",
        "--webrtc-tcp",
        "127.0.0.1:0",
        "--workers",
        "2",
    ]);
    let tcp = server.webrtc_tcp.expect("the ICE-TCP port");
    assert!(server.webrtc.is_none());
    let _publisher = publish_live(&server, "tcp").await;
    let frames = watch_over_tcp(server.http, tcp, "/live/tcp/whep", Duration::from_secs(4)).await;
    assert!(frames >= 50, "{frames} frames over ICE-TCP in 4 s");
}

/// ICE-TCP connections that are not ICE are closed: a first frame that is no binding
/// request at once, one that never completes at the handshake bound.
#[tokio::test]
async fn ice_tcp_connections_that_are_not_ice_are_closed() {
    let server = TestServer::start(&[
        "--webrtc-udp",
        "off",
        "--webrtc-tcp",
        "127.0.0.1:0",
        "--handshake-timeout-ms",
        "1000",
    ]);
    let tcp = server.webrtc_tcp.unwrap();
    let closed = |mut conn: TcpStream| async move {
        let mut buf = [0u8; 16];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    };
    // Garbage in a frame, and a binding request naming nobody.
    let mut garbage = TcpStream::connect(tcp).await.unwrap();
    garbage
        .write_all(&[0, 4, 0xde, 0xad, 0xbe, 0xef])
        .await
        .unwrap();
    let mut nobody = TcpStream::connect(tcp).await.unwrap();
    let mut request = vec![0x00, 0x01, 0x00, 0x0c, 0x21, 0x12, 0xa4, 0x42];
    request.extend_from_slice(&[7; 12]);
    request.extend_from_slice(&[0x00, 0x06, 0x00, 0x07]);
    request.extend_from_slice(b"abc:def\0");
    let mut framed = (request.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&request);
    nobody.write_all(&framed).await.unwrap();
    let started = Instant::now();
    assert!(closed(garbage).await, "garbage kept open");
    assert!(closed(nobody).await, "an unknown ufrag kept open");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "not at once"
    );
    // A frame announced long and never sent: closed at the handshake bound.
    let mut slow = TcpStream::connect(tcp).await.unwrap();
    slow.write_all(&[0xff, 0xff, 1, 2, 3]).await.unwrap();
    let started = Instant::now();
    assert!(closed(slow).await, "a never-finished frame kept open");
    assert!(started.elapsed() >= Duration::from_millis(500));
}

/// A stream published by a UDP ingest (`[[ingest]]`, ffmpeg sending MPEG-TS to it)
/// plays over WHEP like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg and ffprobe")]
async fn a_udp_ingest_plays_over_whep() {
    if !have_ffmpeg() {
        return;
    }
    let config = scratch("webrtc-udp-ingest").join("sluice.toml");
    std::fs::write(
        &config,
        "[[ingest]]\nstream = \"live/udp\"\nurl = \"udp://127.0.0.1:0\"\n",
    )
    .unwrap();
    let server = TestServer::start(&[
        "--webrtc-udp",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
    ]);
    let (_, _, body) = crate::common::http_request(server.http, "GET", "/api/v1/ingests", "");
    let list: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let bound = list["ingests"][0]["bound"].as_str().unwrap().to_string();
    let url = format!("udp://{bound}?pkt_size=1316");
    let _sender = publish_test_pattern(&url, "mpegts", "libx264", 30);
    crate::common::wait_live_async(server.http, "live/udp").await;
    let watched = watch(server.http, "/live/udp/whep", 50, Duration::from_secs(15)).await;
    assert!(
        watched.frames.len() >= 50,
        "{} frames in 15 s",
        watched.frames.len()
    );
}
