//! Output formats, registered rather than enumerated: each format is one module with an
//! [`OutputFormat`] and one line in [`register!`]. The fan-out and the packets know
//! formats only by their [`FormatId`]; a packet keeps one lazily built form per
//! registered format, shared by every player of that format on every worker.
//!
//! Adding a format (WebRTC's RTP, SRT's TS): write its module, add its line below. A
//! format whose bytes run across packets (sequence numbers, continuity counters) is
//! made by the publisher in stream order while players claim it: its
//! [`OutputFormat::ordered`] gives the maker, and the hub needs no edit.

pub mod flv;
mod fmp4;
mod rtmp;
mod rtp;
mod ts;

pub(crate) use ts::aac_from_opus;

use crate::core::packet::Payload;

use crate::core::cue::StreamCue;
use crate::core::packet::{Packet, Shape};
use bytes::Bytes;
use sluice_media::{Frame, MediaKind, Track};
use std::fmt;
use std::sync::Arc;

/// The maker of a form made in stream order, one per stream: made at the format's
/// first claim, kept while the stream lives (its numbering continues), fed every
/// decoder configuration, and asked for the form of each packet while claimed.
pub trait OrderedForm: Send + fmt::Debug {
    /// A decoder configuration: the stream's own, or (`derived`) that of the audio the
    /// server makes from it (AAC from Opus).
    fn track(&mut self, track: &Arc<Track>, derived: bool);

    /// Whether the form carries `packet` (a frame, the stream's own or derived).
    fn takes(&self, packet: &Packet) -> bool;

    /// Whether `packet` has its form already (made during an earlier claim).
    fn made(&self, packet: &Packet) -> bool;

    /// Makes the form of `packet`, whose frame is `frame`.
    fn make(&mut self, packet: &Packet, frame: &Frame);

    /// An SCTE-35 cue of the stream's, between the frames it came between: a form that
    /// carries cues (TS) puts it before the next frame it makes.
    fn cue(&mut self, _cue: &Arc<StreamCue>) {}

    /// The stream is fed ahead of real time by a pacer (a file, a recording): times
    /// the form tells of the wall clock follow media time instead.
    fn media_clock(&mut self) {}
}

/// How a packet's shared bytes look in one output format.
pub trait OutputFormat: Sync {
    /// For logs.
    fn name(&self) -> &'static str;

    /// The bytes of `packet` in this format, built once per packet on first use and
    /// shared; empty when the format does not carry this packet.
    fn build(&self, packet: &Packet, shape: &Shape) -> Bytes;

    /// A new maker of this format's form, when it is made in stream order (see
    /// [`OrderedForm`]); `None`: players build it from each packet alone.
    fn ordered(&self) -> Option<Box<dyn OrderedForm>> {
        None
    }

    /// A form the packet holds already, made elsewhere (RTP, by the stream's packetizer
    /// in stream order): returned as is, never built or cached by a player.
    fn held<'a>(&self, packet: &'a Packet) -> Option<&'a Bytes> {
        let _ = packet;
        None
    }

    /// What a new player gets before the stream's decoder configurations (a file
    /// header, an init segment), given the stream's metadata and configurations now.
    fn preamble(&self, configs: &[Arc<Packet>]) -> Vec<Bytes> {
        let _ = configs;
        Vec::new()
    }

    /// Whether a player's stream describes its tracks once, at its start (fMP4's init
    /// segment): a new decoder configuration of the stream's own in line then ends the
    /// player, which starts again with the new one (see `fanout`).
    fn fixed_tracks(&self) -> bool {
        false
    }
}

/// Whether the stream's configurations `configs` have a video track, and an audio one.
pub(super) fn kinds(configs: &[Arc<Packet>]) -> (bool, bool) {
    let has = |video: bool| {
        configs
            .iter()
            .any(|p| matches!(p.payload, Payload::Config(_)) && p.is_video() == video)
    };
    (has(true), has(false))
}

