//! Recording live streams to files in the media root: fragmented MP4 (or MPEG-TS), per
//! stream or per app as the `record.streams` patterns and `[[apps]]` entries say,
//! rotated by duration, so that VOD plays them and a file cut at any moment plays up to
//! its last complete fragment.
//!
//! Why a writer thread: the disk can stall for seconds, and an event loop that waits
//! for it stalls every connection it serves. Publishers' workers only send commands
//! (open, tracks, frame, flush, close) to one `sluice-record` thread, which owns the
//! [`Fragmenter`] of each recording and its file.
//!
//! - `fragmenter`: frames in, file bytes out (sans-IO): the files, over
//!   `sluice_media::fragment`, which cuts the fragments, with a `prft` box per fMP4
//!   fragment.
//! - `writer`: the thread, file names and the file I/O.
//! - `catalogue`: every stream's files and spans in memory, for the API; `index`: each
//!   stream's index log on disk; `loader`: the start-up check of the logs against the
//!   files (on a `sluice-record-index` thread). The formats are `sluice_archive`'s.
//! - `retention`: which files the limits (`keep_days`, `keep_bytes`, `min_free_bytes`)
//!   remove (pure); `pruner`: the `sluice-record-retain` thread that applies them, and
//!   the removal of files, for it and for the API.
//!
//! # Invariants
//! - A worker never blocks on the recorder: commands go over an unbounded channel,
//!   and the frames in it are bounded by bytes (`record.queue_bytes`). When the queue is
//!   full, the frames of that recording are dropped until its next start point
//!   (counted, and logged once each time it starts dropping). Control commands are a
//!   handful per publish and are never dropped.
//! - Commands of one stream arrive in order: they are sent by its publisher (one at a
//!   time, handed over through the hub's lock) and by the hub when the stream ends.
//! - [`Writer::stop`] (after the workers are joined) completes every open file.

mod catalogue;
mod fragmenter;
mod index;
mod loader;
mod pruner;
mod retention;
mod writer;

use crate::core::tap::{Attach, Tap};
use crate::keys::{Pattern, PerStream};
pub use catalogue::{Catalogue, Listed, StreamEntry};
pub use fragmenter::{Format, FragmenterConfig};
pub use pruner::{RemoveError, Removed};
pub use retention::{Keep, Reason, RetentionConfig};

use crate::io::readers::Readers;
use arc_swap::ArcSwap;

use sluice_media::{Frame, Track};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Counted per queued frame on top of its payload (the command and the frame's
/// fields), so that many tiny frames are bounded too.
const FRAME_COST: usize = 128;

/// Settings of the recorder, from the configuration.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// Streams to record.
    pub patterns: Vec<Pattern>,
    /// Recording forced on (`Some(true)`) or off by the stream's app entry; `None`
    /// leaves it to `patterns`.
    pub force: PerStream<Option<bool>>,
    /// Where recordings go: `<dir>/<app>/<stream>/<stream>-<time>.<ext>`.
    pub dir: PathBuf,
    /// Where fragments and files end, and the container.
    pub fragmenter: FragmenterConfig,
    /// Bytes of frames waiting for the writer, beyond which frames are dropped.
    pub queue_bytes: usize,
    /// Told when a file is complete (`hooks.on_record_done`).
    pub notifier: Option<Arc<crate::hooks::Notifier>>,
    /// What the writer did, for `/metrics`.
    pub stats: Arc<RecordStats>,
    /// What retention keeps.
    pub retention: RetentionConfig,
    /// Files being read (players, downloads): retention leaves them alone.
    pub readers: Arc<Readers>,
}

/// The writer's counts since start.
#[derive(Debug, Default)]
pub struct RecordStats {
    /// Files completed.
    pub files: AtomicU64,
    /// Files abandoned on an I/O error (a full disk, say), and files that could not be
    /// created.
    pub failures: AtomicU64,
    /// Bytes written.
    pub bytes: AtomicU64,
    /// Files removed, by [`Reason::index`].
    pub removed: [AtomicU64; 4],
    /// Bytes of the files removed, by [`Reason::index`].
    pub removed_bytes: [AtomicU64; 4],
}

