//! The fragment engine: how a stream's frames become fragments, in fMP4 or MPEG-TS,
//! for every output that cuts media into pieces — live HLS segments and LL-HLS parts,
//! recording files, and HLS of files on demand.
//!
//! Why one place: cutting at keyframes, the duration of the last sample before a cut,
//! which timescale a track gets and where its time 0 is are decisions every such output
//! makes, and outputs that make them differently disagree about the same stream (a
//! segment that starts one frame before its keyframe, an audio track whose timescale
//! depends on who wrote the file). Here they are made once.
//!
//! - `timescale`: the one rule for track timescales, track ids and what each container
//!   carries ([`timescale`](fn@timescale), [`track_id`], [`Container::carries`]).
//! - `cut`: [`CutRules`], where a fragment or a part ends; pure, so a planner over a
//!   file's sample index ([`CutRules::cut`]) and the live [`Fragmenter`] decide alike.
//! - `muxer`: [`Muxer`], the samples of up to one video and one audio track in, an init
//!   segment and fragments out: durations, the origin, decode times that step back.
//! - `fragmenter`: [`Fragmenter`], frames in decode order in, [`Output`]s out: the
//!   state machine that applies [`CutRules`] to a live stream over a [`Muxer`].
//!
//! # Invariants
//! - A fragment (and a part) holds only samples whose duration is known: the newest
//!   sample of each track waits for its successor, except at a cut, where the cutting
//!   frame gives its own track's newest sample its end, and at a flush or finish, where
//!   durations are estimated. So a fragment cut at a keyframe starts with it.
//! - Frame payloads are never copied until they are written into a fragment, once: the
//!   muxer holds the frames' [`bytes::Bytes`], and nothing is allocated per frame once its
//!   sample lists have grown to a fragment's size.
//! - Per track, decode times never go backwards in an output: a step back is clamped to
//!   the track's last decode time (and the presentation time moves with it).
//! - Memory is the samples of one fragment, which [`CutRules::max_bytes`] bounds when
//!   the stream's source is not trusted to send keyframes.

mod cut;
mod fragmenter;
mod muxer;
mod timescale;

pub use cut::{Cut, CutRules, Progress};
pub use fragmenter::{Fragmenter, FragmenterConfig, Origin, Output, MAX_SPLICES};
pub use muxer::Muxer;
pub use timescale::{default_duration, timescale, track_id, AUDIO_TRACK_ID, VIDEO_TRACK_ID};

use crate::fmp4::Fmp4Error;
use crate::ts::TsError;

/// Counted per frame on top of its payload in a fragment's size ([`Progress::bytes`]),
/// so floods of tiny frames are bounded too.
pub const FRAME_OVERHEAD: usize = 64;

/// The container fragments are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Container {
    /// Fragmented MP4 (CMAF): an init segment (`ftyp` + `moov`), then `moof` + `mdat`
    /// per fragment or part.
    Fmp4,
    /// MPEG-TS: the PAT and PMT at the start of every fragment, then PES packets.
    Ts,
}

/// Why media could not be written. The samples concerned are dropped; the stream goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FragmentError {
    /// The fMP4 writer refused the tracks or the samples.
    #[error("fmp4: {0}")]
    Fmp4(#[from] Fmp4Error),
    /// The MPEG-TS muxer refused the tracks or a frame.
    #[error("ts: {0}")]
    Ts(#[from] TsError),
    /// A muxer without any track: the caller's mistake.
    #[error("no track to write")]
    NoTracks,
}
