//! Decoder configurations (`avcC`, `hvcC`, AudioSpecificConfig, `OpusHead`), NAL unit
//! helpers, and the AV1 OBU and VP9 frame facts RTP needs.
//!
//! Why: every output format needs the decoder configuration of a track in some form
//! (FLV sequence headers, SDP `sprop-*`, MPEG-TS ADTS headers, fMP4 sample entries), and
//! every ingest protocol delivers it in another. These types hold the configuration in
//! its canonical binary form (the record as it travels in FLV and MP4) together with
//! the few fields the data path needs, parsed once when the track is announced.
//!
//! # Invariants
//! - Parsers never panic and never allocate more than a small multiple of their input.
//! - A parsed config keeps the exact bytes it was parsed from (`record`, `asc`, `head`);
//!   parameter sets are zero-copy slices of that record.
//! - Picture size comes from the first SPS. An SPS we cannot read yields a size of
//!   0x0 rather than an error: the stream still plays, only the size is unknown.

mod aac;
mod av1;
mod avc;
mod bits;
mod hevc;
mod nal;
mod opus;
mod vp9;

pub use aac::AacConfig;
pub use av1::{
    av1_obus, av1c_config_obus, leb128_len, read_leb128, write_leb128, Obu, Obus,
    AV1_OBU_SEQUENCE_HEADER, AV1_OBU_TEMPORAL_DELIMITER, AV1_OBU_TILE_LIST,
};
pub use avc::AvcConfig;
pub use hevc::HevcConfig;
pub use nal::{
    h264_is_keyframe_nal, h264_nal_type, h265_is_keyframe_nal, h265_nal_type, nal_units, NalUnits,
    H264_NAL_AUD, H264_NAL_IDR, H264_NAL_PPS, H264_NAL_SEI, H264_NAL_SPS, H265_NAL_AUD,
    H265_NAL_PPS, H265_NAL_SEI_PREFIX, H265_NAL_SPS, H265_NAL_VPS,
};
pub use opus::OpusConfig;
pub use vp9::{vp9_frame_header, vp9_frames, Vp9FrameHeader, Vp9Frames, VP9_MAX_SUPERFRAME_FRAMES};

/// What went wrong reading or building a decoder configuration.
///
/// `Truncated`, `Malformed` and `Unsupported` describe bytes a peer sent; `TooLarge`
/// and `Missing` also come from building a configuration out of parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The input ended before the structure did.
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
    /// Valid, but a feature Sluice does not carry (or cannot express in the target form).
    #[error("unsupported {what}")]
    Unsupported {
        /// The feature.
        what: &'static str,
    },
    /// A length does not fit the field that must carry it.
    #[error("{what} of {len} exceeds {limit}")]
    TooLarge {
        /// The item.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The largest size the field can carry.
        limit: usize,
    },
    /// A required part is absent (for example no SPS).
    #[error("missing {what}")]
    Missing {
        /// The part.
        what: &'static str,
    },
}

/// Reads a big-endian u16 at `at`, or reports which structure was cut short.
fn be_u16(b: &[u8], at: usize, what: &'static str) -> Result<u16, CodecError> {
    let end = at.checked_add(2).ok_or(CodecError::Truncated { what })?;
    match b.get(at..end) {
        Some(&[hi, lo]) => Ok(u16::from_be_bytes([hi, lo])),
        _ => Err(CodecError::Truncated { what }),
    }
}

/// Reads the byte at `at`, or reports which structure was cut short.
fn byte(b: &[u8], at: usize, what: &'static str) -> Result<u8, CodecError> {
    b.get(at).copied().ok_or(CodecError::Truncated { what })
}

/// Reads `n` parameter sets, each prefixed by a 16-bit length, starting at `*pos`
/// of `record`; returns zero-copy slices and advances `*pos`.
fn read_parameter_sets(
    record: &bytes::Bytes,
    pos: &mut usize,
    n: usize,
    what: &'static str,
) -> Result<Vec<bytes::Bytes>, CodecError> {
    // Each entry takes at least 2 bytes, so `n` is bounded by the record length.
    let mut out = Vec::with_capacity(n.min(record.len() / 2));
    for _ in 0..n {
        let len = usize::from(be_u16(record, *pos, what)?);
        let start = *pos + 2;
        let end = start
            .checked_add(len)
            .ok_or(CodecError::Truncated { what })?;
        if end > record.len() {
            return Err(CodecError::Truncated { what });
        }
        out.push(record.slice(start..end));
        *pos = end;
    }
    Ok(out)
}

/// Appends `set` with a 16-bit length prefix.
fn write_parameter_set(
    out: &mut Vec<u8>,
    set: &[u8],
    what: &'static str,
) -> Result<(), CodecError> {
    let len = u16::try_from(set.len()).map_err(|_| CodecError::TooLarge {
        what,
        len: set.len(),
        limit: usize::from(u16::MAX),
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(set);
    Ok(())
}
