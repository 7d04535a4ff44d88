//! A packet: one frame, sequence header or metadata message of a stream, with each
//! output format's bytes made at most once and shared by every player.
//!
//! Why on demand: a format nobody plays costs nothing. While a format has players, the
//! publisher builds each new packet's form before pushing it ([`Packet::prepare`]), so
//! workers only read; a packet that came before the first player (the GOP cache) is
//! built by the first worker that needs it. Nobody waits for another thread to build a
//! form: two workers racing build it twice and one copy is kept. Formats are
//! registered in `format`; a packet holds one slot per registered format.
//!
//! The exception is RTP: a packetizer numbers packets on from frame to frame, so the
//! RTP form of a frame is made in stream order, by the stream's [`RtpSource`] while an
//! RTSP player needs it (see `hub::Stream::want_rtp`), and shared like the other forms.

use crate::core::format::{self, Format, FormatId};
use bytes::Bytes;
use sluice_media::rtp::{self, RtpStart};
use sluice_media::{Frame, MediaKind, Timestamp, Track};
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
    /// The frame's RTP packets, made by the stream's [`RtpSource`] in stream order (not
    /// lazily by a player: sequence numbers must follow stream order).
    rtp: OnceLock<RtpForm>,
    /// The payload's bytes, fixed at birth: what the ring counts it for.
    size: usize,
    /// Made by the server from the stream's own media (Opus from its AAC, for WebRTC
    /// players): only players that ask for it get it, and no other consumer.
    pub derived: bool,
}

/// The stream's RTP source ([`rtp::RtpSource`]) with what it takes from the world:
/// random starting points (RFC 3550 §5.1) and the wall clock of its sender reports.
#[derive(Debug)]
pub struct RtpSource {
    source: rtp::RtpSource,
    /// For a stream fed ahead of real time (a file or recording played by a pacer):
    /// sender reports tell the wall clock from media time since the first frame, the
    /// wall clock then and that frame's time once known. The pacer pushes its first
    /// second at once and the rest a second early, so the clock at packetizing would
    /// tell players a second's jump (ffmpeg's RTSP reader then steps its times back).
    media_clock: Option<Option<(Duration, Timestamp)>>,
}

/// A random SSRC, first sequence number and timestamp offset.
fn random_start() -> RtpStart {
    RtpStart {
        ssrc: rand::random(),
        seq: rand::random(),
        timestamp: rand::random(),
    }
}

/// Wall-clock time since the Unix epoch.
pub(crate) fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl RtpSource {
    /// Random SSRCs, first sequence numbers and timestamp offsets.
    pub fn new() -> Self {
        RtpSource {
            source: rtp::RtpSource::new(random_start(), random_start()),
            media_clock: None,
        }
    }

    /// Sender reports on media time (see [`RtpSource::media_clock`]).
    pub fn on_media_clock(&mut self) {
        self.media_clock.get_or_insert(None);
    }

    /// A new decoder configuration: a new packetizer that continues the numbering.
    pub fn set_track(&mut self, track: &Track) {
        self.source.set_track(track);
    }

    /// The RTP form of a frame (see [`rtp::RtpSource::packetize`]), sender reports
    /// stamped with the time now.
    pub fn packetize(&mut self, frame: &Frame) -> Option<RtpForm> {
        let now = match &mut self.media_clock {
            None => wall_clock(),
            Some(base) => {
                let (wall, pts) = *base.get_or_insert((wall_clock(), frame.pts));
                let ahead = u64::try_from(frame.pts.saturating_sub(pts)).unwrap_or(0);
                wall + Duration::from_micros(ahead.saturating_mul(1000) / 90)
            }
        };
        self.source.packetize(frame, now)
    }
}

impl Default for RtpSource {
    fn default() -> Self {
        Self::new()
    }
}

impl Packet {
    pub fn new(payload: Payload, ts_ms: i64, key: bool) -> Arc<Packet> {
        Self::make(payload, ts_ms, key, false)
    }

    /// A frame the server made from the stream's own (see [`Packet::derived`]) with its
    /// RTP form, made by the deriving track's own RTP source.
    pub fn derived(payload: Payload, ts_ms: i64, rtp: Option<RtpForm>) -> Arc<Packet> {
        let packet = Self::make(payload, ts_ms, false, true);
        if let Some(form) = rtp {
            packet.set_rtp(form);
        }
        packet
    }

    fn make(payload: Payload, ts_ms: i64, key: bool, derived: bool) -> Arc<Packet> {
        let size = match &payload {
            Payload::Media { frame, .. } => frame.payload.len(),
            Payload::Config(_) => 64,
            Payload::Metadata(b) => b.len(),
        };
        Arc::new(Packet {
            payload,
            ts_ms,
            key,
            forms: std::array::from_fn(|_| OnceLock::new()),
            rtp: OnceLock::new(),
            size,
            derived,
        })
    }

    /// Bytes in the ring's accounting: the payload's. Forms are built on demand and
    /// not counted, so the figure never changes while the ring holds the packet.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The frame's RTP packets, once its stream's RTP source made them.
    pub fn rtp(&self) -> Option<&RtpForm> {
        self.rtp.get()
    }

    /// Gives the packet its RTP form; only the stream's RTP source does, in order, once.
    pub(crate) fn set_rtp(&self, form: RtpForm) {
        let _ = self.rtp.set(form);
    }

    /// Builds the forms of `formats` now (on the publisher's thread, before the packet
    /// is pushed), so that workers only read them.
    pub fn prepare(&self, formats: impl Iterator<Item = FormatId>, shape: &Shape) {
        for id in formats {
            self.bytes(Format::all(id), shape);
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

    /// A decoder configuration (sequence header).
    pub fn is_config(&self) -> bool {
        matches!(self.payload, Payload::Config(_))
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
        if !format.wants(self) {
            return &EMPTY;
        }
        // The fast path first: a built form (per player per packet on every flush).
        let slot = &self.forms[format.id.index()];
        if let Some(bytes) = slot.get() {
            return bytes;
        }
        if let Some(held) = format.id.held(self) {
            return held;
        }
        // Built outside the cell: a worker racing another builds its own copy rather
        // than wait for it; the first one stored is the one everybody shares.
        let _ = slot.set(format.id.build(self, shape));
        slot.get().unwrap_or(&EMPTY)
    }

    /// Gives the packet a form made in stream order by its stream (MPEG-TS); once.
    pub(crate) fn set_form(&self, id: FormatId, bytes: Bytes) {
        let _ = self.forms[id.index()].set(bytes);
    }

    /// The form of `id` if it was built or set (a form made in stream order, read by a
    /// consumer that is no player: a UDP push of the TS form).
    pub fn form(&self, id: FormatId) -> Option<&Bytes> {
        self.forms[id.index()].get()
    }

    /// Whether the form of `id` was built or set.
    pub fn has_form(&self, id: FormatId) -> bool {
        self.forms[id.index()].get().is_some()
    }

    /// Whether the form of `id` was built (for tests of who builds what).
    #[cfg(test)]
    pub fn built(&self, id: FormatId) -> bool {
        self.has_form(id)
    }

    /// Length of this packet in `format`.
    pub fn len(&self, format: Format, shape: &Shape) -> usize {
        self.bytes(format, shape).len()
    }
}
