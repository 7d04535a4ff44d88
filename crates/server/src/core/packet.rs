//! A packet: one frame, sequence header or metadata message of a stream, with each
//! output format's bytes made at most once and shared by every player.
//!
//! Why lazily: a format nobody plays costs nothing, and the first worker that needs a
//! format builds it for all the others (`OnceLock`), so the bytes exist once per
//! stream whatever the number of players or workers.
//!
//! The exception is RTP: a packetizer numbers packets on from frame to frame, so the
//! RTP form of a frame is made once, in stream order, by the publisher as it pushes
//! the frame ([`RtpSource`], only while an RTSP listener is on), and shared by every
//! RTSP player like the lazy forms.

use bytes::{Bytes, BytesMut};
use sluice_media::rtp::{self, RtpStart};
use sluice_media::{flv, Frame, MediaKind, Track};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use sluice_media::rtp::{rtp_channel, RtpForm};

/// What a packet carries.
#[derive(Debug)]
pub enum Payload {
    /// A coded frame of the given track.
    Media { frame: Frame, track: Arc<Track> },
    /// A new decoder configuration (sequence header) for one kind of track.
    Config(Arc<Track>),
    /// A script data message (`onMetaData` and its object, AMF0).
    Metadata(Bytes),
}

/// Output formats a player can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// RTMP chunks on message stream 1.
    Rtmp,
    /// FLV tags (HTTP-FLV).
    Flv,
    /// FLV tags, each in one binary WebSocket frame.
    WsFlv,
    /// RTP packets interleaved on the RTSP connection (`$`, channel, length), on the
    /// channels of [`rtp_channel`], of the kinds of track the player set up.
    Rtp { video: bool, audio: bool },
}

/// Parameters that shape the shared bytes; the same for all players of a server.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub rtmp_chunk_size: usize,
}

/// One unit of the stream's timeline.
#[derive(Debug)]
pub struct Packet {
    pub payload: Payload,
    /// Decode time in ms on the stream's continuous timeline.
    pub ts_ms: i64,
    /// A player can start here: a video keyframe, or any audio frame of a stream
    /// without video.
    pub key: bool,
    flv: OnceLock<Bytes>,
    rtmp: OnceLock<Bytes>,
    /// The FLV tag inside one binary WebSocket frame, contiguous: one buffer per
    /// packet in a player's `writev` instead of two.
    ws: OnceLock<Bytes>,
    /// The frame's RTP packets, made by the stream's [`RtpSource`] when the packet was
    /// pushed (not lazily: sequence numbers must follow stream order).
    pub rtp: Option<RtpForm>,
}

/// The stream's RTP source ([`rtp::RtpSource`]) with what it takes from the world:
/// random starting points (RFC 3550 §5.1) and the wall clock of its sender reports.
#[derive(Debug)]
pub struct RtpSource(rtp::RtpSource);

/// A random SSRC, first sequence number and timestamp offset.
fn random_start() -> RtpStart {
    RtpStart {
        ssrc: rand::random(),
        seq: rand::random(),
        timestamp: rand::random(),
    }
}

/// Wall-clock time since the Unix epoch.
fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl RtpSource {
    /// Random SSRCs, first sequence numbers and timestamp offsets.
    pub fn new() -> Self {
        RtpSource(rtp::RtpSource::new(random_start(), random_start()))
    }

    /// A new decoder configuration: a new packetizer that continues the numbering.
    pub fn set_track(&mut self, track: &Track) {
        self.0.set_track(track);
    }

    /// The RTP form of a frame (see [`rtp::RtpSource::packetize`]), sender reports
    /// stamped with the time now.
    pub fn packetize(&mut self, frame: &Frame) -> Option<RtpForm> {
        self.0.packetize(frame, wall_clock())
    }
}

impl Default for RtpSource {
    fn default() -> Self {
        Self::new()
    }
}

impl Packet {
    pub fn new(payload: Payload, ts_ms: i64, key: bool) -> Arc<Packet> {
        Self::with_rtp(payload, ts_ms, key, None)
    }

    /// A packet with its RTP form made in advance (see [`RtpSource`]).
    pub fn with_rtp(payload: Payload, ts_ms: i64, key: bool, rtp: Option<RtpForm>) -> Arc<Packet> {
        Arc::new(Packet {
            payload,
            ts_ms,
            key,
            flv: OnceLock::new(),
            rtmp: OnceLock::new(),
            ws: OnceLock::new(),
            rtp,
        })
    }

    /// Bytes in the ring's accounting: the payload and its RTP form (made eagerly),
    /// whatever lazy formats get built.
    pub fn size(&self) -> usize {
        let rtp = self.rtp.as_ref().map_or(0, |r| r.data.len());
        rtp + match &self.payload {
            Payload::Media { frame, .. } => frame.payload.len(),
            Payload::Config(_) => 64,
            Payload::Metadata(b) => b.len(),
        }
    }

