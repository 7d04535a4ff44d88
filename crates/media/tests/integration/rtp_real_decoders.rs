//! Real receivers accept our VP8, VP9 and AV1 RTP: ffmpeg encodes a 2 s clip to IVF,
//! `RtpPacketizer` packetizes its frames, and every frame must come out of a real
//! decoder exactly as ffmpeg decodes the IVF itself (byte-equal YUV).
//!
//! VP8 and VP9 (the VP9 clip two-pass, so it has superframes with hidden frames) go
//! to GStreamer over UDP on 127.0.0.1: `udpsrc ! rtpvp9depay ! vp9dec ! filesink`.
//! GStreamer 1.22 has no AV1 depayloader (`rtpav1depay` is in gst-plugins-rs), and
//! ffmpeg 5 no AV1 RTP demuxer, so the AV1 packets are taken apart by a receiver
//! written here from the payload format, and ffmpeg decodes what it rebuilds. Its
//! key frames reach the packetizer without their sequence header: the packetizer must
//! put the one from `av1C` back.

use bytes::Bytes;
use sluice_media::codec::{
    av1_obus, read_leb128, vp9_frame_header, vp9_frames, write_leb128, AV1_OBU_SEQUENCE_HEADER,
};
use sluice_media::rtp::{RtpCodec, RtpFrame, RtpPacket, RtpPacketizer, DEFAULT_MTU};
use sluice_media::{Frame, MediaKind, Track, TrackConfig};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a GStreamer pipeline may take to start or to finish.
const GST_TIMEOUT: Duration = Duration::from_secs(20);

/// The frames of an IVF file.
struct Clip {
    width: usize,
    height: usize,
    /// Presentation times in 90 kHz ticks, and the frames.
    frames: Vec<(i64, Vec<u8>)>,
}

