//! MP4 (ISO/IEC 14496-12) demuxing for video on demand: a whole file in memory becomes
//! a [`Movie`], the sample tables of the tracks Sluice can play, and each sample becomes a
//! [`Frame`](crate::Frame) whose payload is a zero-copy slice of the file.
//!
//! Why: recordings and uploaded files are played back through the same outputs as live
//! streams. The server maps the file and asks this module what to send next; no I/O
//! happens here, and parsing is one pass over the index boxes, never over the media.
//!
//! - `boxes`: box headers and a checked cursor over box content.
//! - `entry`: sample entries (`avc1`/`avc3`, `hvc1`/`hev1`, `mp4a`, `Opus`) into a
//!   [`TrackConfig`](crate::TrackConfig).
//! - `table`: progressive sample tables (`stts`, `ctts`, `stss`, `stsz`/`stz2`, `stsc`,
//!   `stco`/`co64`).
//! - `fragment`: movie fragments (`moof`: `tfhd`, `tfdt`, `trun`).
//! - `timeline`: one track's samples as they are appended, converted to 90 kHz.
//! - `movie`: [`parse_movie`], the walk over the file and the choice of tracks.
//! - `play`: [`Movie::seek`], [`Movie::next`], [`Movie::frame`].
//!
//! # Invariants
//! - Nothing in the file can make us panic or allocate more than a small multiple of the
//!   bytes that back it: a declared count sizes an allocation only after the box is
//!   checked to hold that many entries, and all samples together are capped by
//!   [`MAX_SAMPLES`] and by the file length.
//! - The parser follows a fixed path of boxes (`moov/trak/mdia/minf/stbl/stsd/...`), so
//!   nesting depth is bounded by the code, not by the file.
//! - Every kept sample lies inside the file. A track ends at its first sample that does
//!   not (a file cut off while being written), so playback never skips a frame mid-GOP.
//! - Timestamps are converted from the accumulated track time, never summed from rounded
//!   per-sample durations, so they do not drift.

mod boxes;
mod entry;
mod fragment;
mod movie;
mod play;
mod table;
mod timeline;

#[cfg(test)]
mod tests;

use crate::codec::CodecError;
use crate::{Timestamp, Track};

pub use movie::parse_movie;
pub use play::Position;

/// Most samples in one movie. A two-hour movie at 60 fps with 48 kHz AAC holds about
/// 1.1 million; 50 million (1.6 GB of [`Sample`]s) only a hostile table declares.
pub const MAX_SAMPLES: usize = 50_000_000;

/// A parsed movie: the tracks Sluice can play and their sample tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movie {
    /// At most one video then at most one audio track, video first.
    pub tracks: Vec<MovieTrack>,
    /// In 90 kHz ticks: the end of the longest track (its last sample's decode time plus
    /// duration, edit list applied).
    pub duration: Timestamp,
    /// Samples came from movie fragments (`moof`/`trun`).
    pub fragmented: bool,
    /// Human-readable notes on tracks (and fragments) not taken, such as
    /// `"trak 3: codec mp4v not supported"`.
    pub skipped: Vec<String>,
}

/// One playable track of a [`Movie`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovieTrack {
    /// The `track_ID` of `tkhd`.
    pub track_id: u32,
    /// The codec and decoder configuration, from the sample entry.
    pub track: Track,
    /// Ticks per second of the track's own times (`mdhd`).
    pub timescale: u32,
    /// In decode order.
    pub samples: Vec<Sample>,
}

/// Where one sample's data lies and when it plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Byte offset of the sample data in the file.
    pub offset: u64,
    /// Length of the sample data.
    pub size: u32,
    /// Decode time in 90 kHz ticks, edit list applied, so the first presented sample of
    /// the movie is at about 0 (B-frames may start a little below it).
    pub dts: Timestamp,
    /// Presentation minus decode time, in 90 kHz ticks.
    pub cts: i32,
    /// A sync sample: `stss` lists it (or there is no `stss`), or its fragment sample
    /// flags say so. Audio samples always are.
    pub keyframe: bool,
}

/// What went wrong reading an MP4 file.
///
/// All variants but [`Mp4Error::NoSuchSample`] describe the file; that one is the
/// caller's (an index [`parse_movie`] never handed out).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mp4Error {
    /// A structure ends before its fields do.
    #[error("truncated {what}")]
    Truncated {
        /// The box or field.
        what: &'static str,
    },
    /// A box claims to be larger than the box (or file) holding it.
    #[error("truncated {} box", String::from_utf8_lossy(.kind))]
    TruncatedBox {
        /// The box type.
        kind: [u8; 4],
    },
    /// A box the format requires is not there.
    #[error("missing {what} box")]
    Missing {
        /// The box type.
        what: &'static str,
    },
    /// A field holds a value the format forbids.
    #[error("malformed {what}")]
    Malformed {
        /// The field or box.
        what: &'static str,
    },
    /// No `moov`: not an MP4 file, or one whose index was never written (a recording
    /// killed before it finished, unless it was fragmented).
    #[error("no moov box")]
    NoMoov,
    /// No track has a codec Sluice plays; the notes say why each was skipped.
    #[error("no playable track ({})", .skipped.join("; "))]
    NoPlayableTrack {
        /// One note per track.
        skipped: Vec<String>,
    },
    /// A codec (sample entry type) Sluice does not play.
    #[error("codec {} not supported", String::from_utf8_lossy(.codec))]
    UnsupportedCodec {
        /// The sample entry type, such as `mp4v` or `encv`.
        codec: [u8; 4],
    },
    /// The decoder configuration (`avcC`, `hvcC`, `esds`, `dOps`) is invalid.
    #[error("bad decoder configuration: {0}")]
    Codec(#[from] CodecError),
    /// More of something than we are willing to hold.
    #[error("{what} of {len} exceeds {limit}")]
    TooLarge {
        /// The item.
        what: &'static str,
        /// Its count or size.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The sample's bytes are not all in the file: it is not the file that was parsed,
    /// or it was cut short since.
    #[error("sample of {size} bytes at {offset} lies outside the file of {file_len} bytes")]
    SampleOutsideFile {
        /// Offset of the sample data.
        offset: u64,
        /// Length of the sample data.
        size: u32,
        /// Length of the file given.
        file_len: u64,
    },
    /// No such track or sample in this movie.
    #[error("no sample {sample} in track {track}")]
    NoSuchSample {
        /// The track index.
        track: usize,
        /// The sample index.
        sample: usize,
    },
}
