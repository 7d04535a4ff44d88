//! RTSP publishers looping a clip (`sluice-bench publish --protocol rtsp` and
//! `rtsp-udp`): ANNOUNCE the clip's tracks, SETUP each with `mode=record`, RECORD, then
//! RTP with the continuous timeline of the RTMP publishers (`super::publish`), and
//! the same wall-clock SEI stamps in H.264 frames.
//!
//! - [`RtspClip`]: the clip's tags as tracks and frames, made once per run and shared.
//! - [`run`]: one publisher, driven by `crate::rtsp_record::Recorder` over
//!   `sluice_rtsp::ClientSession`.
//!
//! Each frame is packetized once, by the publisher's `RtpPacketizer` of its track, into
//! one reused `RtpFrame` buffer; nothing is allocated per packet or, in steady state,
//! per frame. Over TCP the packets carry their interleave headers and go out in one
//! write per flush: every frame due at the same instant (paced), or up to
//! [`FLUSH_AT`] bytes (not paced). Over UDP each packet is a datagram from the track's
//! RTP port to the server's `server_port`.
//!
//! `bytes_sent` counts what goes on the wire for media: RTP packets, with their
//! 4-byte interleave headers over TCP. Requests and their answers are not counted.
//!
//! # Invariants
//! - Every await is bounded by the run's end (the last TEARDOWN by a short limit of
//!   its own); the connection is read while waiting for a frame to be due, so a
//!   server that closes or refuses a keep-alive ends the publisher at once.
//! - A write the run's end cut short is never followed by anything (no TEARDOWN in
//!   the middle of a packet).

use super::rtsp::{bind_pair, play_failure};
use super::{io_failure, Conn, Failure, Woke};
use crate::figures::{ms, ErrorKind};
use crate::load::publish::{PublishCtx, PublisherRow};
use crate::rtsp::{drain, Lower, PlayError, RtspClient};
use crate::rtsp_record::{announce_sdp, Recorder};
use bytes::{Bytes, BytesMut};
use sluice_bench::clip::Clip;
use sluice_media::flv::{parse_audio, parse_video, AudioTag, VideoTag, TAG_AUDIO, TAG_VIDEO};
use sluice_media::rtp::{RtpCodec, RtpFrame, RtpPacketizer, DEFAULT_MTU};
use sluice_media::{Frame, MediaKind, Track, TrackConfig};
use sluice_rtsp::{ClientOutput, PortPair};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::time::Instant;

/// Bytes packetized before a write when not pacing (as the RTMP publishers flush).
const FLUSH_AT: usize = 64 << 10;
/// How long the last TEARDOWN may take to go out after the run's end.
const TEARDOWN_LIMIT: Duration = Duration::from_millis(500);

/// One coded frame of the clip, ready to packetize.
#[derive(Debug, Clone)]
pub(crate) struct ClipFrame {
    /// Index into [`RtspClip::tracks`].
    pub(crate) track: usize,
    kind: MediaKind,
    /// Decode time in the clip, ms.
    pub(crate) ts_ms: i64,
    /// Composition offset, ms.
    cts_ms: i32,
    pub(crate) keyframe: bool,
    /// Length-prefixed NAL units (H.264/H.265) or the raw audio frame: a slice of the tag.
    pub(crate) payload: Bytes,
    /// An H.264 frame with 4-byte NAL lengths: it gets the wall-clock SEI.
    pub(crate) stampable: bool,
}

/// The clip as RTP needs it: the tracks to ANNOUNCE and every coded frame in order
/// (the SRT publishers mux the same frames into MPEG-TS).
#[derive(Debug)]
pub(crate) struct RtspClip {
    /// Video first, then audio (at most one of each): the SDP's order.
    pub(crate) tracks: Vec<Track>,
    pub(crate) frames: Vec<ClipFrame>,
    /// The loop period, as the RTMP publishers use it.
    pub(crate) duration_ms: i64,
    /// What of the clip was left out, and why (for a warning).
    pub(crate) notes: Vec<String>,
}

