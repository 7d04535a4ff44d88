//! Snapshots: `GET /APP/NAME.jpg` answers a JPEG of the stream's newest keyframe, for a
//! wall of cameras or a catalogue.
//!
//! Why this shape: decoding is ffmpeg's (video coding is not our core), and it must
//! never touch the media path or a stream's start. So a snapshot is made from what the
//! ring already holds (its newest keyframe, muxed as a one-frame MPEG-TS), by an
//! ffmpeg process, at most once per stream and size every `interval_s` whatever the
//! number of requests: each stream's [`Snapshots`] (a tap that takes no media, so it
//! lives and dies with the stream) keeps the last JPEG of each size asked for. A
//! request finds it fresh and gets it; stale, gets it at once while a new one is made;
//! absent, waits for the first (bounded by [`MAKE_TIMEOUT`]). At most `max_jobs`
//! ffmpeg processes run at once on the server; past that, jobs wait their turn.
//!
//! # Invariants
//! - Memory is bounded per stream: at most [`MAX_SIZES`] sizes, each one JPEG of at most
//!   [`MAX_JPEG_BYTES`].
//! - An ffmpeg that hangs is killed at [`MAKE_TIMEOUT`]; one that fails leaves the last
//!   good JPEG (if any) in place and is logged.

mod make;

use crate::core::packet::Payload;
use crate::core::tap::{Attach, Tap};
use bytes::Bytes;
use sluice_media::{Frame, MediaKind, Track};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Semaphore};

pub use make::MakeError;

/// Sizes kept per stream: a page asks for one or two.
pub const MAX_SIZES: usize = 4;
/// Largest JPEG kept.
pub const MAX_JPEG_BYTES: usize = 8 << 20;
/// Longest an ffmpeg may take, and a first request waits.
pub const MAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Widths accepted (`?width=`).
pub const WIDTHS: std::ops::RangeInclusive<u32> = 16..=3840;

/// How snapshots are made, for every stream.
#[derive(Debug)]
pub struct SnapshotConfig {
    /// A new snapshot at most this often per stream and size.
    pub interval: Duration,
    /// The ffmpeg to run.
    pub ffmpeg: String,
    /// ffmpeg processes at once, server-wide.
    pub jobs: Arc<Semaphore>,
}

/// Makes the snapshot cache of each new stream.
#[derive(Debug)]
pub struct SnapshotTaps {
    pub config: Arc<SnapshotConfig>,
}

impl Attach for SnapshotTaps {
    fn attach(&self, _key: &str, _id: u64) -> Option<Arc<dyn Tap>> {
        Some(Arc::new(Snapshots {
            config: self.config.clone(),
            sizes: Mutex::new(Vec::new()),
        }))
    }
}

/// One stream's snapshots, by size.
#[derive(Debug)]
pub struct Snapshots {
    config: Arc<SnapshotConfig>,
    sizes: Mutex<Vec<Size>>,
}

/// The snapshot of one size.
#[derive(Debug)]
struct Size {
    width: Option<u32>,
    /// The newest JPEG and when it was made.
    jpeg: Option<(Bytes, Instant)>,
    /// Bumped when a job ends, for the requests waiting for the first JPEG.
    done: watch::Sender<u64>,
    making: bool,
    /// Asked for last: the size asked for least recently goes first.
    asked: Instant,
}

/// A snapshot as served: the JPEG and its age.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub jpeg: Bytes,
    pub age: Duration,
}

