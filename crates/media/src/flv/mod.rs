//! FLV: the file/stream container (HTTP-FLV, recordings) and the audio/video tag bodies.
//!
//! Why one module for both: an RTMP audio or video message payload *is* an FLV tag
//! body, so the RTMP session, HTTP-FLV output and FLV ingest share these parsers and
//! serializers. The server serializes each tag body once per frame and shares it.
//!
//! - [`file`](mod@file): the 9-byte file header, the 11-byte tag header, `PreviousTagSize`, and
//!   [`TagReader`], an incremental sans-IO parser of a whole FLV byte stream.
//! - [`video`] / [`audio`]: tag bodies in the legacy form (codec ids, H.264 and
//!   H.265 as id 12, AAC, MP3, G.711) and the Enhanced RTMP form (FourCC: `avc1`,
//!   `hvc1`, `av01`, `vp09`, `Opus`, `mp4a`, `.mp3`); the shared Enhanced RTMP
//!   wrappers (ModEx, multitrack) are in `enhanced`.
//!
//! # Invariants
//! - Parsers never panic on any input and return payloads as zero-copy slices of the body.
//! - Serializers write into a caller-owned `BytesMut` and write nothing on error.
//! - What a serializer writes, the parser reads back to the same value
//!   (`parse_video(write(x)) == x`), with H.264/AAC always in the legacy form every
//!   player understands and H.265 in the form the publisher used.

pub mod audio;
mod enhanced;
pub mod file;
pub mod video;

pub use audio::{audio_frame_header, parse_audio, write_audio_config, AudioTag};
pub use file::{
    write_file_header, write_tag, write_tag_header, write_tag_trailer, FileHeader, Tag, TagReader,
    FILE_HEADER_LEN, MAX_TAG_LEN, TAG_HEADER_LEN,
};
pub use video::{
    parse_video, video_frame_header, write_video_config, write_video_end_of_sequence, VideoTag,
};

use crate::codec::CodecError;
use crate::MediaKind;
use std::fmt;

/// FLV tag type of audio data.
pub const TAG_AUDIO: u8 = 8;
/// FLV tag type of video data.
pub const TAG_VIDEO: u8 = 9;
/// FLV tag type of script data (AMF0 `onMetaData`).
pub const TAG_SCRIPT: u8 = 18;

/// What went wrong reading or writing FLV.
///
/// All variants but `WrongTrack` and `TooLarge` (when writing) describe bytes a peer sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlvError {
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
    /// Valid FLV, but a feature Sluice does not carry (encrypted tags, multitrack).
    #[error("unsupported {what}")]
    Unsupported {
        /// The feature.
        what: &'static str,
    },
    /// A codec Sluice does not carry.
    #[error("unsupported codec {codec}")]
    UnsupportedCodec {
        /// The legacy codec id or FourCC.
        codec: CodecTag,
    },
    /// A length beyond what the format or our limits allow.
    #[error("{what} of {len} bytes exceeds {limit}")]
    TooLarge {
        /// The item.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// Caller error: a track that cannot go in this kind of tag (audio in video).
    #[error("wrong track for {what}")]
    WrongTrack {
        /// The tag being written.
        what: &'static str,
    },
    /// The decoder configuration inside a sequence header is bad.
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// How a tag names its codec: a legacy 4-bit id or an Enhanced RTMP FourCC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodecTag {
    /// Legacy `CodecID` (video) or `SoundFormat` (audio).
    Legacy {
        /// Video or audio.
        kind: MediaKind,
        /// The 4-bit id.
        id: u8,
    },
    /// Enhanced RTMP FourCC.
    FourCc([u8; 4]),
}

impl fmt::Display for CodecTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecTag::Legacy {
                kind: MediaKind::Video,
                id,
            } => write!(f, "video codec id {id}"),
            CodecTag::Legacy {
                kind: MediaKind::Audio,
                id,
            } => write!(f, "sound format {id}"),
            CodecTag::FourCc(cc) => {
                let s: String = cc
                    .iter()
                    .map(|&b| {
                        if b.is_ascii_graphic() {
                            char::from(b)
                        } else {
                            '?'
                        }
                    })
                    .collect();
                write!(f, "FourCC '{s}'")
            }
        }
    }
}

/// The byte at `at`.
fn u8_at(b: &[u8], at: usize, what: &'static str) -> Result<u8, FlvError> {
    b.get(at).copied().ok_or(FlvError::Truncated { what })
}

/// The big-endian unsigned 24-bit value at `at`.
fn u24_at(b: &[u8], at: usize, what: &'static str) -> Result<u32, FlvError> {
    match at.checked_add(3).and_then(|end| b.get(at..end)) {
        Some(&[x, y, z]) => Ok(u32::from_be_bytes([0, x, y, z])),
        _ => Err(FlvError::Truncated { what }),
    }
}

/// The big-endian signed 24-bit value at `at` (composition time offsets).
fn si24_at(b: &[u8], at: usize, what: &'static str) -> Result<i32, FlvError> {
    let v = u24_at(b, at, what)?;
    Ok(((v << 8) as i32) >> 8)
}

/// The four bytes at `at`.
fn fourcc_at(b: &[u8], at: usize, what: &'static str) -> Result<[u8; 4], FlvError> {
    match at.checked_add(4).and_then(|end| b.get(at..end)) {
        Some(&[w, x, y, z]) => Ok([w, x, y, z]),
        _ => Err(FlvError::Truncated { what }),
    }
}

/// Smallest and largest composition time offset an SI24 can carry.
const CTS_RANGE: std::ops::RangeInclusive<i32> = -(1 << 23)..=(1 << 23) - 1;

/// Appends `v` as a big-endian signed 24-bit value, which the caller checked is in range.
fn put_si24(out: &mut bytes::BytesMut, v: i32) {
    let b = v.to_be_bytes();
    out.extend_from_slice(&b[1..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si24_sign_extends() {
        assert_eq!(si24_at(&[0xff, 0xff, 0xff], 0, "t"), Ok(-1));
        assert_eq!(si24_at(&[0x80, 0x00, 0x00], 0, "t"), Ok(-(1 << 23)));
        assert_eq!(si24_at(&[0x7f, 0xff, 0xff], 0, "t"), Ok((1 << 23) - 1));
        assert!(si24_at(&[0x7f, 0xff], 0, "t").is_err());
        let mut out = bytes::BytesMut::new();
        put_si24(&mut out, -2);
        assert_eq!(&out[..], &[0xff, 0xff, 0xfe]);
    }

    #[test]
    fn codec_tag_display() {
        assert_eq!(CodecTag::FourCc(*b"vp08").to_string(), "FourCC 'vp08'");
        assert_eq!(
            CodecTag::FourCc([0, b'a', 1, b'b']).to_string(),
            "FourCC '?a?b'"
        );
    }
}