fn u16_at(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads an IVF file: a 32-byte header (`DKIF`, header length, FourCC, size, time
/// base), then per frame its size (32 bits), its timestamp (64 bits) and its bytes.
fn read_ivf(path: &Path) -> Clip {
    let data = std::fs::read(path).expect("IVF file");
    assert_eq!(&data[..4], b"DKIF");
    let (width, height) = (u16_at(&data, 12), u16_at(&data, 14));
    let (rate, scale) = (i64::from(u32_at(&data, 16)), i64::from(u32_at(&data, 20)));
    let mut at = u16_at(&data, 6);
    let mut frames = Vec::new();
    while at < data.len() {
        let size = u32_at(&data, at) as usize;
        let pts = u64::from_le_bytes(data[at + 4..at + 12].try_into().expect("8 bytes")) as i64;
        frames.push((
            pts * 90_000 * scale / rate,
            data[at + 12..at + 12 + size].to_vec(),
        ));
        at += 12 + size;
    }
    Clip {
        width,
        height,
        frames,
    }
}

/// Writes an IVF file of `frames` (timestamps in frames of 1/25 s).
fn write_ivf(path: &Path, fourcc: &[u8; 4], clip: &Clip, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    out.extend_from_slice(b"DKIF");
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&32u16.to_le_bytes());
    out.extend_from_slice(fourcc);
    out.extend_from_slice(&(clip.width as u16).to_le_bytes());
    out.extend_from_slice(&(clip.height as u16).to_le_bytes());
    out.extend_from_slice(&25u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(i as u64).to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).expect("write IVF");
}

/// A temporary folder for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sluice-rtp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("the program runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Encodes 2 s of `testsrc2` at 256x144, 25 fps, a key frame a second, into `out`.
fn encode(dir: &Path, out: &str, codec: &[&str]) -> PathBuf {
    let path = dir.join(out);
    let input = [
        "-v",
        "error",
        "-y",
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=256x144:rate=25",
        "-t",
        "2",
    ];
    let rate = ["-g", "25", "-b:v", "300k", "-threads", "2"];
    run(Command::new("ffmpeg")
        .args(input)
        .args(codec)
        .args(rate)
        .arg(&path));
    path
}

/// Encodes VP9 in two passes: libvpx then uses hidden alt-ref frames, in superframes.
fn encode_vp9(dir: &Path) -> PathBuf {
    let log = dir.join("pass");
    let log = log.to_str().expect("utf-8 path");
    let codec = ["-c:v", "libvpx-vp9", "-deadline", "good", "-cpu-used", "4"];
    let pass = |n: &'static str| ["-pass", n, "-passlogfile", log];
    let input = [
        "-v",
        "error",
        "-y",
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=256x144:rate=25",
        "-t",
        "2",
    ];
    let rate = ["-g", "25", "-b:v", "300k"];
    run(Command::new("ffmpeg")
        .args(input)
        .args(codec)
        .args(rate)
        .args(pass("1"))
        .args(["-f", "null", "-"]));
    let path = dir.join("vp9.ivf");
    run(Command::new("ffmpeg")
        .args(input)
        .args(codec)
        .args(rate)
        .args(pass("2"))
        .arg(&path));
    path
}

/// What ffmpeg decodes from `path`: raw I420 frames back to back.
fn ffmpeg_decode(path: &Path) -> Vec<u8> {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-f", "rawvideo", "-pix_fmt", "yuv420p", "-"])
        .output()
        .expect("ffmpeg runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The RTP packets of each frame.
fn packetize(track: &Track, frames: &[(i64, Vec<u8>, bool)]) -> Vec<Vec<Bytes>> {
    let codec = RtpCodec::for_track(track).expect("an RTP codec");
    let pt = codec.default_payload_type();
    let mut p = RtpPacketizer::new(track, pt, 0x5eed, DEFAULT_MTU).expect("packetizer");
    p.set_start(65_000, 12_345);
    let mut out = RtpFrame::new();
    frames
        .iter()
        .map(|(pts, data, keyframe)| {
            let frame = Frame {
                kind: MediaKind::Video,
                dts: *pts,
                pts: *pts,
                keyframe: *keyframe,
                payload: Bytes::from(data.clone()),
            };
            p.packetize(&frame, &mut out).expect("packetize");
            let f = out.freeze().expect("packets");
            assert_eq!(f.keyframe, *keyframe);
            f.packets().collect()
        })
        .collect()
}

/// Whether GStreamer and all of `elements` are here; missing, the test is skipped,
/// except where `SLUICE_REQUIRE_TOOLS=1`.
fn gst_present(elements: &[&str]) -> bool {
    let ok = |cmd: &mut Command| cmd.output().is_ok_and(|o| o.status.success());
    let missing: Vec<&str> = if ok(Command::new("gst-launch-1.0").arg("--version")) {
        elements
            .iter()
            .copied()
            .filter(|e| !ok(Command::new("gst-inspect-1.0").arg(e)))
            .collect()
    } else {
        vec!["gst-launch-1.0"]
    };
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "GStreamer {missing:?} missing but SLUICE_REQUIRE_TOOLS=1"
    );
    eprintln!("GStreamer {missing:?} not found; skipped");
    false
}

/// A `gst-launch-1.0` pipeline receiving RTP on a port of 127.0.0.1 chosen now.
struct Receiver {
    child: Child,
    port: u16,
}

impl Receiver {
    /// Starts `udpsrc ! {rest}` that stops after `packets` packets, and waits until
    /// it has bound its port.
    fn start(caps: &str, packets: usize, rest: &str) -> Receiver {
        let port = UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port")
            .port();
        let pipeline = format!(
            "udpsrc address=127.0.0.1 port={port} reuse=false buffer-size=4194304 \
             num-buffers={packets} caps=\"{caps}\" ! {rest}"
        );
        let child = Command::new("gst-launch-1.0")
            .arg("-q")
            .args(shell_words(&pipeline))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gst-launch-1.0 starts");
        let mut r = Receiver { child, port };
        // Bound once our own bind of that port fails (udpsrc does not share it).
        let deadline = Instant::now() + GST_TIMEOUT;
        while UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            assert!(
                r.child.try_wait().expect("wait").is_none(),
                "gst-launch-1.0 exited: {}",
                r.stderr()
            );
            assert!(Instant::now() < deadline, "udpsrc never bound {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    fn stderr(&mut self) -> String {
        let _ = self.child.kill();
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().expect("true"));
        out.wait_with_output()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default()
    }

    /// Sends the packets, paced so the receive buffer never overflows.
    fn send(&self, frames: &[Vec<Bytes>]) {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a socket");
        for packets in frames {
            for p in packets {
                socket.send_to(p, ("127.0.0.1", self.port)).expect("send");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for the pipeline to end (its `num-buffers` reached).
    fn finish(mut self) {
        let deadline = Instant::now() + GST_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "gst-launch-1.0 failed: {}", self.stderr());
                return;
            }
            if Instant::now() > deadline {
                panic!("GStreamer did not get every packet: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Splits a pipeline description like a shell would (double quotes only).
fn shell_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Sends `frames` of `track` to GStreamer, which depayloads and decodes them with
/// `depay ! dec`; returns the decoded I420 frames.
fn gst_decode(
    dir: &Path,
    track: &Track,
    name: &str,
    depay_dec: &str,
    frames: &[(i64, Vec<u8>, bool)],
) -> Vec<u8> {
    let packets = packetize(track, frames);
    let count: usize = packets.iter().map(Vec::len).sum();
    let pt = RtpCodec::for_track(track)
        .expect("codec")
        .default_payload_type();
    let caps =
        format!("application/x-rtp,media=video,clock-rate=90000,encoding-name={name},payload={pt}");
    let out = dir.join("decoded.yuv");
    let rest = format!(
        "{depay_dec} ! videoconvert ! video/x-raw,format=I420 ! filesink location={}",
        out.display()
    );
    let receiver = Receiver::start(&caps, count, &rest);
    receiver.send(&packets);
    receiver.finish();
    std::fs::read(&out).expect("decoded frames")
}

fn assert_same_frames(got: &[u8], want: &[u8], clip: &Clip, shown: usize) {
    let frame = clip.width * clip.height * 3 / 2;
    assert_eq!(
        want.len(),
        shown * frame,
        "ffmpeg decodes every shown frame"
    );
    assert_eq!(got.len() / frame, shown, "frames decoded from our packets");
    let differ: Vec<usize> = (0..shown)
        .filter(|i| got[i * frame..(i + 1) * frame] != want[i * frame..(i + 1) * frame])
        .collect();
    assert!(
        differ.is_empty(),
        "decoded pictures {differ:?} differ from ffmpeg's"
    );
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_gst_vpx)),
    ignore = "needs ffmpeg and GStreamer's VP8 RTP elements"
)]
fn vp8_packets_decode_in_gstreamer() {
    if !crate::common::ffmpeg_present() || !gst_present(&["udpsrc", "rtpvp8depay", "vp8dec"]) {
        return;
    }
    let dir = TempDir::new("vp8");
    let ivf = encode(
        &dir.0,
        "vp8.ivf",
        &["-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8"],
    );
    let clip = read_ivf(&ivf);
    // The frame tag (RFC 6386 §9.1): bit 0 is 0 for key frames, bit 4 is show_frame.
    let frames: Vec<_> = clip
        .frames
        .iter()
        .map(|(pts, f)| (*pts, f.clone(), f[0] & 1 == 0))
        .collect();
    let shown = clip.frames.iter().filter(|(_, f)| f[0] & 0x10 != 0).count();
    assert_eq!(shown, 50);
    let track = Track::new(TrackConfig::Vp8 {
        record: Bytes::new(),
    });
    let got = gst_decode(&dir.0, &track, "VP8", "rtpvp8depay ! vp8dec", &frames);
    assert_same_frames(&got, &ffmpeg_decode(&ivf), &clip, shown);
}

#[test]
#[cfg_attr(
    not(all(have_ffmpeg, have_gst_vpx)),
    ignore = "needs ffmpeg and GStreamer's VP9 RTP elements"
)]
fn vp9_packets_with_superframes_decode_in_gstreamer() {
    if !crate::common::ffmpeg_present() || !gst_present(&["udpsrc", "rtpvp9depay", "vp9dec"]) {
        return;
    }
    let dir = TempDir::new("vp9");
    let ivf = encode_vp9(&dir.0);
    let clip = read_ivf(&ivf);
    let mut superframes = 0;
    let mut shown = 0;
    let frames: Vec<_> = clip
        .frames
        .iter()
        .map(|(pts, chunk)| {
            let frames = vp9_frames(chunk);
            superframes += usize::from(frames.is_superframe());
            let headers: Vec<_> = frames
                .map(|f| vp9_frame_header(f).expect("a VP9 frame"))
                .collect();
            shown += headers
                .iter()
                .filter(|h| h.show_frame || h.show_existing_frame)
                .count();
            (*pts, chunk.clone(), headers[0].keyframe)
        })
        .collect();
    assert!(superframes > 0, "the two-pass clip has superframes");
    assert_eq!(shown, 50);
    let track = Track::new(TrackConfig::Vp9 {
        record: Bytes::new(),
    });
    let got = gst_decode(&dir.0, &track, "VP9", "rtpvp9depay ! vp9dec", &frames);
    assert_same_frames(&got, &ffmpeg_decode(&ivf), &clip, shown);
}

/// A receiver of the AV1 payload format (§4.4, §4.5): the temporal units of `packets`
/// (one per marker bit), each a temporal delimiter and the OBUs with sizes restored.
fn av1_receive(packets: &[Bytes]) -> Vec<Vec<u8>> {
    let mut units = Vec::new();
    let mut obus: Vec<Vec<u8>> = Vec::new();
    for p in packets {
        let pkt = RtpPacket::parse(p).expect("RTP");
        let (&agg, mut rest) = pkt.payload.split_first().expect("aggregation header");
        let (z, w) = (agg & 0x80 != 0, usize::from((agg >> 4) & 3));
        let mut n = 0;
        while !rest.is_empty() {
            n += 1;
            let len = if w != 0 && n == w {
                rest.len()
            } else {
                let (len, used) = read_leb128(rest).expect("length");
                rest = &rest[used..];
                len as usize
            };
            let (element, tail) = rest.split_at(len);
            rest = tail;
            match obus.last_mut() {
                Some(last) if n == 1 && z => last.extend_from_slice(element),
                _ => obus.push(element.to_vec()),
            }
        }
        if pkt.header.marker {
            let mut unit = vec![0x12, 0x00];
            for o in obus.drain(..) {
                let header_len = if o[0] & 0x04 != 0 { 2 } else { 1 };
                let mut leb = [0u8; 10];
                let used = write_leb128(o.len() - header_len, &mut leb);
                unit.push(o[0] | 0x02);
                unit.extend_from_slice(&o[1..header_len]);
                unit.extend_from_slice(&leb[..used]);
                unit.extend_from_slice(&o[header_len..]);
            }
            units.push(unit);
        }
    }
    units
}

#[test]
#[cfg_attr(not(have_ffmpeg), ignore = "needs ffmpeg")]
fn av1_packets_reassemble_and_decode_in_ffmpeg() {
    if !crate::common::ffmpeg_present() {
        return;
    }
    let dir = TempDir::new("av1");
    let ivf = encode(&dir.0, "av1.ivf", &["-c:v", "libaom-av1", "-cpu-used", "8"]);
    let clip = read_ivf(&ivf);
    let is_sequence_header = |o: &[u8]| (o[0] >> 3) & 0x0f == AV1_OBU_SEQUENCE_HEADER;
    let mut sequence_header = None;
    // Key frames are the temporal units with a sequence header (libaom sends one with
    // each); it is taken out, for the packetizer to put back from av1C.
    let frames: Vec<_> = clip
        .frames
        .iter()
        .map(|(pts, tu)| {
            assert!(av1_obus(tu).all(|o| o.is_ok()), "libaom's OBUs parse");
            let mut kept = Vec::new();
            let mut keyframe = false;
            let mut at = 0;
            while at < tu.len() {
                let whole = &tu[at..at + whole_obu_len(&tu[at..])];
                at += whole.len();
                if is_sequence_header(whole) {
                    keyframe = true;
                    sequence_header.get_or_insert_with(|| whole.to_vec());
                } else {
                    kept.extend_from_slice(whole);
                }
            }
            (*pts, kept, keyframe)
        })
        .collect();
    let keyframes = frames.iter().filter(|f| f.2).count();
    assert_eq!(keyframes, 2, "a key frame a second");
    let record = [
        &[0x81, 0x00, 0x0c, 0x00][..],
        &sequence_header.expect("a sequence header"),
    ]
    .concat();
    let track = Track::new(TrackConfig::Av1 {
        record: Bytes::from(record),
    });
    let packets: Vec<Bytes> = packetize(&track, &frames).into_iter().flatten().collect();
    let units = av1_receive(&packets);
    assert_eq!(units.len(), clip.frames.len());
    let rebuilt = dir.0.join("rebuilt.ivf");
    write_ivf(&rebuilt, b"AV01", &clip, &units);
    assert_same_frames(&ffmpeg_decode(&rebuilt), &ffmpeg_decode(&ivf), &clip, 50);
}

/// The length of the OBU (with its size field) at the start of `data`.
fn whole_obu_len(data: &[u8]) -> usize {
    let header_len = if data[0] & 0x04 != 0 { 2 } else { 1 };
    if data[0] & 0x02 == 0 {
        return data.len();
    }
    let (size, used) = read_leb128(&data[header_len..]).expect("size");
    header_len + used + size as usize
}

/// Where tools are required (CI), GStreamer's VP8/VP9 elements were found when the
/// tests were built, so the tests above were not compiled as ignored.
#[test]
fn required_gstreamer_elements_were_found() {
    assert!(
        std::env::var("SLUICE_REQUIRE_TOOLS").as_deref() != Ok("1") || cfg!(have_gst_vpx),
        "SLUICE_REQUIRE_TOOLS=1, but the build found no GStreamer VP8/VP9 RTP elements \
         (udpsrc, rtpvp8depay, rtpvp9depay, vp8dec, vp9dec: gstreamer1.0-plugins-good)"
    );
}