macro_rules! register {
    ($($(#[$doc:meta])* $name:ident => $format:expr,)*) => {
        static FORMATS: &[&dyn OutputFormat] = &[$(&$format),*];

        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[repr(u8)]
        enum Index { $($name),* }

        impl FormatId {
            $($(#[$doc])* pub const $name: FormatId = FormatId(Index::$name as u8);)*
        }

        /// How many formats are registered: the forms a packet can hold.
        pub const COUNT: usize = [$(Index::$name),*].len();
    };
}

register! {
    /// RTMP chunks on message stream 1.
    RTMP => rtmp::Rtmp,
    /// FLV tags (HTTP-FLV).
    FLV => flv::Flv,
    /// FLV tags, each in one binary WebSocket frame.
    WS_FLV => flv::WsFlv,
    /// All RTP packets of a frame behind their interleave headers (RTSP), made by the
    /// publisher (see `packet::RtpSource`).
    RTP => rtp::Rtp,
    /// MPEG-TS packets of a frame (SRT), made by the stream's muxer in stream order.
    TS => ts::Ts,
    /// A `moof` + `mdat` per frame (HTTP-fMP4), made in stream order.
    FMP4 => fmp4::Fmp4,
    /// The same, each in one binary WebSocket message (made apart: only while claimed).
    WS_FMP4 => fmp4::WsFmp4,
}

/// A registered output format.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FormatId(u8);

impl FormatId {
    pub fn format(self) -> &'static dyn OutputFormat {
        FORMATS[usize::from(self.0)]
    }

    /// The slot of this format's form in a packet.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    pub fn build(self, packet: &Packet, shape: &Shape) -> Bytes {
        self.format().build(packet, shape)
    }

    pub fn held(self, packet: &Packet) -> Option<&Bytes> {
        self.format().held(packet)
    }

    /// Every registered format.
    pub fn all() -> impl Iterator<Item = FormatId> {
        (0..COUNT as u8).map(FormatId)
    }

    pub fn preamble(self, configs: &[Arc<Packet>]) -> Vec<Bytes> {
        self.format().preamble(configs)
    }

    pub fn fixed_tracks(self) -> bool {
        self.format().fixed_tracks()
    }
}

impl fmt::Debug for FormatId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.format().name())
    }
}

/// What a player takes: a format, and which tracks (an RTSP player may set up only one
/// of them; a WebRTC player of an AAC stream takes the Opus made from it instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    pub id: FormatId,
    pub video: bool,
    /// The stream's own audio.
    pub audio: bool,
    /// The audio the server transcodes from the stream's own ([`Packet::derived`]).
    pub transcoded: bool,
}

impl Format {
    /// Every track of the stream in format `id`.
    pub const fn all(id: FormatId) -> Format {
        Format {
            id,
            video: true,
            audio: true,
            transcoded: false,
        }
    }

    /// Every packet, the stream's own and the server's: for a form built from another
    /// format's (RTMP's and WebSocket-FLV's from FLV's), whose player chose already.
    pub const fn every(id: FormatId) -> Format {
        Format {
            id,
            video: true,
            audio: true,
            transcoded: true,
        }
    }

    /// Whether `packet` goes to the player (metadata: the format decides).
    pub fn wants(self, packet: &Packet) -> bool {
        if packet.derived {
            return self.transcoded;
        }
        match packet.kind() {
            Some(MediaKind::Video) => self.video,
            Some(MediaKind::Audio) => self.audio,
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_has_its_own_slot() {
        let ids = [
            FormatId::RTMP,
            FormatId::FLV,
            FormatId::WS_FLV,
            FormatId::RTP,
            FormatId::TS,
            FormatId::FMP4,
            FormatId::WS_FMP4,
        ];
        assert_eq!(COUNT, ids.len());
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(id.index(), i);
        }
        assert_eq!(format!("{:?}", FormatId::WS_FLV), "ws-flv");
    }

    #[test]
    fn transcoded_audio_goes_only_to_players_that_take_it() {
        use crate::core::packet::Payload;
        use sluice_media::codec::OpusConfig;
        use sluice_media::{Frame, Track, TrackConfig};
        use std::sync::Arc;
        let frame = Frame {
            kind: MediaKind::Audio,
            dts: 0,
            pts: 0,
            keyframe: true,
            payload: Bytes::from_static(&[0xfc, 0xff, 0xfe]),
        };
        let track = Arc::new(Track::new(TrackConfig::Opus(OpusConfig::stereo_48k())));
        let own = Packet::new(
            Payload::Media {
                frame: frame.clone(),
                track: track.clone(),
            },
            0,
            false,
        );
        let derived = Packet::derived(Payload::Media { frame, track }, 0, None);
        let rtsp = Format::all(FormatId::RTP);
        let whep = Format {
            audio: false,
            transcoded: true,
            ..rtsp
        };
        assert!(rtsp.wants(&own) && !rtsp.wants(&derived));
        assert!(!whep.wants(&own) && whep.wants(&derived));
        let shape = Shape {
            rtmp_chunk_size: 4096,
        };
        assert!(derived.bytes(Format::all(FormatId::FLV), &shape).is_empty());
    }
}