/// What workers send to the writer thread.
#[derive(Debug)]
enum Command {
    /// A stream to record; `id` names it in the commands that follow.
    Open {
        id: u64,
        key: String,
        dropped: Arc<AtomicU64>,
    },
    Tracks {
        id: u64,
        video: Option<Arc<Track>>,
        audio: Option<Arc<Track>>,
    },
    /// `cost` bytes of the queue, released once the writer took the frame.
    Frame { id: u64, frame: Frame, cost: usize },
    /// The publisher left; it may come back within the grace window.
    Flush { id: u64 },
    /// The stream ended.
    Close { id: u64 },
    /// The server stops: complete every file and exit.
    Shutdown,
}

/// The channel to the writer and the bytes of frames in it.
#[derive(Debug)]
struct Queue {
    tx: Sender<Command>,
    bytes: AtomicUsize,
    limit: usize,
}

impl Queue {
    /// Counts `cost` more bytes in the queue, unless that would pass the limit.
    fn reserve(&self, cost: usize) -> bool {
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                b.checked_add(cost).filter(|n| *n <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, cost: usize) {
        self.bytes.fetch_sub(cost, Ordering::AcqRel);
    }

    /// Sends a command; if the writer is gone (the server is stopping) it is dropped.
    fn send(&self, command: Command) -> bool {
        self.tx.send(command).is_ok()
    }
}

/// Makes the [`Recording`] of each stream that is to be recorded: a tap the hub
/// attaches to each new stream.
#[derive(Debug, Clone)]
pub struct Recorder {
    queue: Arc<Queue>,
    /// Whether a new stream is recorded; a reload replaces it ([`Recorder::records`]).
    records: PerStream<bool>,
    stats: Arc<RecordStats>,
    /// The recordings on disk, for the API.
    catalogue: Arc<Catalogue>,
    /// Removes recordings (the API's `DELETE`).
    removal: pruner::Removal,
    /// What retention keeps; a reload replaces it.
    retention: Arc<ArcSwap<RetentionConfig>>,
}

/// Which new streams are recorded: as `force` says (an app entry's `record`), or else
/// if one of `patterns` matches.
pub fn records(patterns: Vec<Pattern>, force: PerStream<Option<bool>>) -> PerStream<bool> {
    PerStream::new(move |key| {
        force
            .of(key)
            .unwrap_or_else(|| patterns.iter().any(|p| p.matches(key)))
    })
}

impl Attach for Recorder {
    fn attach(&self, key: &str, id: u64) -> Option<Arc<dyn Tap>> {
        let recording = self.recording(key, id, self.records.of(key))?;
        Some(Arc::new(recording))
    }
}

impl Recorder {
    /// What the writer did so far.
    pub fn stats(&self) -> &RecordStats {
        &self.stats
    }

    /// The recordings on disk and their spans.
    pub fn catalogue(&self) -> &Arc<Catalogue> {
        &self.catalogue
    }

    /// Removes the recordings of the stream whose directory key is `key` held wholly
    /// within `[from, to)`, all or none (see [`pruner::Removal::remove_range`]). Does
    /// file I/O: call it off the workers.
    pub fn remove_range(&self, key: &str, from: i64, to: i64) -> Result<Vec<Removed>, RemoveError> {
        self.removal.remove_range(key, from, to, Reason::Api)
    }

    /// Files of the media root being read now.
    pub fn files_read(&self) -> usize {
        self.removal.readers.reading()
    }

    /// What retention keeps: a reload stores new settings.
    pub fn retention(&self) -> &ArcSwap<RetentionConfig> {
        &self.retention
    }

    /// The stream directory key (`app/name`, as on disk) of a stream key.
    pub fn dir_key(key: &str) -> String {
        writer::key_dir(key).0.to_string_lossy().into_owned()
    }

    /// Which new streams are recorded (see [`records`]): a reload sets it anew.
    pub fn records(&self) -> &PerStream<bool> {
        &self.records
    }

    /// The recording of a new stream `key` (hub id `id`), if it is `recorded`.
    fn recording(&self, key: &str, id: u64, recorded: bool) -> Option<Recording> {
        if !recorded {
            return None;
        }
        let dropped = Arc::new(AtomicU64::new(0));
        self.queue.send(Command::Open {
            id,
            key: key.to_string(),
            dropped: dropped.clone(),
        });
        Some(Recording {
            id,
            key: key.to_string(),
            queue: self.queue.clone(),
            skipping: AtomicBool::new(false),
            dropped,
            closed: AtomicBool::new(false),
        })
    }
}

/// One stream's line to the writer thread, a tap of the stream: its publisher feeds
/// [`Recording::tracks`], [`Recording::frame`] and [`Recording::flush`]; the hub calls
/// [`Recording::close`] when the stream ends (and dropping it closes it too).
#[derive(Debug)]
pub struct Recording {
    id: u64,
    key: String,
    queue: Arc<Queue>,
    /// Frames are being dropped until the next start point.
    skipping: AtomicBool,
    /// Frames dropped because the queue was full.
    dropped: Arc<AtomicU64>,
    closed: AtomicBool,
}

impl Tap for Recording {
    fn track(&self, _: &str, _: &Arc<Track>, [video, audio]: [Option<&Arc<Track>>; 2]) {
        self.tracks(video, audio);
    }

