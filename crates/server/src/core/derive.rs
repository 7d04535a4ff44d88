//! Derived tracks: what the server makes from a stream's own media and puts back in
//! its ring, for the consumers that cannot take the original (the stream's audio in
//! the other codec: Opus for WebRTC players of an AAC stream, AAC for RTMP, FLV and
//! MPEG-TS consumers of an Opus one).
//!
//! The core knows no codec chain: a feature implements [`Derive`] and hands it to the
//! hub ([`super::hub::HubConfig::derive`]). A stream starts a [`DeriveRun`] at the
//! first claim (`Stream::want_transcoded`, held by the claimant's guard) or while a
//! tap [wants it](super::tap::Tap::wants_derived), feeds it its audio in stream order
//! from then on, and drops it when nobody takes its output. A run pushes what it
//! makes through its [`DerivedOut`], which drops the output of a run already stopped.

use super::hub::Stream;
use super::packet::Packet;
use sluice_media::{Frame, Track};
use std::fmt::Debug;
use std::sync::{Arc, Weak};

/// What makes derived tracks: given once to the hub, it starts a run per stream.
pub trait Derive: Send + Sync + Debug {
    /// The configuration of what is made from `own`, when it is known before the first
    /// frame (AAC made from Opus): consumers get it at once. `None` otherwise.
    fn derived_track(&self, own: &Track) -> Option<Arc<Track>>;

    /// Starts a run for `out`'s stream, whose audio is `own` now, made into `derived`;
    /// `None` when it cannot (a thread that did not start).
    fn start(
        &self,
        out: DerivedOut,
        own: Option<Arc<Track>>,
        derived: Option<Arc<Track>>,
    ) -> Option<Box<dyn DeriveRun>>;

    /// Frames of the ring a new run is handed, at most: the newest of what a new
    /// player gets, so that live frames still fit behind them.
    fn backfill(&self) -> usize;
}

/// A run making one stream's derived track. Its methods run on the publisher's path
/// and must not block.
pub trait DeriveRun: Send + Debug {
    /// A new audio configuration of the stream's own, made into `derived`.
    fn track(&mut self, own: &Arc<Track>, derived: Option<Arc<Track>>);

    /// An audio frame of the stream's own.
    fn frame(&mut self, frame: &Frame);
}

/// Where a run puts what it makes: its stream's ring, while the run is current.
#[derive(Debug, Clone)]
pub struct DerivedOut {
    stream: Weak<Stream>,
    run: u64,
    /// The stream's key and hub id, for names and logs.
    pub key: String,
    pub id: u64,
}

impl DerivedOut {
    pub(super) fn new(stream: &Arc<Stream>, run: u64) -> DerivedOut {
        DerivedOut {
            stream: Arc::downgrade(stream),
            run,
            key: stream.key.clone(),
            id: stream.id,
        }
    }

    /// Pushes a packet made from the stream's own ([`Packet::derived`]); dropped when
    /// the run was stopped since. `false` once the stream is gone: the run may end.
    pub fn push(&self, packet: Arc<Packet>) -> bool {
        match self.stream.upgrade() {
            Some(stream) => {
                stream.push_derived(self.run, packet);
                true
            }
            None => false,
        }
    }

    /// Whether the stream still exists.
    pub fn alive(&self) -> bool {
        self.stream.strong_count() > 0
    }
}