impl RtspClip {
    /// The tracks and frames of `clip`. The first sequence header of each kind makes
    /// the track (RTSP announces its tracks once); tracks RTP cannot carry here (AV1,
    /// VP9, MP3) are left out with a note, and frames of another codec than their
    /// track's, or that do not packetize, are left out too. An error when no track is left.
    pub(crate) fn new(clip: &Clip) -> Result<RtspClip, String> {
        let mut notes = Vec::new();
        let (mut video, mut audio): (Option<Track>, Option<Track>) = (None, None);
        let mut unreadable = 0usize;
        for tag in &clip.tags {
            match tag.tag_type {
                TAG_VIDEO => match parse_video(&tag.body) {
                    Ok(VideoTag::Config(t)) if video.is_none() => video = Some(t),
                    Ok(_) => {}
                    Err(_) => unreadable += 1,
                },
                TAG_AUDIO => match parse_audio(&tag.body) {
                    Ok(AudioTag::Config(t)) if audio.is_none() => audio = Some(t),
                    // G.711 has no sequence header: its frames say what it is.
                    Ok(AudioTag::Frame {
                        implied: Some(t), ..
                    }) if audio.is_none() && RtpCodec::for_track(&t).is_ok() => audio = Some(t),
                    Ok(_) => {}
                    Err(_) => unreadable += 1,
                },
                _ => {}
            }
        }
        if unreadable > 0 {
            notes.push(format!("{unreadable} tags that do not parse left out"));
        }
        let mut tracks = Vec::new();
        for t in [video, audio].into_iter().flatten() {
            match RtpCodec::for_track(&t) {
                Ok(_) => tracks.push(t),
                Err(e) => notes.push(format!("a track left out: {e}")),
            }
        }
        if tracks.is_empty() {
            return Err("the clip has no track RTP carries here \
                 (H.264, H.265, AAC, Opus, G.711) with its sequence header"
                .into());
        }
        let index = |kind: MediaKind| tracks.iter().position(|t| t.kind() == kind);
        let mut frames = Vec::new();
        let mut wrong_codec = 0usize;
        for tag in &clip.tags {
            let frame = match tag.tag_type {
                TAG_VIDEO => match parse_video(&tag.body) {
                    Ok(VideoTag::Frame {
                        codec,
                        keyframe,
                        cts_ms,
                        data,
                    }) => index(MediaKind::Video).and_then(|track| {
                        let t = &tracks[track];
                        if t.video_codec() != Some(codec) {
                            wrong_codec += 1;
                            return None;
                        }
                        let stampable =
                            matches!(&t.config, TrackConfig::H264(c) if c.nal_length_size == 4);
                        Some(ClipFrame {
                            track,
                            kind: MediaKind::Video,
                            ts_ms: tag.ts_ms,
                            cts_ms,
                            keyframe,
                            payload: data,
                            stampable,
                        })
                    }),
                    _ => None,
                },
                TAG_AUDIO => match parse_audio(&tag.body) {
                    Ok(AudioTag::Frame { codec, data, .. }) => {
                        index(MediaKind::Audio).and_then(|track| {
                            if tracks[track].audio_codec() != Some(codec) {
                                wrong_codec += 1;
                                return None;
                            }
                            Some(ClipFrame {
                                track,
                                kind: MediaKind::Audio,
                                ts_ms: tag.ts_ms,
                                cts_ms: 0,
                                keyframe: true,
                                payload: data,
                                stampable: false,
                            })
                        })
                    }
                    _ => None,
                },
                _ => None,
            };
            frames.extend(frame);
        }
        if wrong_codec > 0 {
            notes.push(format!(
                "{wrong_codec} frames of another codec than their track's left out"
            ));
        }
        // Packetize once here, so that a frame RTP cannot carry is known before the run.
        let mut packetizers = packetizers(&tracks).map_err(|e| e.to_string())?;
        let mut scratch = RtpFrame::new();
        let before = frames.len();
        frames.retain(|f| {
            scratch.clear();
            let frame = f.frame(f.ts_ms, f.payload.clone());
            packetizers
                .get_mut(f.track)
                .is_some_and(|p| p.packetize(&frame, &mut scratch).is_ok())
        });
        if frames.len() < before {
            notes.push(format!(
                "{} frames that do not packetize left out",
                before - frames.len()
            ));
        }
        if frames.is_empty() {
            return Err("the clip has no frame to send".into());
        }
        Ok(RtspClip {
            tracks,
            frames,
            duration_ms: clip.duration_ms,
            notes,
        })
    }
}

