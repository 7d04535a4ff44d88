//! A packet: one frame, sequence header or metadata message of a stream, with each
//! output format's bytes made at most once and shared by every player.
//!
//! Why lazily: a format nobody plays costs nothing, and the first worker that needs a
//! format builds it for all the others (`OnceLock`), so the bytes exist once per
//! stream whatever the number of players or workers. Formats are registered in
//! `format`; a packet holds one slot per registered format.
//!
//! The exception is RTP: a packetizer numbers packets on from frame to frame, so the
//! RTP form of a frame is made once, in stream order, by the publisher as it pushes
//! the frame ([`RtpSource`], only while an RTSP listener is on), and shared by every
//! RTSP player like the lazy forms.

use crate::core::format::{self, Format};
use bytes::Bytes;
use sluice_media::rtp::{self, RtpStart};
use sluice_media::{Frame, MediaKind, Track};
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
    /// This packet in each registered output format, built on first use.
    forms: [OnceLock<Bytes>; format::COUNT],
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
            forms: std::array::from_fn(|_| OnceLock::new()),
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

    /// The bytes of this packet for a player of `format` (empty when the player does
    /// not take it), made once per packet and format and shared.
    pub fn bytes(&self, format: Format, shape: &Shape) -> &Bytes {
        static EMPTY: Bytes = Bytes::new();
        if !format.wants(self.kind()) {
            return &EMPTY;
        }
        self.forms[format.id.index()].get_or_init(|| format.id.build(self, shape))
    }

    /// Length of this packet in `format`.
    pub fn len(&self, format: Format, shape: &Shape) -> usize {
        self.bytes(format, shape).len()
    }
}
