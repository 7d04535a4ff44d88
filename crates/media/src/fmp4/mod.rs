//! Fragmented MP4 / CMAF (ISO/IEC 14496-12, ISO/IEC 23000-19): the init segment and
//! the fragments behind HLS with fMP4 segments and Low-Latency HLS parts.
//!
//! Why: LL-HLS needs fMP4 (parts are fragments), and the fMP4 variant is the only way
//! to carry Opus in HLS. The fragment engine ([`crate::fragment`]) writes the init
//! segment once per track configuration and one fragment per part or segment; every
//! viewer of the stream gets those same bytes.
//!
//! - `boxes`: writing a box whose size is patched in when its content is done.
//! - `init`: [`write_init`]: `ftyp` + `moov` with one `trak` per track and `mvex`.
//! - `fragment`: [`write_fragment`]: `moof` (`mfhd`, one `traf` per run) + `mdat`.
//! - `codecs`: [`codec_string`], the RFC 6381 `CODECS` value for playlists.
//!
//! # Invariants
//! - Writers append to a caller-owned `BytesMut` and leave it as it was on error.
//! - Sample bytes are copied once, into the fragment's `mdat`; box sizes and offsets
//!   are computed with checked arithmetic and a size that does not fit its field is
//!   [`Fmp4Error::TooLarge`], never a wrapped value.
//! - Sample entries carry the decoder configuration byte for byte as the track holds it
//!   (`avcC`, `hvcC`, the AudioSpecificConfig); only `dOps` is converted, from `OpusHead`.

mod boxes;
mod codecs;
mod fragment;
mod init;

pub use codecs::codec_string;
pub use fragment::{write_fragment, Sample, TrackRun, SAMPLE_FLAGS_NON_SYNC, SAMPLE_FLAGS_SYNC};
pub use init::{write_init, InitTrack};

/// What went wrong writing fMP4.
///
/// `Unsupported` and `InvalidInput` are the caller's: a track this writer cannot
/// describe, or arguments that break a rule of the format (track id 0). `TooLarge`
/// is data too big for the box field that must carry it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fmp4Error {
    /// A codec or configuration this writer cannot put in a sample entry.
    #[error("unsupported {what} in fMP4")]
    Unsupported {
        /// The codec or feature.
        what: &'static str,
    },
    /// An argument the format does not allow.
    #[error("invalid {what}")]
    InvalidInput {
        /// The argument and the rule.
        what: &'static str,
    },
    /// A size or offset beyond what its field can carry.
    #[error("{what} of {len} exceeds {limit}")]
    TooLarge {
        /// The item.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The largest size the field can carry.
        limit: usize,
    },
}