impl ClipFrame {
    /// The frame at decode time `ts_ms` on the publisher's timeline.
    pub(crate) fn frame(&self, ts_ms: i64, payload: Bytes) -> Frame {
        let dts = Frame::ticks_from_ms(ts_ms);
        Frame {
            kind: self.kind,
            dts,
            pts: dts.saturating_add(Frame::ticks_from_ms(i64::from(self.cts_ms))),
            keyframe: self.keyframe,
            payload,
        }
    }
}

/// A packetizer per track, at the payload types of the SDP; random SSRC, first
/// sequence number and timestamp offset (RFC 3550 §5.1); no parameter sets added.
fn packetizers(tracks: &[Track]) -> Result<Vec<RtpPacketizer>, sluice_media::rtp::RtpError> {
    tracks
        .iter()
        .map(|t| {
            let pt = RtpCodec::for_track(t)?.default_payload_type();
            let mut p = RtpPacketizer::new(t, pt, rand::random(), DEFAULT_MTU)?;
            p.set_start(rand::random(), rand::random());
            // The SDP carries the parameter sets (as ffmpeg's publisher relies on): frames
            // go out as the clip has them, as the RTMP publishers send them, so our SEI
            // stays the first NAL unit of keyframes too, where FLV and RTMP players look.
            p.set_insert_parameter_sets(false);
            Ok(p)
        })
        .collect()
}

/// Where RTP goes.
enum Out {
    /// Interleaved on the connection: the RTP channel of each track.
    Tcp(Vec<u8>),
    /// Datagrams: per track, its RTP socket connected to the server's RTP port (the
    /// RTCP socket is held so that its port stays ours).
    Udp(Vec<(UdpSocket, UdpSocket)>),
}

/// One publisher's state besides its connection.
struct Publisher<'a> {
    ctx: &'a PublishCtx,
    clip: &'a RtspClip,
    recorder: Recorder,
    /// Requests to write.
    out: BytesMut,
    local_ip: IpAddr,
    /// UDP: the sockets bound when the session asked for ports, in track order.
    udp: Vec<(UdpSocket, UdpSocket)>,
    recording: bool,
}

/// Publishes `url` until the run ends.
pub(crate) async fn run(
    ctx: &PublishCtx,
    clip: &RtspClip,
    url: &str,
    lower: Lower,
    row: &mut PublisherRow,
) -> Result<(), Failure> {
    let start = Instant::now();
    let Some(mut conn) = Conn::open(ctx.addr, None, ctx.end, None).await? else {
        return Ok(());
    };
    let local_ip = conn.local_ip()?;
    let origin = match local_ip {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(_) => "127.0.0.1".to_string(),
    };
    let sdp = announce_sdp(&clip.tracks, &row.stream, &origin, rand::random())
        .map_err(|e| (ErrorKind::Protocol, format!("SDP: {e}")))?;
    let recorder = Recorder::new(
        url,
        lower,
        sdp,
        clip.tracks.len(),
        Instant::now().into_std(),
    )
    .map_err(play_failure)?;
    let mut p = Publisher {
        ctx,
        clip,
        recorder,
        out: BytesMut::with_capacity(1024),
        local_ip,
        udp: Vec::new(),
        recording: false,
    };
    p.drain().map_err(play_failure)?;
    while !p.recording {
        if !p.write_requests(&mut conn).await? {
            return Ok(());
        }
        match conn.readable_or(std::future::pending::<()>()).await? {
            Woke::Ended => return Ok(()),
            Woke::Readable => p.read(&mut conn)?,
            Woke::Other(()) => {}
        }
    }
    row.connect_ms = Some(ms(start.elapsed()));
    ctx.live.connected.fetch_add(1, Ordering::Relaxed);
    let out = match lower {
        Lower::Tcp => Out::Tcp(p.recorder.channels()),
        Lower::Udp => Out::Udp(p.connect_udp()?),
    };
    let cut = p.send_media(&mut conn, out, row).await?;
    if !cut && p.recorder.session().teardown() {
        // Only the TEARDOWN is wanted now: its answer is not waited for.
        while let Some(o) = p.recorder.session().poll_output() {
            if let ClientOutput::Write(b) = o {
                p.out.extend_from_slice(&b);
            }
        }
        conn.write_within(&p.out, TEARDOWN_LIMIT).await;
    }
    Ok(())
}

