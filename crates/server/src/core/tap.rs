//! Taps: what a feature attaches to a stream to be fed in stream order, without the
//! core knowing the feature. HLS segmenting and recording are taps; a new output (a
//! DVR window, snapshots, a rendition worker) is a module that implements [`Tap`] and
//! an [`Attach`] handed to the hub, never an edit of `hub.rs`.
//!
//! The publisher's thread calls a stream's taps once per configuration and frame,
//! under the stream's forms lock (see `hub::Stream::forms`), so a tap sees the
//! stream's own packets in order and never twice. A tap that starts late (HLS, at the
//! first request) takes what the ring kept through [`crate::core::hub::Stream::catch_up`],
//! under the same lock, so nothing falls between that and the next frame.
//!
//! Taps are made when a stream is created and live as long as it; their methods take
//! `&self` (a tap keeps its own state behind its own lock or channel) and must not
//! block: they run on a worker's event loop.

use sluice_media::{Frame, Track};
use std::any::Any;
use std::collections::VecDeque;
use std::fmt::Debug;
use std::sync::Arc;

use super::cue::StreamCue;
use super::packet::Packet;

/// A consumer of one stream's media in stream order.
pub trait Tap: Any + Send + Sync + Debug {
    /// A new decoder configuration of the stream's own; `tracks` are the stream's
    /// tracks with it (video, audio).
    fn track(&self, _stream: &str, _track: &Arc<Track>, _tracks: [Option<&Arc<Track>>; 2]) {}

    /// A frame of the stream's own, on the stream's timeline; `start`: a start point
    /// (a video keyframe, or audio in a stream without video).
    fn frame(&self, _stream: &str, _frame: &Frame, _start: bool) {}

    /// Whether it takes the audio the server makes from the stream's own (AAC from
    /// Opus) now: the stream transcodes while a tap or a player does.
    fn wants_derived(&self) -> bool {
        false
    }

    /// The configuration of the audio the server makes from the stream's own.
    fn derived_track(&self, _track: &Arc<Track>) {}

    /// A frame of the audio the server makes from the stream's own.
    fn derived_frame(&self, _stream: &str, _frame: &Frame) {}

    /// An SCTE-35 cue of the stream's, in stream order with its frames.
    fn cue(&self, _stream: &str, _cue: &Arc<StreamCue>) {}

    /// A returning publisher's media follows (a new timeline may begin).
    fn discontinuity(&self) {}

    /// The publisher left; it may come back within the grace window.
    fn publisher_left(&self) {}

    /// The stream ended.
    fn end(&self, _stream: &str) {}

    /// Viewers it counts that are not players of the hub (HLS's, by fetches).
    fn viewers(&self) -> usize {
        0
    }

    /// Bytes of media it holds, for the logs.
    fn memory(&self) -> usize {
        0
    }
}

/// What a feature hands to the hub: the tap of each new stream it takes.
pub trait Attach: Any + Send + Sync + Debug {
    /// The tap of a new stream `key` (hub id `id`), or `None` when the feature does
    /// not take this stream.
    fn attach(&self, key: &str, id: u64) -> Option<Arc<dyn Tap>>;
}

/// What the ring kept, for a tap that starts late: the packets from a start point on
/// (`first` is the position of the first), the tracks now, where returning publishers'
/// media began, the derived audio's track, and the newest cues.
#[derive(Debug)]
pub struct Backlog {
    pub first: u64,
    pub packets: VecDeque<Arc<Packet>>,
    pub tracks: [Option<Arc<Track>>; 2],
    pub restarts: VecDeque<u64>,
    pub derived_track: Option<Arc<Track>>,
    /// The stream's newest cues, oldest first.
    pub cues: Vec<Arc<StreamCue>>,
}
