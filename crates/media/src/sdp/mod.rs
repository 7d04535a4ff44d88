//! SDP (RFC 8866) for RTSP: the description we give players (DESCRIBE) and the one
//! publishers give us (ANNOUNCE).
//!
//! Why: an RTSP player learns codecs, payload types, clock rates and decoder
//! configuration (`sprop-parameter-sets`, AAC `config=`) from the SDP, and a publisher
//! tells us the same about its tracks. Only the subset RTSP uses is read or written:
//! `m=`, `a=rtpmap`, `a=fmtp`, `a=control`, `a=range`.
//!
//! - `write`: [`write_sdp`], one SDP for a stream's tracks.
//! - `parse`: [`parse_sdp`], the tracks of an ANNOUNCE; media we cannot take are listed
//!   in [`SdpSession::skipped`], not fatal.
//!
//! # Invariants
//! - Parsing is bounded: at most [`MAX_SDP_LEN`] bytes, [`MAX_LINES`] lines of at most
//!   [`MAX_LINE_LEN`] bytes and [`MAX_MEDIA`] media sections; never a panic.
//! - [`write_sdp`] writes nothing when it fails.

mod parse;
mod write;

pub use parse::{parse_sdp, SdpMedia, SdpSession, SkippedMedia};
pub use write::{write_sdp, SdpRange, SdpTrack, SessionDescription};

/// Largest SDP accepted: real ones are under 2 KiB; parameter sets of a 4K stream fit many times.
pub const MAX_SDP_LEN: usize = 64 << 10;
/// Most lines accepted.
pub const MAX_LINES: usize = 512;
/// Longest line accepted (a base64 SPS with large scaling lists is a few hundred bytes).
pub const MAX_LINE_LEN: usize = 8 << 10;
/// Most media sections accepted; a publisher with more is not a camera.
pub const MAX_MEDIA: usize = 16;

/// What went wrong reading or writing an SDP.
///
/// `Malformed` and `TooLarge` describe what a peer sent; `InvalidText` and `NoCodec`
/// are a caller asking us to write something SDP cannot say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SdpError {
    /// A line or field does not follow the grammar.
    #[error("malformed {what} on line {line}")]
    Malformed {
        /// The field.
        what: &'static str,
        /// 1-based line number.
        line: usize,
    },
    /// The description or one of its parts is larger than we accept.
    #[error("{what} of {len} exceeds {limit}")]
    TooLarge {
        /// The item.
        what: &'static str,
        /// Its size or count.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// Text given to the writer that would break the line structure (CR, LF, NUL).
    #[error("invalid characters in {what}")]
    InvalidText {
        /// The field.
        what: &'static str,
    },
    /// A track whose codec has no RTP payload format here.
    #[error("no RTP payload format for track {index}")]
    NoCodec {
        /// Position of the track in the list given.
        index: usize,
    },
}