    fn frame(&self, _: &str, frame: &Frame, start: bool) {
        Recording::frame(self, frame, start);
    }

    fn publisher_left(&self) {
        self.flush();
    }

    fn end(&self, _: &str) {
        self.close();
    }
}

impl Recording {
    /// The stream's tracks now.
    pub fn tracks(&self, video: Option<&Arc<Track>>, audio: Option<&Arc<Track>>) {
        self.queue.send(Command::Tracks {
            id: self.id,
            video: video.cloned(),
            audio: audio.cloned(),
        });
    }

    /// One frame (timestamps on the stream's timeline); `start` when it is a start
    /// point (a video keyframe, or audio in a stream without video). Never waits: with
    /// the queue full, this and the following frames up to the next start point are
    /// dropped.
    pub fn frame(&self, frame: &Frame, start: bool) {
        if self.skipping.load(Ordering::Relaxed) && !start {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let cost = frame.payload.len().saturating_add(FRAME_COST);
        if !self.queue.reserve(cost) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            if !self.skipping.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    stream = %self.key,
                    dropped = self.dropped.load(Ordering::Relaxed),
                    "recording queue full (disk too slow): dropping frames until the next keyframe"
                );
            }
            return;
        }
        self.skipping.store(false, Ordering::Relaxed);
        let sent = self.queue.send(Command::Frame {
            id: self.id,
            frame: frame.clone(),
            cost,
        });
        if !sent {
            self.queue.release(cost);
        }
    }

    /// The publisher left: the file is completed as far as it goes and kept open for
    /// a publisher that comes back.
    pub fn flush(&self) {
        self.queue.send(Command::Flush { id: self.id });
    }

    /// The stream ended: its file is completed and closed. Later calls do nothing.
    pub fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.queue.send(Command::Close { id: self.id });
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer thread, the loader's while it runs, and retention's.
#[derive(Debug)]
pub struct Writer {
    queue: Arc<Queue>,
    thread: JoinHandle<()>,
    loader: Option<JoinHandle<()>>,
    retain: (mpsc::SyncSender<pruner::Wake>, JoinHandle<()>),
    catalogue: Arc<Catalogue>,
}

impl Writer {
    /// Completes every open file and joins the threads. Call after the workers stopped.
    pub fn stop(self) {
        self.catalogue.stopping.store(true, Ordering::Relaxed);
        if self.loader.is_some_and(|l| l.join().is_err()) {
            tracing::error!("the recordings index thread panicked");
        }
        let (retain, retain_thread) = self.retain;
        let _ = retain.send(pruner::Wake::Stop);
        if retain_thread.join().is_err() {
            tracing::error!("the recordings retention thread panicked");
        }
        self.queue.send(Command::Shutdown);
        if self.thread.join().is_err() {
            tracing::error!("the recording thread panicked");
        }
    }
}