/// Why there is no snapshot to answer with.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The ring holds no keyframe yet.
    #[error("the stream has no keyframe yet")]
    NoKeyframe,
    /// The video's codec cannot be muxed for ffmpeg here (only H.264 and H.265 are).
    #[error("no snapshots of {0} video")]
    Codec(&'static str),
    /// ffmpeg did not make one.
    #[error(transparent)]
    Make(#[from] MakeError),
    /// The first snapshot took longer than [`MAKE_TIMEOUT`].
    #[error("the snapshot took too long")]
    Timeout,
}

impl Tap for Snapshots {}

/// The newest keyframe the ring holds, with its track: what a snapshot shows.
fn newest_keyframe(stream: &crate::core::hub::Stream) -> Option<(Frame, Arc<Track>)> {
    let state = stream.lock();
    let ring = &state.ring;
    let mut at = ring.start()?;
    while at < ring.next() {
        if let Some(packet) = ring.get(at) {
            if let Payload::Media { frame, track } = &packet.payload {
                if frame.kind == MediaKind::Video && frame.keyframe && !packet.derived {
                    return Some((frame.clone(), track.clone()));
                }
            }
        }
        at += 1;
    }
    None
}

impl Snapshots {
    /// How often a snapshot of one size is made at most.
    pub fn interval(&self) -> Duration {
        self.config.interval
    }

    /// The snapshot of `stream` at `width` (its own size when `None`), made or
    /// refreshed as the module docs say.
    pub async fn get(
        &self,
        stream: &Arc<crate::core::hub::Stream>,
        width: Option<u32>,
    ) -> Result<Snapshot, SnapshotError> {
        let (cached, start, mut done) = {
            let mut sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let i = match sizes.iter().position(|s| s.width == width) {
                Some(i) => i,
                None => {
                    if sizes.len() == MAX_SIZES {
                        let oldest = (0..sizes.len()).min_by_key(|&i| sizes[i].asked);
                        if let Some(oldest) = oldest.filter(|&i| !sizes[i].making) {
                            sizes.swap_remove(oldest);
                        } else {
                            // Every size is being made: this one waits for no slot.
                            return Err(SnapshotError::Timeout);
                        }
                    }
                    sizes.push(Size {
                        width,
                        jpeg: None,
                        done: watch::channel(0).0,
                        making: false,
                        asked: now,
                    });
                    sizes.len() - 1
                }
            };
            let size = &mut sizes[i];
            size.asked = now;
            let cached = size.jpeg.as_ref().map(|(jpeg, at)| Snapshot {
                jpeg: jpeg.clone(),
                age: now.saturating_duration_since(*at),
            });
            let fresh = cached
                .as_ref()
                .is_some_and(|c| c.age < self.config.interval);
            let start = !fresh && !size.making;
            size.making |= start;
            (cached, start, size.done.subscribe())
        };
        if start {
            self.start(stream, width)?;
        }
        if let Some(cached) = cached {
            return Ok(cached);
        }
        // The first of this size: wait for the job.
        let waited = tokio::time::timeout(MAKE_TIMEOUT, done.changed()).await;
        if waited.is_err() {
            return Err(SnapshotError::Timeout);
        }
        let sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        let size = sizes.iter().find(|s| s.width == width);
        match size.and_then(|s| s.jpeg.as_ref()) {
            Some((jpeg, at)) => Ok(Snapshot {
                jpeg: jpeg.clone(),
                age: at.elapsed(),
            }),
            None => Err(SnapshotError::Make(MakeError::Failed)),
        }
    }

    /// Starts a job for `width` from the ring's newest keyframe; an error (nothing to
    /// make it from) ends the job at once.
    fn start(
        &self,
        stream: &Arc<crate::core::hub::Stream>,
        width: Option<u32>,
    ) -> Result<(), SnapshotError> {
        let input = match newest_keyframe(stream) {
            Some((frame, track)) => make::one_frame_ts(&frame, &track),
            None => Err(SnapshotError::NoKeyframe),
        };
        let input = match input {
            Ok(input) => input,
            Err(e) => {
                self.finish(width, None);
                return Err(e);
            }
        };
        let config = self.config.clone();
        let stream = stream.clone();
        tokio::task::spawn_local(async move {
            let made = async {
                let _turn = config.jobs.acquire().await.map_err(|_| MakeError::Failed)?;
                make::jpeg(&config.ffmpeg, input, width).await
            }
            .await;
            let jpeg = match made {
                Ok(jpeg) => Some(jpeg),
                Err(e) => {
                    tracing::warn!(stream = %stream.key, "snapshot: {e}");
                    None
                }
            };
            // `self` is this stream's tap: found again through the stream the task holds.
            if let Some(snapshots) = stream.tap::<Snapshots>() {
                snapshots.finish(width, jpeg);
            }
        });
        Ok(())
    }

    /// A job for `width` ended, with a JPEG or not.
    fn finish(&self, width: Option<u32>, jpeg: Option<Bytes>) {
        let mut sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(size) = sizes.iter_mut().find(|s| s.width == width) {
            size.making = false;
            if let Some(jpeg) = jpeg {
                size.jpeg = Some((jpeg, Instant::now()));
            }
            size.done.send_modify(|n| *n += 1);
        }
    }
}