impl Publisher<'_> {
    /// Writes queued requests; `false` when the run ended first.
    async fn write_requests(&mut self, conn: &mut Conn) -> Result<bool, Failure> {
        if !self.out.is_empty() {
            if !conn.write(&self.out).await? {
                return Ok(false);
            }
            self.out.clear();
        }
        Ok(true)
    }

    /// Drains the session: requests to `out`, events to the recorder; binds UDP
    /// ports when asked.
    fn drain(&mut self) -> Result<(), PlayError> {
        let (local_ip, udp) = (self.local_ip, &mut self.udp);
        let started = drain(&mut self.recorder, &mut self.out, &mut |n| {
            let mut ports = Vec::with_capacity(n);
            for _ in 0..n {
                let (rtp, rtcp) = bind_pair(local_ip)?;
                ports.push(PortPair {
                    rtp: rtp.local_addr()?.port(),
                    rtcp: rtcp.local_addr()?.port(),
                });
                udp.push((rtp, rtcp));
            }
            Ok(ports)
        })?;
        self.recording |= started;
        Ok(())
    }

    /// Reads what the server sent (answers; RTCP, which is ignored) without waiting.
    fn read(&mut self, conn: &mut Conn) -> Result<(), Failure> {
        let got = conn.try_read_uncounted(|mut data, now| -> Result<(), PlayError> {
            while !data.is_empty() {
                let used = self.recorder.session().handle_input_in_place(
                    now.into_std(),
                    data,
                    &mut |_, _| {},
                )?;
                self.drain()?;
                data = data.get(used..).unwrap_or_default();
            }
            Ok(())
        })?;
        if let Some(r) = got {
            r.map_err(play_failure)?;
        }
        Ok(())
    }

    /// Connects each track's RTP socket to the server's RTP port for it.
    fn connect_udp(&mut self) -> Result<Vec<(UdpSocket, UdpSocket)>, Failure> {
        let server_ip = self.ctx.addr.ip();
        let socks = std::mem::take(&mut self.udp);
        let server_ports = self.recorder.server_ports();
        if socks.len() != server_ports.len() {
            return Err((
                ErrorKind::Protocol,
                "UDP ports for another number of tracks".into(),
            ));
        }
        for (i, ((rtp, _), port)) in socks.iter().zip(server_ports).enumerate() {
            let Some(port) = port else {
                return Err((ErrorKind::Protocol, format!("no server_port for track {i}")));
            };
            connect_now(rtp, SocketAddr::new(server_ip, port.rtp)).map_err(io_failure)?;
        }
        Ok(socks)
    }

    /// Sends the clip in a loop until the run ends; `true` when a write was cut short.
    async fn send_media(
        &mut self,
        conn: &mut Conn,
        out: Out,
        row: &mut PublisherRow,
    ) -> Result<bool, Failure> {
        let (clip, end, realtime) = (self.clip, self.ctx.end, self.ctx.realtime);
        let mut packetizers =
            packetizers(&clip.tracks).map_err(|e| (ErrorKind::Protocol, e.to_string()))?;
        let mut rtp = RtpFrame::new();
        let mut stamped = BytesMut::new();
        let t0 = Instant::now();
        for round in 0i64.. {
            for f in &clip.frames {
                let ts = f
                    .ts_ms
                    .saturating_add(round.saturating_mul(clip.duration_ms));
                let due = t0 + Duration::from_millis(u64::try_from(ts).unwrap_or(0));
                if realtime && due > Instant::now() {
                    if !self.flush(conn, &out, &mut rtp, row).await? {
                        return Ok(true);
                    }
                    if !self.wait(conn, due.min(end)).await? {
                        return Ok(false);
                    }
                } else if !realtime && rtp.as_bytes().len() >= FLUSH_AT {
                    if !self.flush(conn, &out, &mut rtp, row).await? {
                        return Ok(true);
                    }
                    if !self.service(conn).await? {
                        return Ok(false);
                    }
                }
                if Instant::now() >= end {
                    return Ok(false);
                }
                let payload = if f.stampable && self.ctx.stamp {
                    crate::stamp::stamp_nals(&mut stamped, &f.payload, crate::stamp::unix_us());
                    stamped.split().freeze()
                } else {
                    f.payload.clone()
                };
                let frame = f.frame(ts, payload);
                let Some(packetizer) = packetizers.get_mut(f.track) else {
                    continue;
                };
                let packed = match &out {
                    Out::Tcp(channels) => {
                        let channel = channels.get(f.track).copied().unwrap_or(0);
                        packetizer.packetize_interleaved(&frame, channel, &mut rtp)
                    }
                    Out::Udp(_) => packetizer.packetize(&frame, &mut rtp),
                };
                // Checked when the clip was read; a failure here is our bug, not the server's.
                packed.map_err(|e| (ErrorKind::Protocol, format!("packetizing: {e}")))?;
                drop(frame);
                row.tags_sent += 1;
                if let Out::Udp(socks) = &out {
                    // Datagrams go per frame: each track has its own socket.
                    if !self.send_datagrams(socks, f.track, &mut rtp, row).await? {
                        return Ok(false);
                    }
                }
            }
            if clip.duration_ms <= 0 {
                break;
            }
        }
        Ok(!self.flush(conn, &out, &mut rtp, row).await?)
    }

    /// Writes the packets in `rtp` (TCP) in one write; `false` when the run ended
    /// during the write, which may then be cut short.
    async fn flush(
        &mut self,
        conn: &mut Conn,
        out: &Out,
        rtp: &mut RtpFrame,
        row: &mut PublisherRow,
    ) -> Result<bool, Failure> {
        let Out::Tcp(_) = out else {
            return Ok(true);
        };
        let bytes = rtp.as_bytes();
        if bytes.is_empty() {
            return Ok(true);
        }
        if !conn.write(bytes).await? {
            return Ok(false);
        }
        row.bytes_sent += bytes.len() as u64;
        self.ctx.live.add_bytes(bytes.len());
        rtp.clear();
        Ok(true)
    }

    /// Sends the packets in `rtp` as datagrams from track `track`'s RTP socket.
    async fn send_datagrams(
        &mut self,
        socks: &[(UdpSocket, UdpSocket)],
        track: usize,
        rtp: &mut RtpFrame,
        row: &mut PublisherRow,
    ) -> Result<bool, Failure> {
        let Some((sock, _)) = socks.get(track) else {
            rtp.clear();
            return Ok(true);
        };
        for packet in rtp.packets() {
            loop {
                match sock.try_send(packet) {
                    Ok(n) => {
                        row.bytes_sent += n as u64;
                        self.ctx.live.add_bytes(n);
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        tokio::select! {
                            biased;
                            _ = tokio::time::sleep_until(self.ctx.end) => return Ok(false),
                            r = sock.writable() => r.map_err(io_failure)?,
                        }
                    }
                    Err(e) => return Err(io_failure(e)),
                }
            }
        }
        rtp.clear();
        Ok(true)
    }

    /// The session's next timer (a keep-alive), if any.
    fn timer(&mut self) -> Option<Instant> {
        self.recorder
            .session()
            .poll_timeout()
            .map(Instant::from_std)
    }

    /// Sends a keep-alive when one is due and reads what came, without waiting;
    /// `false` when the run ended.
    async fn service(&mut self, conn: &mut Conn) -> Result<bool, Failure> {
        let now = Instant::now();
        if self.timer().is_some_and(|at| now >= at) {
            self.recorder.session().handle_timeout(now.into_std());
            self.drain().map_err(play_failure)?;
        }
        if !self.write_requests(conn).await? {
            return Ok(false);
        }
        self.read(conn)?;
        Ok(true)
    }

    /// Until `until`, reading the connection and sending keep-alives; `false` when the
    /// run ended.
    async fn wait(&mut self, conn: &mut Conn, until: Instant) -> Result<bool, Failure> {
        loop {
            if !self.service(conn).await? {
                return Ok(false);
            }
            let now = Instant::now();
            if now >= until {
                return Ok(true);
            }
            let wake = self.timer().map_or(until, |k| k.min(until));
            match conn.readable_or(tokio::time::sleep_until(wake)).await? {
                Woke::Ended => return Ok(false),
                Woke::Readable | Woke::Other(()) => {}
            }
        }
    }
}