/// Starts the writer thread.
pub fn start(config: RecordConfig) -> std::io::Result<(Recorder, Writer)> {
    let (tx, rx) = mpsc::channel();
    let queue = Arc::new(Queue {
        tx,
        bytes: AtomicUsize::new(0),
        limit: config.queue_bytes,
    });
    let records = records(config.patterns.clone(), config.force.clone());
    let stats = config.stats.clone();
    let catalogue = Arc::new(Catalogue::new(config.dir.clone()));
    let loader = std::thread::Builder::new()
        .name("sluice-record-index".into())
        .spawn({
            let catalogue = catalogue.clone();
            move || {
                let started = std::time::Instant::now();
                let r = loader::load(&catalogue);
                tracing::info!(
                    streams = r.streams,
                    files = r.files,
                    read_again = r.scanned,
                    removed = r.removed,
                    repaired = r.repaired,
                    failed = r.failed,
                    ms = started.elapsed().as_millis() as u64,
                    "recordings index loaded"
                );
            }
        })?;
    let removal = pruner::Removal {
        catalogue: catalogue.clone(),
        readers: config.readers.clone(),
        stats: stats.clone(),
    };
    let retention = Arc::new(ArcSwap::from_pointee(config.retention.clone()));
    // One wake pending is enough: a pass sees every file completed before it.
    let (retain_tx, retain_rx) = mpsc::sync_channel(1);
    let retain_thread = std::thread::Builder::new()
        .name("sluice-record-retain".into())
        .spawn({
            let (removal, retention) = (removal.clone(), retention.clone());
            move || pruner::run(retain_rx, &removal, &retention)
        })?;
    let nudge = pruner::Nudge::new(retain_tx.clone());
    let thread = std::thread::Builder::new()
        .name("sluice-record".into())
        .spawn({
            let queue = queue.clone();
            let catalogue = catalogue.clone();
            move || writer::run(rx, &queue, &config, &catalogue, Some(&nudge))
        })?;
    Ok((
        Recorder {
            queue: queue.clone(),
            records,
            stats,
            catalogue: catalogue.clone(),
            removal,
            retention,
        },
        Writer {
            queue,
            thread,
            loader: Some(loader),
            retain: (retain_tx, retain_thread),
            catalogue,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sluice_media::MediaKind;

    fn frame(keyframe: bool, len: usize) -> Frame {
        Frame {
            kind: MediaKind::Video,
            dts: 0,
            pts: 0,
            keyframe,
            payload: Bytes::from(vec![0; len]),
        }
    }

    /// A recorder whose writer never reads: the disk stalled.
    fn stalled(limit: usize) -> (Recorder, mpsc::Receiver<Command>) {
        let (tx, rx) = mpsc::channel();
        let recorder = Recorder {
            queue: Arc::new(Queue {
                tx,
                bytes: AtomicUsize::new(0),
                limit,
            }),
            records: records(
                vec![Pattern::parse("live/*").unwrap()],
                PerStream::new(|key: &str| (key == "live/off").then_some(false)),
            ),
            stats: Default::default(),
            catalogue: Arc::new(Catalogue::new(std::env::temp_dir())),
            removal: pruner::Removal {
                catalogue: Arc::new(Catalogue::new(std::env::temp_dir())),
                readers: Default::default(),
                stats: Default::default(),
            },
            retention: Default::default(),
        };
        (recorder, rx)
    }

    #[test]
    fn only_matching_streams_get_a_tap() {
        let (recorder, rx) = stalled(1 << 20);
        assert!(recorder.attach("other/cam", 1).is_none());
        assert!(recorder.attach("live/off", 3).is_none(), "forced off");
        let forced = recorder.recording("other/cam", 4, true).unwrap();
        assert!(matches!(rx.try_recv(), Ok(Command::Open { id: 4, .. })));
        drop(forced);
        assert!(matches!(rx.try_recv(), Ok(Command::Close { id: 4 })));
        let tap = recorder.attach("live/cam", 2).unwrap();
        assert!(matches!(rx.try_recv(), Ok(Command::Open { id: 2, .. })));
        drop(tap);
        assert!(matches!(rx.try_recv(), Ok(Command::Close { id: 2 })));
        assert!(rx.try_recv().is_err(), "closed once");
    }

    #[test]
    fn a_full_queue_drops_frames_until_the_next_keyframe() {
        let (recorder, rx) = stalled(3 * (1000 + FRAME_COST));
        let tap = recorder.recording("live/cam", 1, true).unwrap();
        let sent = |keyframe| {
            tap.frame(&frame(keyframe, 1000), keyframe);
            std::iter::from_fn(|| rx.try_recv().ok())
                .filter(|c| matches!(c, Command::Frame { .. }))
                .count()
        };
        assert_eq!(sent(true), 1);
        assert_eq!(sent(false), 1);
        assert_eq!(sent(false), 1);
        // Full: dropped, and so is what follows up to a keyframe, even with room again.
        assert_eq!(sent(false), 0);
        tap.queue.release(3 * (1000 + FRAME_COST));
        assert_eq!(sent(false), 0);
        assert_eq!(sent(true), 1);
        assert_eq!(sent(false), 1);
        assert_eq!(tap.dropped.load(Ordering::Relaxed), 2);
    }
}