    /// Video or audio for media and decoder configurations; `None` for metadata.
    pub fn kind(&self) -> Option<MediaKind> {
        match &self.payload {
            Payload::Media { frame, .. } => Some(frame.kind),
            Payload::Config(track) => Some(track.kind()),
            Payload::Metadata(_) => None,
        }
    }

    pub fn is_video(&self) -> bool {
        match &self.payload {
            Payload::Media { frame, .. } => frame.kind == MediaKind::Video,
            Payload::Config(track) => track.kind() == MediaKind::Video,
            Payload::Metadata(_) => false,
        }
    }

    /// The FLV/RTMP tag type and body of this packet, or `None` when it has no FLV
    /// form (an audio codec whose sequence header FLV does not carry).
    fn tag_body(&self) -> Option<(u8, Bytes)> {
        let mut body = BytesMut::new();
        let tag_type = match &self.payload {
            Payload::Media { frame, track } => {
                let tag_type = match frame.kind {
                    MediaKind::Video => {
                        let cts = i32::try_from(frame.cts_ms()).unwrap_or(0);
                        flv::video_frame_header(&mut body, track, frame.keyframe, cts).ok()?;
                        flv::TAG_VIDEO
                    }
                    MediaKind::Audio => {
                        flv::audio_frame_header(&mut body, track).ok()?;
                        flv::TAG_AUDIO
                    }
                };
                body.extend_from_slice(&frame.payload);
                tag_type
            }
            Payload::Config(track) => match track.kind() {
                MediaKind::Video => {
                    flv::write_video_config(&mut body, track).ok()?;
                    flv::TAG_VIDEO
                }
                MediaKind::Audio => {
                    if !flv::write_audio_config(&mut body, track).ok()? {
                        return None;
                    }
                    flv::TAG_AUDIO
                }
            },
            Payload::Metadata(amf) => {
                body.extend_from_slice(amf);
                flv::TAG_SCRIPT
            }
        };
        Some((tag_type, body.freeze()))
    }

    /// RTMP and FLV carry 32-bit millisecond timestamps that wrap.
    fn ts32(&self) -> u32 {
        self.ts_ms as u32
    }

    /// The complete FLV tag, with its PreviousTagSize trailer.
    pub fn flv(&self) -> &Bytes {
        self.flv.get_or_init(|| {
            let Some((tag_type, body)) = self.tag_body() else {
                return Bytes::new();
            };
            let mut out = BytesMut::with_capacity(body.len() + 15);
            if flv::write_tag(&mut out, tag_type, self.ts32(), &body).is_err() {
                return Bytes::new();
            }
            out.freeze()
        })
    }

    /// The message as RTMP chunks on message stream 1.
    pub fn rtmp(&self, shape: &Shape) -> &Bytes {
        self.rtmp.get_or_init(|| {
            let Some((tag_type, body)) = self.tag_body() else {
                return Bytes::new();
            };
            let csid = match tag_type {
                flv::TAG_VIDEO => sluice_rtmp::CSID_VIDEO,
                flv::TAG_AUDIO => sluice_rtmp::CSID_AUDIO,
                _ => sluice_rtmp::CSID_DATA,
            };
            let mut out = BytesMut::with_capacity(body.len() + body.len() / 128 + 32);
            sluice_rtmp::write_message_chunks(
                &mut out,
                csid,
                self.ts32(),
                tag_type,
                1,
                &body,
                shape.rtmp_chunk_size,
            );
            out.freeze()
        })
    }

    /// The bytes of this packet in `format`, as up to two buffers written in order.
    pub fn parts(&self, format: Format, shape: &Shape) -> [&Bytes; 2] {
        static EMPTY: Bytes = Bytes::new();
        match format {
            Format::Rtmp => [self.rtmp(shape), &EMPTY],
            Format::Flv => [self.flv(), &EMPTY],
            Format::WsFlv => {
                let frame = self.ws.get_or_init(|| {
                    let tag = self.flv();
                    if tag.is_empty() {
                        return Bytes::new();
                    }
                    let mut out = BytesMut::with_capacity(tag.len() + 10);
                    sluice_http::ws::write_frame_header(
                        &mut out,
                        sluice_http::ws::Opcode::Binary,
                        tag.len(),
                    );
                    out.extend_from_slice(tag);
                    out.freeze()
                });
                [frame, &EMPTY]
            }
            // Decoder configurations and metadata travel in the SDP, not in RTP.
            Format::Rtp { video, audio } => {
                let wanted = match self.kind() {
                    Some(MediaKind::Video) => video,
                    Some(MediaKind::Audio) => audio,
                    None => false,
                };
                match &self.rtp {
                    Some(r) if wanted => [&r.data, &EMPTY],
                    _ => [&EMPTY, &EMPTY],
                }
            }
        }
    }

    /// Total length of this packet in `format`.
    pub fn len(&self, format: Format, shape: &Shape) -> usize {
        let [a, b] = self.parts(format, shape);
        a.len() + b.len()
    }
}
