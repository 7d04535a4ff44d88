//! RTP (RFC 3550) for RTSP: packetizing frames once per stream, depacketizing what a
//! publisher sends, a small reorder buffer for UDP ingest, and the RTCP we need.
//!
//! Why: RTSP players are fed RTP. Following DESIGN.md, every frame of a stream is
//! packetized exactly once and the resulting bytes are shared by every RTSP player of
//! that stream: [`RtpPacketizer`] writes all packets of one frame into one contiguous
//! buffer ([`RtpFrame`]), optionally with the 4-byte RTSP interleave header in front of
//! each packet, so a TCP player gets the whole frame in one write and a UDP player gets
//! one `sendmmsg` with an iovec per [`PacketSpan`].
//!
//! - `header`: the fixed header, CSRCs, header extension and padding ([`RtpPacket`]).
//! - `packetizer`: [`RtpPacketizer`]: H.264 (RFC 6184), H.265 (RFC 7798), AAC
//!   (RFC 3640 `mpeg4-generic`, AAC-hbr), Opus (RFC 7587), G.711 passthrough; and
//!   through `vp8`, `vp9`, `av1` the payload formats of VP8 (RFC 7741), VP9 (RFC 9628)
//!   and AV1 (AOM RTP payload format v1.0).
//! - `depacketizer`: [`RtpDepacketizer`]: the reverse, per publisher track (H.264,
//!   H.265 and audio: publishers send those).
//! - `jitter`: [`JitterBuffer`], which puts UDP packets back in sequence order.
//! - `mp2t`: [`Mp2tReceiver`], MPEG-TS over RTP (RFC 2250) for UDP ingest: the jitter
//!   buffer, and TS payloads out.
//! - `rtcp`: sender reports, and parsing what players and publishers send us.
//! - `source`: [`RtpSource`], the packetizers of one stream for all its players:
//!   numbering that survives publishers and codec changes, sender reports.
//!
//! # Sequence numbers and timestamps for players
//! One packetizer per stream track numbers packets on from one frame to the next and
//! maps the frame's presentation time to the codec clock with
//! [`RtpPacketizer::rtp_timestamp`]. A player joining later starts on a cached frame:
//! its `RTP-Info` header in the PLAY reply gives that frame's [`PacketizedFrame::first_seq`]
//! as `seq` and its [`PacketizedFrame::timestamp`] as `rtptime`. Players accept any
//! starting values so announced.
//!
//! # Invariants
//! - Nothing here panics on any input; every length read from a packet is checked.
//! - Memory a peer can make us hold is bounded: a frame being reassembled by at most
//!   [`MAX_FRAME_LEN`], the jitter buffer by its fixed capacity, queued outputs by
//!   [`MAX_QUEUED_FRAMES`].
//! - A frame with a missing packet is dropped and counted, never emitted corrupted.

mod av1;
mod depacketizer;
mod header;
mod jitter;
mod mp2t;
mod packetizer;
mod receiver;
pub mod rtcp;
mod source;
#[cfg(test)]
mod testing;
mod vp8;
mod vp9;

pub use depacketizer::{DepacketizedFrame, DepacketizerStats, ParameterSets, RtpDepacketizer};
pub use header::{RtpExtension, RtpHeader, RtpPacket, RTP_HEADER_LEN};
pub use jitter::{
    JitterBuffer, JitterStats, JITTER_CAPACITY, JITTER_MAX_WAIT, MAX_JITTER_CAPACITY,
};
pub use mp2t::{
    Mp2tReceiver, Mp2tSender, Mp2tStats, MP2T_PAYLOAD_TYPE, MP2T_REORDER_CAPACITY,
    MP2T_REORDER_PACKETS,
};
pub use packetizer::{
    next_interleaved, PacketSpan, PacketizedFrame, RtpFrame, RtpPacketizer, INTERLEAVE_HEADER_LEN,
};
pub use receiver::{Received, RtpReceiver};
pub use source::{rtp_channel, RtpForm, RtpSource, RtpStart, SENDER_REPORT_TICKS};

use crate::{Track, TrackConfig};