/// `connect(2)` on a UDP socket: sends go to `to`, and only its datagrams are read.
fn connect_now(sock: &UdpSocket, to: SocketAddr) -> io::Result<()> {
    socket2::SockRef::from(sock).connect(&to.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_bench::Tag;
    use sluice_media::codec::{AacConfig, AvcConfig};
    use sluice_media::flv::{self, TAG_SCRIPT};

    fn clip_of(tags: Vec<Tag>) -> Clip {
        Clip {
            tags,
            duration_ms: 80,
        }
    }

    fn tag(tag_type: u8, ts_ms: i64, body: &BytesMut) -> Tag {
        Tag {
            tag_type,
            ts_ms,
            body: Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn clip_tags_become_tracks_and_frames() {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        let video = Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).unwrap(),
        ));
        let audio = Track::new(TrackConfig::Aac(
            AacConfig::parse(Bytes::from_static(&[0x11, 0x90])).unwrap(),
        ));
        let mut b = BytesMut::new();
        let mut tags = vec![Tag {
            tag_type: TAG_SCRIPT,
            ts_ms: 0,
            body: Bytes::from_static(b"\x02meta"),
        }];
        // Audio's sequence header first: the SDP still lists video first.
        flv::write_audio_config(&mut b, &audio).unwrap();
        tags.push(tag(TAG_AUDIO, 0, &b.split()));
        flv::write_video_config(&mut b, &video).unwrap();
        tags.push(tag(TAG_VIDEO, 0, &b.split()));
        flv::video_frame_header(&mut b, &video, true, 40).unwrap();
        b.extend_from_slice(&[0, 0, 0, 2, 0x65, 0x88]);
        tags.push(tag(TAG_VIDEO, 0, &b.split()));
        flv::audio_frame_header(&mut b, &audio).unwrap();
        b.extend_from_slice(&[0x21, 0x10]);
        tags.push(tag(TAG_AUDIO, 20, &b.split()));
        // A frame whose NAL length runs past its end does not packetize.
        flv::video_frame_header(&mut b, &video, false, 0).unwrap();
        b.extend_from_slice(&[0, 0, 0, 9, 0x41]);
        tags.push(tag(TAG_VIDEO, 40, &b.split()));
        let c = RtspClip::new(&clip_of(tags)).unwrap();
        assert_eq!(c.tracks, vec![video, audio]);
        assert_eq!(c.frames.len(), 2, "{:?}", c.frames);
        let (v, a) = (&c.frames[0], &c.frames[1]);
        assert_eq!(
            (v.track, v.keyframe, v.cts_ms, v.stampable),
            (0, true, 40, true)
        );
        assert_eq!(&v.payload[..], &[0, 0, 0, 2, 0x65, 0x88]);
        assert_eq!((a.track, a.ts_ms, a.stampable), (1, 20, false));
        assert_eq!(&a.payload[..], &[0x21, 0x10]);
        assert_eq!(c.notes, vec!["1 frames that do not packetize left out"]);
        // pts = dts + cts, in 90 kHz ticks, on the looped timeline.
        let f = v.frame(1000, v.payload.clone());
        assert_eq!((f.dts, f.pts), (90_000, 93_600));

        // A stamped keyframe leaves with our SEI as its first NAL unit (no parameter
        // sets in front), where FLV and RTMP players of the server look for it.
        let mut packetizers = packetizers(&c.tracks).unwrap();
        let mut stamped = BytesMut::new();
        let mut idr = vec![0, 0, 0x0b, 0xb8, 0x65];
        idr.resize(4 + 3000, 0x88);
        crate::stamp::stamp_nals(&mut stamped, &idr, 1234);
        let key = v.frame(0, stamped.split().freeze());
        let mut rtp = RtpFrame::new();
        packetizers[0]
            .packetize_interleaved(&key, 0, &mut rtp)
            .unwrap();
        let first = rtp.packets().next().unwrap();
        let payload = &first[12..];
        let first_nal = match payload[0] & 0x1f {
            24 => payload[3], // STAP-A: the first unit after its 2-byte size
            _ => payload[0],
        };
        assert_eq!(first_nal & 0x1f, 6, "{:x?}", &payload[..8]);
        assert_eq!(rtp.as_bytes()[..2], [b'$', 0]);

        // Without any sequence header there is nothing to announce.
        let e = RtspClip::new(&clip_of(vec![])).unwrap_err();
        assert!(e.contains("no track"), "{e}");
    }
}