/// Default payload budget per packet. The stream's RTP form is shared by RTSP and
/// WebRTC players, so it fits WebRTC's budget: a 1200-byte packet (what browsers
/// send) with its RTP header, header extensions and SRTP tag.
pub const DEFAULT_MTU: usize = 1140;
/// Smallest payload budget accepted; smaller requests are raised to it. Every
/// aggregation and fragmentation header fits many times over.
pub const MIN_MTU: usize = 64;
/// Largest payload budget: a packet, interleaved over RTSP/TCP, has a 16-bit length.
pub const MAX_MTU: usize = 65_000;
/// Largest frame the depacketizer reassembles: a 4K keyframe is well under this; more
/// is a peer making us buffer.
pub const MAX_FRAME_LEN: usize = 8 << 20;
/// Most frames the depacketizer queues between two [`RtpDepacketizer::poll`] drains.
/// One packet yields at most [`MAX_AUS_PER_PACKET`] frames, so a caller that drains
/// after every push never reaches it.
pub const MAX_QUEUED_FRAMES: usize = 256;
/// Most AAC access units accepted in one packet: a 1400-byte packet of the smallest
/// real AAC frames holds a few dozen; more is a peer making us queue.
pub const MAX_AUS_PER_PACKET: usize = 128;
/// Samples per AAC access unit (AAC-LC, HE-AAC core), the default `constantDuration`.
pub const AAC_SAMPLES_PER_AU: u32 = 1024;

/// What went wrong with an RTP or RTCP packet, or a request of ours.
///
/// `Malformed`, `Truncated` and `Unsupported` describe bytes a peer sent; `TooLarge`
/// may be ours (a frame too big for the payload format) or a peer's; `NoCodec` is a
/// caller asking for a codec RTP here does not carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RtpError {
    /// The packet ended before the structure did.
    #[error("truncated {what}")]
    Truncated {
        /// The structure being read.
        what: &'static str,
    },
    /// A field holds a value the specification forbids.
    #[error("malformed {what}")]
    Malformed {
        /// The field or structure.
        what: &'static str,
    },
    /// Valid, but a feature Sluice does not implement (STAP-B, MTAP, PACI, ...).
    #[error("unsupported {what}")]
    Unsupported {
        /// The feature.
        what: &'static str,
    },
    /// A size beyond what the format can carry or what we agree to buffer.
    #[error("{what} of {len} bytes exceeds {limit}")]
    TooLarge {
        /// The item.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The track's codec has no RTP payload format here (MP3), or none in this
    /// direction (depacketizing VP8, VP9, AV1).
    #[error("no RTP payload format for {codec}")]
    NoCodec {
        /// The codec.
        codec: &'static str,
    },
}

/// The RTP payload formats Sluice speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtpCodec {
    /// H.264, RFC 6184, packetization-mode 1 (single NAL, STAP-A, FU-A).
    H264,
    /// H.265, RFC 7798 (single NAL, AP, FU), no DONL.
    H265,
    /// AAC, RFC 3640 `mpeg4-generic`, AAC-hbr (or AAC-lbr when receiving).
    Aac,
    /// Opus, RFC 7587.
    Opus,
    /// G.711 A-law (static payload type 8).
    Pcma,
    /// G.711 µ-law (static payload type 0).
    Pcmu,
    /// VP8, RFC 7741, with a 15-bit PictureID (sending only).
    Vp8,
    /// VP9, RFC 9628, non-flexible mode with a 15-bit picture ID (sending only).
    Vp9,
    /// AV1, AOM RTP payload format v1.0 (sending only).
    Av1,
}

impl RtpCodec {
    /// The payload format for a track, or [`RtpError::NoCodec`].
    pub fn for_track(track: &Track) -> Result<Self, RtpError> {
        Ok(match &track.config {
            TrackConfig::H264(_) => RtpCodec::H264,
            TrackConfig::H265(_) => RtpCodec::H265,
            TrackConfig::Aac(_) => RtpCodec::Aac,
            TrackConfig::Opus(_) => RtpCodec::Opus,
            TrackConfig::Pcma { .. } => RtpCodec::Pcma,
            TrackConfig::Pcmu { .. } => RtpCodec::Pcmu,
            TrackConfig::Vp8 { .. } => RtpCodec::Vp8,
            TrackConfig::Vp9 { .. } => RtpCodec::Vp9,
            TrackConfig::Av1 { .. } => RtpCodec::Av1,
            TrackConfig::Mp3 { .. } => return Err(RtpError::NoCodec { codec: "MP3" }),
        })
    }

    /// Whether this is a video format (frames end with the marker bit).
    pub fn is_video(self) -> bool {
        matches!(
            self,
            RtpCodec::H264 | RtpCodec::H265 | RtpCodec::Vp8 | RtpCodec::Vp9 | RtpCodec::Av1
        )
    }

    /// The payload type Sluice announces for it: the static types of G.711, and fixed
    /// dynamic types otherwise (one per codec, so a stream's SDP never has a clash).
    pub fn default_payload_type(self) -> u8 {
        match self {
            RtpCodec::H264 => 96,
            RtpCodec::H265 => 97,
            RtpCodec::Aac => 98,
            RtpCodec::Opus => 111,
            RtpCodec::Pcma => 8,
            RtpCodec::Pcmu => 0,
            RtpCodec::Vp8 => 99,
            RtpCodec::Vp9 => 100,
            RtpCodec::Av1 => 101,
        }
    }
}

/// The RTP clock rate of a track: 90 kHz for video, the (core) sampling rate for
/// AAC, 48 kHz for Opus (RFC 7587 §4.1), 8 kHz for G.711.
pub fn clock_rate(track: &Track) -> Result<u32, RtpError> {
    Ok(match (&track.config, RtpCodec::for_track(track)?) {
        (TrackConfig::Aac(c), _) => c.sample_rate,
        (_, RtpCodec::H264 | RtpCodec::H265 | RtpCodec::Vp8 | RtpCodec::Vp9 | RtpCodec::Av1) => {
            crate::CLOCK_HZ
        }
        (_, RtpCodec::Opus) => 48_000,
        (_, RtpCodec::Pcma | RtpCodec::Pcmu | RtpCodec::Aac) => 8_000,
    })
}

/// The `fmtp` parameters of an RFC 3640 stream that shape its AU headers.
///
/// AAC-hbr (what Sluice sends, and ffmpeg and GStreamer too) is 13/3/3; AAC-lbr is
/// 6/2/2. CTS and DTS deltas are parsed and ignored; auxiliary data is not supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AacParams {
    /// `sizelength`: bits of AU-size (1..=16 accepted).
    pub size_length: u8,
    /// `indexlength`: bits of AU-index in the first AU header (0..=8).
    pub index_length: u8,
    /// `indexdeltalength`: bits of AU-index-delta in the others (0..=8).
    pub index_delta_length: u8,
    /// `ctsdeltalength` (0..=16); when non-zero each non-first header has a CTS flag.
    pub cts_delta_length: u8,
    /// `dtsdeltalength` (0..=16); when non-zero each header has a DTS flag.
    pub dts_delta_length: u8,
    /// `constantduration`, samples per AU; [`AAC_SAMPLES_PER_AU`] when absent.
    pub constant_duration: u32,
}

impl AacParams {
    /// AAC-hbr: `sizelength=13;indexlength=3;indexdeltalength=3`.
    pub const HBR: AacParams = AacParams {
        size_length: 13,
        index_length: 3,
        index_delta_length: 3,
        cts_delta_length: 0,
        dts_delta_length: 0,
        constant_duration: AAC_SAMPLES_PER_AU,
    };

    /// Checks the lengths are within what we parse (they come from a peer's SDP).
    pub fn validate(&self) -> Result<(), RtpError> {
        let ok = (1..=16).contains(&self.size_length)
            && self.index_length <= 8
            && self.index_delta_length <= 8
            && self.cts_delta_length <= 16
            && self.dts_delta_length <= 16
            && self.constant_duration > 0;
        if ok {
            Ok(())
        } else {
            Err(RtpError::Unsupported {
                what: "mpeg4-generic AU header layout",
            })
        }
    }
}

impl Default for AacParams {
    fn default() -> Self {
        AacParams::HBR
    }
}
