//! HLS from memory: each live stream is segmented as it arrives (MPEG-TS, and fMP4
//! with Low-Latency HLS parts), and requests are answered from an immutable snapshot.
//!
//! Why a snapshot: the publisher's thread is the only writer (it feeds the
//! segmenters under a lock nobody else takes); after each part or segment it
//! publishes a new [`HlsView`] with `ArcSwap`, so a request on any worker reads
//! playlists and segment bytes without a lock shared by all workers. Segment bytes
//! are `Bytes` shared by every viewer; nothing is copied per request. A segment, once
//! complete, moves into a sealed in-memory file (`memfile`): plain HTTP sends it with
//! `sendfile` from the page cache, TLS and HTTP/2 read it through its mapping, and
//! its parts become slices of the same pages.
//!
//! Only while someone asks for the stream's HLS (a request in the last
//! [`FILES_IDLE`]): a stream nobody watches over HLS keeps its segments on the heap
//! and spares its publisher the copy into page-cache pages.
//!
//! Segmenting itself runs on demand: from the first HLS request ([`want`]: the GOPs
//! the stream's ring keeps are replayed, so the first playlist lists them at once)
//! until `idle` after the last one, when the segments are dropped. [`HlsStream`] is a
//! tap of its stream (`core::tap`): the publisher feeds it in stream order. An app can keep it on always (a CDN
//! origin, whose edges must find segments that began before they asked).
//!
//! Names (see `docs/cdn.md`): a segment's URI is `TAG-N.ts`, `TAG-N.m4s` or, for a
//! part, `TAG-N.P.m4s`, where `N` is the decode time of its first frame on the
//! stream's timeline (90 kHz) and the segmenters cut on a grid of that timeline
//! (`sluice_hls`), so every server segmenting the same publish, whenever it started,
//! names the same media alike. `TAG` tells the stream's instances apart: the Unix time
//! in seconds (hex) of the timeline's time 0, as the stream's first frames measured it
//! ([`HlsStream::epoch_s`]). A new instance of a stream (a publisher back after the
//! grace window, whose timestamps start again) has a time 0 at least the grace window
//! later, so a URI is never reused for other media, and segments, parts and init
//! segments (named by a hash of their bytes) are cached as immutable. Two servers fed
//! the same publish measure the same time 0 within their delivery delays: usually the
//! same second, and each answers the other's tag within [`TAG_SLACK_S`].
//!
//! Encryption (`hls.encryption = "aes-128"`): the segmenters encrypt each segment once,
//! when it completes (`sluice_hls::SegmentKeys`), so every viewer and the memfds share
//! the ciphertext. The keys come from a secret drawn when the stream's HLS is made and
//! kept for its life (a restart after idle encrypts a segment with the same key and
//! IV, under the same URI); [`HlsStream::key`] answers a key only while a kept segment uses it. A key
//! URI is `key/TAG-PERIOD` below the stream (`name/key/…` from the TS playlist): the
//! tag keeps a player's cached key of an earlier instance from being reused.
//! Another server segmenting the same publish has its own secret: a CDN must send an
//! encrypted stream's requests to one origin.

mod audience;

use crate::core::cue::StreamCue;
use crate::core::hub::Stream;
use crate::core::packet::Payload;
use crate::core::tap::{Attach, Tap};
use crate::io::memfile::MemFile;
use crate::keys::PerStream;
use arc_swap::ArcSwap;
use audience::Audience;
use bytes::Bytes;
use sluice_hls::{
    Encryption, Fmp4Segmenter, HlsConfig, KeySecret, SegmentKeys, SegmentNames, Timeline,
    TsSegmenter, Variant, KEY_LEN, SECRET_LEN,
};
use sluice_media::{Frame, Track};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// How far (in seconds) a tag in a request may be from this stream's and still name
/// its segments: another server fed the same publish measures its time 0 a little
/// later or earlier, and may round it to the next second. A stream's next instance
/// starts at least the grace window later (10 s by default; keep it over 2 s), so its
/// tag never falls within this of the one before.
pub const TAG_SLACK_S: i64 = 1;

/// A stream whose HLS was asked for this lately has a viewer, fetches or not.
const ASKED_LATELY: Duration = Duration::from_secs(5);

/// What requests see of one variant.
#[derive(Debug)]
pub struct VariantView {
    pub timeline: Timeline,
    pub playlist: Bytes,
    /// The hash in the init segment's name (fMP4; 0 without one).
    pub init_id: u64,
    /// Complete segments, each as its pieces in order.
    pub segments: BTreeMap<u64, Vec<Bytes>>,
    pub parts: BTreeMap<(u64, u32), Bytes>,
    pub init: Option<Bytes>,
    /// Complete segments as sealed in-memory files, for `sendfile` on plain HTTP.
    pub files: BTreeMap<u64, Arc<MemFile>>,
}

/// What requests see of a stream's HLS output.
#[derive(Debug)]
pub struct HlsView {
    /// The tag in segment URIs (empty while not segmenting).
    pub tag: String,
    /// The stream's time 0 in Unix seconds, the tag's value (while segmenting).
    pub epoch_s: Option<i64>,
    pub ts: Option<VariantView>,
    pub fmp4: Option<VariantView>,
}

impl HlsView {
    fn empty() -> HlsView {
        HlsView {
            tag: String::new(),
            epoch_s: None,
            ts: None,
            fmp4: None,
        }
    }

    /// Whether `tag` (hex, from a request) names this stream's segments: its own, or
    /// one within [`TAG_SLACK_S`] (another server's of the same publish).
    pub fn accepts(&self, tag: &str) -> bool {
        let (Some(epoch), Ok(asked)) = (self.epoch_s, u64::from_str_radix(tag, 16)) else {
            return false;
        };
        // Tags are an i64 as u64 (wrapping): compare as such.
        let asked = asked as i64;
        asked
            .checked_sub(epoch)
            .is_some_and(|d| d.abs() <= TAG_SLACK_S)
    }
}

/// The tag of a stream whose time 0 is `epoch_s`.
fn tag_of(epoch_s: i64) -> String {
    format!("{:x}", epoch_s as u64)
}

/// FNV-1a: the init segment's name is a hash of its bytes, so a new init (new tracks)
/// gets a new URI. Not for anything adversarial: the bytes are ours.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A packet the ring kept, replayed into segmenters that start late.
#[derive(Debug, Clone, Copy)]
pub enum Replay<'a> {
    /// A decoder configuration.
    Track(&'a Arc<Track>),
    /// A frame, with the configuration it was coded with and how many ms older it is
    /// than the newest one.
    Frame(&'a Frame, &'a Arc<Track>, i64),
    /// A publisher came back here.
    Discontinuity,
    /// The AAC the server makes from the stream's Opus: the TS variant's audio.
    DerivedTrack(&'a Arc<Track>),
    /// An SCTE-35 cue that splices within or after what is replayed.
    Cue(&'a StreamCue),
}

#[derive(Debug)]
struct Segmenters {
    tag: String,
    epoch_s: i64,
    ts: TsSegmenter,
    fmp4: Fmp4Segmenter,
    video: Option<Arc<Track>>,
    audio: Option<Arc<Track>>,
    /// The AAC the server makes from an Opus stream's audio: the TS variant takes it
    /// instead of the Opus, which MPEG-TS players lack; fMP4 keeps the Opus.
    ts_audio: Option<Arc<Track>>,
    ts_files: BTreeMap<u64, Arc<MemFile>>,
    fmp4_files: BTreeMap<u64, Arc<MemFile>>,
    /// Making in-memory files failed once (no memfd): segments stay on the heap.
    no_files: bool,
}

impl Segmenters {
    fn new(
        config: HlsConfig,
        epoch_s: i64,
        secret: Option<&KeySecret>,
    ) -> Result<Segmenters, sluice_hls::HlsError> {
        Ok(Segmenters {
            tag: tag_of(epoch_s),
            epoch_s,
            ts: TsSegmenter::with_secret(config, secret)?,
            fmp4: Fmp4Segmenter::with_secret(config, secret)?,
            video: None,
            audio: None,
            ts_audio: None,
            ts_files: BTreeMap::new(),
            fmp4_files: BTreeMap::new(),
            no_files: false,
        })
    }

    /// New decoder configuration for one kind of track.
    fn set_track(&mut self, track: &Arc<Track>) {
        match track.kind() {
            sluice_media::MediaKind::Video => self.video = Some(track.clone()),
            sluice_media::MediaKind::Audio => self.audio = Some(track.clone()),
        }
        let ts_audio = self.ts_audio.as_ref().or(self.audio.as_ref());
        self.ts
            .set_tracks(self.video.as_deref(), ts_audio.map(|t| &**t));
        self.fmp4
            .set_tracks(self.video.as_deref(), self.audio.as_deref());
    }

    /// The TS variant takes `track` (AAC made from the stream's Opus) as its audio.
    fn set_derived_track(&mut self, track: &Arc<Track>) {
        self.ts_audio = Some(track.clone());
        self.ts
            .set_tracks(self.video.as_deref(), self.ts_audio.as_deref());
    }

    /// An SCTE-35 cue: each variant cuts a segment at its splice point and lists its
    /// `EXT-X-DATERANGE` there.
    fn cue(&mut self, cue: &StreamCue) {
        self.ts.cue(cue.at, cue.info.clone());
        self.fmp4.cue(cue.at, cue.info.clone());
    }

    /// The next segment of each variant starts with a discontinuity.
    fn discontinuity(&mut self) {
        self.ts.discontinuity();
        self.fmp4.discontinuity();
    }

    /// Whether `track` is the configuration in use for its kind.
    fn uses(&self, track: &Arc<Track>) -> bool {
        let now = match track.kind() {
            sluice_media::MediaKind::Video => &self.video,
            sluice_media::MediaKind::Audio => &self.audio,
        };
        now.as_ref().is_some_and(|t| Arc::ptr_eq(t, track))
    }

    /// Adds one frame; returns whether a playlist changed.
    fn push(&mut self, key: &str, frame: &Frame, wall_clock_ms: i64) -> bool {
        // Changed by revision, not by the result: a segment can complete and still
        // report a frame it dropped.
        let before = (
            self.ts.timeline().revision(),
            self.fmp4.timeline().revision(),
        );
        // With AAC made for it, TS takes that instead of the stream's own audio.
        let ts_takes = frame.kind == sluice_media::MediaKind::Video || self.ts_audio.is_none();
        if ts_takes {
            if let Err(e) = self.ts.push(frame, wall_clock_ms) {
                tracing::debug!(stream = %key, "TS segmenter dropped media: {e}");
            }
        }
        if let Err(e) = self.fmp4.push(frame, wall_clock_ms) {
            tracing::debug!(stream = %key, "fMP4 segmenter dropped media: {e}");
        }
        let ts = self.ts.timeline().revision() != before.0;
        let fmp4 = self.fmp4.timeline().revision() != before.1;
        if ts {
            // A TS segment boundary (every ~2 s): say what this stream holds.
            tracing::debug!(stream = %key, hls_bytes = self.memory(), "HLS segment");
        }
        ts || fmp4
    }

    /// Adds one frame of the AAC made from the stream's Opus, to TS only; returns
    /// whether a playlist changed.
    fn push_derived(&mut self, key: &str, frame: &Frame, wall_clock_ms: i64) -> bool {
        if self.ts_audio.is_none() {
            return false;
        }
        let before = self.ts.timeline().revision();
        if let Err(e) = self.ts.push(frame, wall_clock_ms) {
            tracing::debug!(stream = %key, "TS segmenter dropped transcoded audio: {e}");
        }
        self.ts.timeline().revision() != before
    }

    /// Moves each newly completed segment into a sealed in-memory file when `wanted`
    /// (the heap copy is freed once its readers are done) and forgets the files of
    /// released ones.
    fn sync_files(&mut self, key: &str, wanted: bool) {
        if wanted && !self.no_files {
            self.make_files(key);
        }
        let (ts, fmp4) = (self.ts.segments(), self.fmp4.segments());
        self.ts_files.retain(|msn, _| ts.contains_key(msn));
        self.fmp4_files.retain(|msn, _| fmp4.contains_key(msn));
    }

    fn make_files(&mut self, key: &str) {
        let ts_new: Vec<(u64, Bytes)> = self
            .ts
            .segments()
            .iter()
            .filter(|(msn, _)| !self.ts_files.contains_key(msn))
            .map(|(msn, b)| (*msn, b.clone()))
            .collect();
        for (msn, bytes) in ts_new {
            match MemFile::new(&[bytes]) {
                Ok(f) => {
                    if self.ts.replace_segment(msn, f.bytes.clone()) {
                        self.ts_files.insert(msn, Arc::new(f));
                    }
                }
                Err(e) => return self.give_up(key, e),
            }
        }
        let fmp4_new: Vec<(u64, Vec<Bytes>)> = self
            .fmp4
            .segments()
            .iter()
            .filter(|(msn, _)| !self.fmp4_files.contains_key(msn))
            .map(|(msn, b)| (*msn, b.clone()))
            .collect();
        for (msn, pieces) in fmp4_new {
            match MemFile::new(&pieces) {
                Ok(f) => {
                    if self.fmp4.replace_segment(msn, f.bytes.clone()) {
                        self.fmp4_files.insert(msn, Arc::new(f));
                    }
                }
                Err(e) => return self.give_up(key, e),
            }
        }
    }

    fn give_up(&mut self, key: &str, e: std::io::Error) {
        tracing::warn!(stream = %key, "HLS segments stay on the heap (no memfd: {e})");
        self.no_files = true;
        self.ts_files.clear();
        self.fmp4_files.clear();
    }

    /// Bytes held by kept segments and the init segment (parts share the segments' bytes).
    fn memory(&self) -> usize {
        let ts: usize = self.ts.segments().values().map(Bytes::len).sum();
        let fmp4: usize = self
            .fmp4
            .segments()
            .values()
            .flatten()
            .map(Bytes::len)
            .sum();
        ts + fmp4 + self.fmp4.init().map_or(0, Bytes::len)
    }
}

/// How long a stream's frames measure its time 0 (the tag of its URIs), from the first:
/// long enough for the burst that starts a pull to be followed by frames on time, and
/// short, so that servers that start segmenting it at different moments after this
/// use the same measure.
pub const EPOCH_WINDOW_MS: i64 = 2000;

/// How long after the last HLS request complete segments still move to memfds.
pub const FILES_IDLE: Duration = Duration::from_secs(30);

/// The HLS output of one stream.
#[derive(Debug)]
pub struct HlsStream {
    /// `None`: HLS is off for this stream.
    config: Option<HlsConfig>,
    /// The secret the keys of encrypted segments come from, for this stream's life
    /// (`Debug` shows nothing of it); `None` without encryption.
    secret: Option<KeySecret>,
    /// The keys of that secret, for the key route.
    keys: Option<SegmentKeys>,
    /// Segment from the first frame on, asked for or not.
    always: bool,
    /// How long after the last request segmenting stops.
    idle: Duration,
    /// Whether `segmenters` is running: read per frame and per request without the lock.
    segmenting: AtomicBool,
    segmenters: Mutex<Option<Segmenters>>,
    born: Instant,
    /// When an HLS request last came, in whole seconds after `born` plus one (0:
    /// never). Written by the workers at most once a second, read by the publisher.
    requested: AtomicU64,
    /// The Unix time (ms) of the stream's time 0: the earliest that its frames of the
    /// first [`EPOCH_WINDOW_MS`] say (a frame's arrival less its decode time; one that
    /// came late, as those of the burst that starts a pull do, says later), then fixed.
    /// `i64::MAX` before the first frame. Written by the publisher only.
    epoch_ms: AtomicI64,
    /// When the first frame arrived (Unix ms; `i64::MIN` before it).
    first_frame_ms: AtomicI64,
    view: ArcSwap<HlsView>,
    changed: watch::Sender<u64>,
    /// Viewers of the TS variant and of the fMP4 one, by what they fetch.
    ts_audience: Audience,
    fmp4_audience: Audience,
}

/// A new key secret from the system's secure random source (`None` if it fails).
fn new_secret() -> Option<KeySecret> {
    use aws_lc_rs::rand::SecureRandom;
    let mut bytes = [0u8; SECRET_LEN];
    aws_lc_rs::rand::SystemRandom::new().fill(&mut bytes).ok()?;
    Some(KeySecret::new(bytes))
}

fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0))
}

/// URIs in the TS playlist (`/app/name.m3u8`): relative, so `name/TAG-N.ts`, `N` the
/// segment's name (its start on the stream's timeline).
struct TsNames<'a> {
    dir: &'a str,
    tag: &'a str,
}

impl SegmentNames for TsNames<'_> {
    fn segment(&self, name: u64, out: &mut String) {
        out.push_str(&format!("{}/{}-{name}.ts", self.dir, self.tag));
    }
    fn part(&self, _: u64, _: u32, _: &mut String) {}
    fn init(&self, _: &mut String) {}
    fn key(&self, period: u64, out: &mut String) {
        out.push_str(&format!("{}/key/{}-{period}", self.dir, self.tag));
    }
}

/// URIs in the fMP4 playlist (`/app/name/index.m3u8`): siblings of the playlist;
/// the init segment's is `TAG-init-HASH.mp4`.
struct Fmp4Names<'a> {
    tag: &'a str,
    init_id: u64,
}

impl SegmentNames for Fmp4Names<'_> {
    fn segment(&self, name: u64, out: &mut String) {
        out.push_str(&format!("{}-{name}.m4s", self.tag));
    }
    fn part(&self, name: u64, part: u32, out: &mut String) {
        out.push_str(&format!("{}-{name}.{part}.m4s", self.tag));
    }
    fn init(&self, out: &mut String) {
        out.push_str(&format!("{}-init-{:x}.mp4", self.tag, self.init_id));
    }
    fn key(&self, period: u64, out: &mut String) {
        out.push_str(&format!("key/{}-{period}", self.tag));
    }
}

impl HlsStream {
    /// `key` is `app/name`; `config` `None` turns HLS off for this stream. With
    /// `always`, segmenting starts now and never stops; otherwise it runs from the
    /// first request ([`HlsStream::start`]) until `idle` after the last.
    pub fn new(key: &str, config: Option<HlsConfig>, always: bool, idle: Duration) -> Self {
        // A bad configuration is said once, here, and turns HLS off. The fMP4 variant's
        // check is the stricter one (TS segments turn low latency off).
        let mut config = config.filter(|c| match c.validate(Variant::Fmp4) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(stream = %key, "HLS off: {e}");
                false
            }
        });
        let secret = match config.map(|c| c.encryption) {
            Some(Encryption::Aes128 { .. }) => match new_secret() {
                Some(secret) => Some(secret),
                None => {
                    // Never in the clear when encryption was asked for.
                    tracing::warn!(stream = %key, "HLS off: no random source for its keys");
                    config = None;
                    None
                }
            },
            _ => None,
        };
        let keys = match (config.map(|c| c.encryption), &secret) {
            (Some(Encryption::Aes128 { rotation }), Some(secret)) => {
                SegmentKeys::new(secret, rotation).ok()
            }
            _ => None,
        };
        let hls = HlsStream {
            config,
            secret,
            keys,
            always,
            idle,
            segmenting: AtomicBool::new(false),
            segmenters: Mutex::new(None),
            born: Instant::now(),
            requested: AtomicU64::new(0),
            epoch_ms: AtomicI64::new(i64::MAX),
            first_frame_ms: AtomicI64::new(i64::MIN),
            view: ArcSwap::from_pointee(HlsView::empty()),
            changed: watch::channel(0).0,
            ts_audience: Audience::default(),
            fmp4_audience: Audience::default(),
        };
        if always {
            hls.start(key, std::iter::empty(), &[]);
        }
        hls
    }

    /// The Unix time in seconds (rounded) of the stream's time 0: the tag of its
    /// segment URIs, taken when segmenting starts. Measured by the frames of the first
    /// [`EPOCH_WINDOW_MS`] (by the wall clock, less their decode time: the earliest);
    /// before any frame, now.
    pub fn epoch_s(&self) -> i64 {
        let ms = match self.epoch_ms.load(Ordering::Relaxed) {
            i64::MAX => wall_clock_ms(),
            ms => ms,
        };
        ms.saturating_add(500).div_euclid(1000)
    }

    /// The key of `period` for a request naming it with `tag`: only this instance's tag
    /// (another server's secret is not ours), only while segments are encrypted, and
    /// only while a kept or in-progress segment of either variant uses it.
    pub fn key(&self, tag: &str, period: u64) -> Option<[u8; KEY_LEN]> {
        let keys = self.keys.as_ref()?;
        let view = self.view.load();
        if view.tag.is_empty() || view.tag != tag {
            return None;
        }
        let uses = keys.segments_of(period);
        let used = [&view.ts, &view.fmp4].into_iter().flatten().any(|v| {
            let kept = v.timeline.kept();
            let end = v.timeline.in_progress().map_or(kept.end, |m| m + 1);
            uses.start < end && kept.start < uses.end
        });
        used.then(|| keys.key(period))
    }

    /// Whether HLS is on for this stream at all.
    pub fn enabled(&self) -> bool {
        self.config.is_some()
    }

    /// Whether the segmenters run now.
    pub fn segmenting(&self) -> bool {
        self.segmenting.load(Ordering::Acquire)
    }

    /// Someone asked for this stream's HLS (a playlist, segment or part).
    pub fn requested(&self) {
        let now = self.born.elapsed().as_secs() + 1;
        // A load first: the shared line is written once a second, not per request.
        if self.requested.load(Ordering::Relaxed) != now {
            self.requested.store(now, Ordering::Relaxed);
        }
    }

    /// Whole seconds since the last request (`None`: never asked).
    fn since_requested(&self) -> Option<u64> {
        let at = self.requested.load(Ordering::Relaxed);
        (at != 0).then(|| (self.born.elapsed().as_secs() + 1).saturating_sub(at))
    }

    /// Whether complete segments should move to memfds: HLS was asked for lately.
    fn files_wanted(&self) -> bool {
        self.since_requested()
            .is_some_and(|s| s < FILES_IDLE.as_secs())
    }

    fn with<R>(&self, f: impl FnOnce(&mut Segmenters) -> R) -> Option<R> {
        let mut s = self.segmenters.lock().unwrap_or_else(|e| e.into_inner());
        s.as_mut().map(f)
    }

    /// Starts segmenting (when HLS is on and it is not running yet), first replaying
    /// what the ring kept, oldest first from a keyframe, then taking the `current`
    /// configurations the replay did not end with. The caller holds the stream's taps,
    /// so no frame of the publisher falls between the replay and the next push.
    pub fn start<'a>(
        &self,
        key: &str,
        replay: impl Iterator<Item = Replay<'a>>,
        current: &[Option<Arc<Track>>],
    ) {
        let Some(config) = self.config else {
            return;
        };
        let mut guard = self.segmenters.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_some() {
            return;
        }
        let Ok(mut s) = Segmenters::new(config, self.epoch_s(), self.secret.as_ref()) else {
            return;
        };
        // Both kinds' tracks before the first frame, as a live publisher gives them: a
        // track set after a segment began joins only at the next one. Each kind starts
        // with the track of its first frame replayed, else the current one.
        let replay: Vec<Replay<'a>> = replay.collect();
        for kind in [
            sluice_media::MediaKind::Video,
            sluice_media::MediaKind::Audio,
        ] {
            let first = replay.iter().find_map(|item| match item {
                Replay::Frame(frame, track, _) if frame.kind == kind => Some(*track),
                _ => None,
            });
            let current = current.iter().flatten().find(|t| t.kind() == kind);
            if let Some(track) = first.or(current) {
                s.set_track(track);
            }
        }
        let now = wall_clock_ms();
        let mut frames = 0usize;
        for item in replay {
            match item {
                Replay::Track(track) => s.set_track(track),
                Replay::Frame(frame, track, age_ms) => {
                    if !s.uses(track) {
                        s.set_track(track);
                    }
                    s.push(key, frame, now - age_ms);
                    frames += 1;
                }
                Replay::Discontinuity => s.discontinuity(),
                Replay::DerivedTrack(track) => s.set_derived_track(track),
                Replay::Cue(cue) => s.cue(cue),
            }
        }
        for track in current.iter().flatten() {
            if !s.uses(track) {
                s.set_track(track);
            }
        }
        s.sync_files(key, self.files_wanted());
        let view = self.snapshot(key, &s);
        *guard = Some(s);
        self.segmenting.store(true, Ordering::Release);
        drop(guard);
        self.publish(view);
        if !self.always {
            tracing::info!(stream = %key, frames, "HLS: segmenting, from what the ring kept");
        }
    }

    /// Stops segmenting and drops the segments: nobody asked for `idle`.
    fn stop(&self, key: &str) {
        let mut guard = self.segmenters.lock().unwrap_or_else(|e| e.into_inner());
        *guard = None;
        self.segmenting.store(false, Ordering::Release);
        drop(guard);
        self.publish(HlsView::empty());
        tracing::info!(stream = %key, idle_s = self.idle.as_secs(), "HLS: idle, segmenting stopped");
    }

    /// New decoder configuration for one kind of track (ignored while not segmenting:
    /// a start takes the current ones from the hub).
    pub fn set_track(&self, track: &Arc<Track>) {
        self.with(|s| s.set_track(track));
    }

    /// The AAC made from the stream's Opus: the TS variant's audio from now on
    /// (ignored while not segmenting: a start takes it from the hub).
    pub fn set_derived_track(&self, track: &Arc<Track>) {
        self.with(|s| s.set_derived_track(track));
    }

    /// One frame of the AAC made from the stream's Opus, while segmenting: TS only.
    pub fn push_derived(&self, key: &str, frame: &Frame) {
        if !self.segmenting() {
            return;
        }
        let now = wall_clock_ms();
        self.segment_with(key, |s| s.push_derived(key, frame, now));
    }

    /// Runs `push` (a frame into the segmenters: `true` when a part or segment was
    /// completed) and publishes the new snapshot if it says so.
    fn segment_with(&self, key: &str, push: impl FnOnce(&mut Segmenters) -> bool) {
        let changed = self.with(|s| {
            if push(s) {
                s.sync_files(key, self.files_wanted());
                Some(self.snapshot(key, s))
            } else {
                None
            }
        });
        if let Some(Some(view)) = changed {
            self.publish(view);
        }
    }

    /// An SCTE-35 cue, while segmenting (a start takes the stream's newest from the
    /// hub).
    pub fn cue(&self, cue: &StreamCue) {
        self.with(|s| s.cue(cue));
    }

    /// A publisher came back: the next segment is marked as a discontinuity.
    pub fn discontinuity(&self) {
        self.with(Segmenters::discontinuity);
    }

    /// One frame from the publisher, while segmenting; segmenting stops here once
    /// nobody asked for `idle`.
    pub fn push(&self, key: &str, frame: &Frame) {
        let now = wall_clock_ms();
        let first = match self.first_frame_ms.load(Ordering::Relaxed) {
            i64::MIN => {
                self.first_frame_ms.store(now, Ordering::Relaxed);
                now
            }
            at => at,
        };
        let epoch = self.epoch_ms.load(Ordering::Relaxed);
        let said = now.saturating_sub(Frame::ms_from_ticks(frame.dts));
        if said < epoch && now.saturating_sub(first) <= EPOCH_WINDOW_MS {
            self.epoch_ms.store(said, Ordering::Relaxed);
            if epoch == i64::MAX {
                // Segmenters started before the first frame (`always`) take its
                // measure: they have no segment yet.
                let epoch_s = self.epoch_s();
                self.with(|s| {
                    s.epoch_s = epoch_s;
                    s.tag = tag_of(epoch_s);
                });
            }
        }
        if !self.segmenting() {
            return;
        }
        let idle = !self.always
            && self
                .since_requested()
                .is_none_or(|s| s >= self.idle.as_secs());
        if idle {
            return self.stop(key);
        }
        self.segment_with(key, |s| s.push(key, frame, now));
    }

    /// The stream ended: playlists get `EXT-X-ENDLIST`.
    pub fn end(&self, key: &str) {
        let view = self.with(|s| {
            if let Err(e) = s.ts.end() {
                tracing::debug!(stream = %key, "TS segmenter: {e}");
            }
            s.fmp4.end();
            s.sync_files(key, self.files_wanted());
            self.snapshot(key, s)
        });
        if let Some(view) = view {
            self.publish(view);
        }
    }

    fn snapshot(&self, key: &str, s: &Segmenters) -> HlsView {
        let name = key.rsplit('/').next().unwrap_or(key);
        let listed = |t: &Timeline| t.kept().end > 0;
        let ts = listed(s.ts.timeline()).then(|| {
            let mut text = String::new();
            s.ts.timeline().render(
                &TsNames {
                    dir: name,
                    tag: &s.tag,
                },
                &mut text,
            );
            VariantView {
                timeline: s.ts.timeline().clone(),
                playlist: Bytes::from(text),
                init_id: 0,
                segments: s
                    .ts
                    .segments()
                    .iter()
                    .map(|(k, v)| (*k, vec![v.clone()]))
                    .collect(),
                parts: BTreeMap::new(),
                init: None,
                files: s.ts_files.clone(),
            }
        });
        let fmp4 =
            (s.fmp4.timeline().in_progress().is_some() || listed(s.fmp4.timeline())).then(|| {
                // The init segment is a few hundred bytes: hashed at each snapshot.
                let init_id = s.fmp4.init().map_or(0, |b| fnv1a(b));
                let mut text = String::new();
                s.fmp4.timeline().render(
                    &Fmp4Names {
                        tag: &s.tag,
                        init_id,
                    },
                    &mut text,
                );
                VariantView {
                    timeline: s.fmp4.timeline().clone(),
                    playlist: Bytes::from(text),
                    init_id,
                    segments: s.fmp4.segments().clone(),
                    parts: s.fmp4.parts().clone(),
                    init: s.fmp4.init().cloned(),
                    files: s.fmp4_files.clone(),
                }
            });
        HlsView {
            tag: s.tag.clone(),
            epoch_s: Some(s.epoch_s),
            ts,
            fmp4,
        }
    }

    fn publish(&self, view: HlsView) {
        self.view.store(Arc::new(view));
        self.changed.send_modify(|r| *r += 1);
    }

    /// The current snapshot.
    pub fn view(&self) -> Arc<HlsView> {
        self.view.load_full()
    }

    /// Resolves when a new snapshot is published.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// A viewer fetched segment `msn` of the fMP4 variant (`fmp4`) or the TS one, or
    /// its first part (see `audience`).
    pub fn fetched(&self, fmp4: bool, msn: u64) {
        if fmp4 {
            self.fmp4_audience.fetched(msn);
        } else {
            self.ts_audience.fetched(msn);
        }
    }

    /// Viewers now, counted by the segments they fetch (see `audience`).
    pub fn viewers(&self) -> usize {
        let view = self.view.load();
        let kept = |v: &Option<VariantView>| {
            v.as_ref().map(|v| {
                let kept = v.timeline.kept();
                let end = v.timeline.in_progress().map_or(kept.end, |m| m + 1);
                kept.start..end
            })
        };
        let ts = kept(&view.ts).map_or(0, |r| self.ts_audience.viewers(r));
        let fmp4 = kept(&view.fmp4).map_or(0, |r| self.fmp4_audience.viewers(r));
        let asked = self
            .since_requested()
            .is_some_and(|s| s < ASKED_LATELY.as_secs());
        // A player that asked but fetched no segment yet (the first one is still being
        // made) is somebody watching: an edge's pull must not stop under it.
        (ts + fmp4).max(usize::from(asked))
    }

    /// Bytes held by the kept segments (for logs, later the API).
    pub fn memory(&self) -> usize {
        self.with(|s| s.memory()).unwrap_or(0)
    }
}

/// HLS as one stream gets it.
#[derive(Debug, Clone, Copy)]
pub struct StreamHls {
    pub config: HlsConfig,
    /// Segment from the first frame on, asked for or not.
    pub always: bool,
    /// Stop segmenting this long after the last request.
    pub idle: Duration,
}

/// Makes the HLS tap of each new stream for which HLS is on.
#[derive(Debug)]
pub struct HlsTaps {
    /// By stream key; `None`: HLS is off for that stream.
    pub settings: PerStream<Option<StreamHls>>,
}

impl Attach for HlsTaps {
    fn attach(&self, key: &str, _id: u64) -> Option<Arc<dyn Tap>> {
        let s = self.settings.of(key)?;
        Some(Arc::new(HlsStream::new(
            key,
            Some(s.config),
            s.always,
            s.idle,
        )))
    }
}

impl Tap for HlsStream {
    fn track(&self, _: &str, track: &Arc<Track>, _: [Option<&Arc<Track>>; 2]) {
        self.set_track(track);
    }

    fn frame(&self, stream: &str, frame: &Frame, _: bool) {
        self.push(stream, frame);
    }

    /// The TS variant takes the AAC made from an Opus stream's audio while segmenting.
    fn wants_derived(&self) -> bool {
        self.segmenting()
    }

    fn derived_track(&self, track: &Arc<Track>) {
        self.set_derived_track(track);
    }

    fn derived_frame(&self, stream: &str, frame: &Frame) {
        self.push_derived(stream, frame);
    }

    fn cue(&self, _: &str, cue: &Arc<StreamCue>) {
        HlsStream::cue(self, cue);
    }

    fn discontinuity(&self) {
        HlsStream::discontinuity(self);
    }

    fn end(&self, stream: &str) {
        HlsStream::end(self, stream);
    }

    fn viewers(&self) -> usize {
        HlsStream::viewers(self)
    }

    fn memory(&self) -> usize {
        HlsStream::memory(self)
    }
}

/// Someone asked for `stream`'s HLS: its segmenters run (again) if they were idle,
/// starting from the oldest keyframe the ring keeps so that the first playlist
/// already lists what the ring holds. `None`: HLS is off for this stream.
pub fn want(stream: &Arc<Stream>) -> Option<&HlsStream> {
    let hls = stream.tap::<HlsStream>()?;
    hls.requested();
    if hls.segmenting() || !hls.enabled() {
        return Some(hls);
    }
    stream.catch_up(true, |backlog| {
        if hls.segmenting() {
            return;
        }
        let newest = backlog.packets.back().map_or(0, |p| p.ts_ms);
        let replay = (backlog.first..)
            .zip(&backlog.packets)
            .flat_map(|(pos, p)| {
                let restart = backlog
                    .restarts
                    .contains(&pos)
                    .then_some(Replay::Discontinuity);
                let item = match &p.payload {
                    _ if p.derived => None,
                    Payload::Config(track) => Some(Replay::Track(track)),
                    Payload::Media { frame, track } => {
                        Some(Replay::Frame(frame, track, newest - p.ts_ms))
                    }
                    Payload::Metadata(_) => None,
                };
                restart.into_iter().chain(item)
            });
        // The TS variant's audio is the AAC made from Opus, from its first segment.
        let derived = backlog.derived_track.as_ref().map(Replay::DerivedTrack);
        // Cues first, so the segmenters cut at their splice points as the frames come;
        // those before the replayed media mark segments that are gone.
        let from = backlog.packets.iter().find_map(|p| match &p.payload {
            Payload::Media { frame, .. } if !p.derived => Some(frame.dts),
            _ => None,
        });
        let cues = backlog
            .cues
            .iter()
            .filter(|c| from.is_some_and(|from| c.at >= from))
            .map(|c| Replay::Cue(c));
        hls.start(
            &stream.key,
            derived.into_iter().chain(cues).chain(replay),
            &backlog.tracks,
        );
    });
    Some(hls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_media::codec::AvcConfig;
    use sluice_media::{MediaKind, TrackConfig};

    /// A hub whose streams get an HLS tap with the default settings.
    fn hub() -> crate::core::hub::Hub {
        use crate::core::hub::{Hub, HubConfig, StreamPolicy};
        Hub::new(HubConfig {
            ring: crate::core::ring::RingLimits {
                max_ms: 10_000,
                max_bytes: 64 << 20,
            },
            publish_grace: Duration::from_secs(1),
            policy: PerStream::fixed(StreamPolicy::default()),
            rtp: false,
            shape: crate::core::packet::Shape {
                rtmp_chunk_size: 4096,
            },
            derive: None,
        })
        .with_taps(vec![Arc::new(HlsTaps {
            settings: PerStream::fixed(Some(StreamHls {
                config: HlsConfig::default(),
                always: false,
                idle: Duration::from_secs(30),
            })),
        })])
    }

    #[test]
    fn hls_starts_at_the_first_request_with_what_the_ring_kept() {
        let hub = hub();
        let stream = hub.publish("live/b", 1).unwrap();
        let mut ingest = crate::core::ingest::Ingest::new(stream.clone());
        ingest.set_track(0, Track::clone(&avc()));
        let push = |ingest: &mut crate::core::ingest::Ingest, from: i64, to: i64| {
            for n in from..to {
                ingest.frame(Frame {
                    kind: MediaKind::Video,
                    dts: n * 3600,
                    pts: n * 3600,
                    keyframe: n % 25 == 0,
                    payload: Bytes::from(vec![
                        0,
                        0,
                        0,
                        2,
                        if n % 25 == 0 { 0x65 } else { 0x41 },
                        n as u8,
                    ]),
                });
            }
        };
        push(&mut ingest, 0, 250);
        let hls = stream.tap::<HlsStream>().expect("an HLS tap");
        assert!(!hls.segmenting(), "nobody asked");
        assert!(hls.view().ts.is_none());

        want(&stream);
        assert!(hls.segmenting());
        let view = hls.view();
        let ts = view
            .ts
            .as_ref()
            .expect("a TS playlist at the first request");
        assert!(ts.segments.len() >= 3, "{:?}", ts.timeline);
        // And it goes on with the publisher's frames.
        let before = ts.timeline.revision();
        push(&mut ingest, 250, 300);
        let after = hls.view().ts.as_ref().unwrap().timeline.revision();
        assert_ne!(before, after);
    }

    fn avc() -> Arc<Track> {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        Arc::new(Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
        )))
    }

    /// Video frames `from..to` at 25 fps, a keyframe each second (one segment each).
    fn push(hls: &HlsStream, from: i64, to: i64) {
        for n in from..to {
            let t = n * 3600;
            hls.push(
                "live/x",
                &Frame {
                    kind: MediaKind::Video,
                    dts: t,
                    pts: t,
                    keyframe: n % 25 == 0,
                    payload: Bytes::from(vec![0, 0, 0, 2, 0x65, n as u8]),
                },
            );
        }
    }

    fn files(hls: &HlsStream) -> (usize, usize) {
        let v = hls.view();
        let n = |v: &Option<VariantView>| v.as_ref().map_or(0, |v| v.files.len());
        (n(&v.ts), n(&v.fmp4))
    }

    #[test]
    fn segments_move_to_memfds_only_while_hls_is_asked_for() {
        let config = HlsConfig {
            target_duration_ms: 1000,
            part_duration_ms: 200,
            low_latency: true,
            ..HlsConfig::default()
        };
        let hls = HlsStream::new("live/x", Some(config), true, Duration::from_secs(60));
        hls.set_track(&avc());
        // Nobody asked: complete segments stay on the heap.
        push(&hls, 0, 100);
        let view = hls.view();
        let ts = view.ts.as_ref().expect("a TS playlist");
        assert!(ts.segments.len() >= 3, "{:?}", ts.timeline);
        assert_eq!(files(&hls), (0, 0));
        // A request: the kept segments move at the next change, later ones as they end.
        hls.requested();
        push(&hls, 100, 151);
        let (ts_files, fmp4_files) = files(&hls);
        let view = hls.view();
        if MemFile::new(&[Bytes::from_static(b"probe")]).is_ok() {
            assert_eq!(ts_files, view.ts.as_ref().map_or(0, |v| v.segments.len()));
            assert_eq!(
                fmp4_files,
                view.fmp4.as_ref().map_or(0, |v| v.segments.len())
            );
            assert!(ts_files >= 4 && fmp4_files >= 4, "{ts_files} {fmp4_files}");
        }
    }

    fn frame(n: i64) -> Frame {
        let t = n * 3600;
        Frame {
            kind: MediaKind::Video,
            dts: t,
            pts: t,
            keyframe: n % 25 == 0,
            payload: Bytes::from(vec![0, 0, 0, 2, 0x65, n as u8]),
        }
    }

    #[test]
    fn on_demand_segmenting_starts_from_the_replay_and_stops_when_idle() {
        let config = HlsConfig {
            target_duration_ms: 1000,
            ..HlsConfig::default()
        };
        // Asked for long ago: an idle time of zero stops it at the next frame.
        let hls = HlsStream::new("live/x", Some(config), false, Duration::ZERO);
        assert!(!hls.segmenting());
        push(&hls, 0, 10);
        assert!(hls.view().ts.is_none(), "nobody asked: nothing segmented");

        // What a ring of five seconds would replay: the first playlist lists them all.
        let track = avc();
        let frames: Vec<Frame> = (0..125).map(frame).collect();
        let newest = frames.last().map_or(0, |f| f.dts) / 90;
        hls.requested();
        hls.start(
            "live/x",
            frames
                .iter()
                .map(|f| Replay::Frame(f, &track, newest - f.dts / 90)),
            &[Some(track.clone())],
        );
        assert!(hls.segmenting());
        let view = hls.view();
        let ts = view.ts.as_ref().expect("a TS playlist at once");
        assert!(ts.segments.len() >= 3, "{:?}", ts.timeline);
        let text = std::str::from_utf8(&ts.playlist).unwrap();
        assert!(text.contains(&view.tag), "{text}");

        // A second start while running changes nothing.
        hls.start("live/x", std::iter::empty(), &[]);
        assert!(Arc::ptr_eq(&view, &hls.view()));

        // Idle: the next frame stops it and the segments go.
        push(&hls, 125, 126);
        assert!(!hls.segmenting());
        assert!(hls.view().ts.is_none());
    }

    #[test]
    fn encrypted_segments_and_their_keys_while_kept() {
        let config = HlsConfig {
            target_duration_ms: 1000,
            low_latency: false,
            encryption: Encryption::Aes128 { rotation: 2 },
            ..HlsConfig::default()
        };
        let hls = HlsStream::new("live/x", Some(config), true, Duration::from_secs(60));
        hls.set_track(&avc());
        push(&hls, 0, 500);
        let view = hls.view();
        let ts = view.ts.as_ref().expect("a TS playlist");
        let text = std::str::from_utf8(&ts.playlist).unwrap();
        let tag = &view.tag;
        let kept = ts.timeline.kept();
        let period = |msn: u64| msn / 2;
        // The TS playlist names keys below the stream's directory, fMP4's beside it.
        let newest = kept.end - 1;
        assert!(
            text.contains(&format!(
                "URI=\"x/key/{tag}-{}\",IV=0x{newest:032x}",
                period(newest)
            )),
            "{text}"
        );
        let fmp4 = view.fmp4.as_ref().expect("an fMP4 playlist");
        let fmp4_text = std::str::from_utf8(&fmp4.playlist).unwrap();
        assert!(
            fmp4_text.contains(&format!("URI=\"key/{tag}-")),
            "{fmp4_text}"
        );
        assert!(!fmp4_text.contains("EXT-X-PART"), "no parts when encrypted");
        for (msn, pieces) in &ts.segments {
            assert_ne!(pieces[0][0], 0x47, "segment {msn} is encrypted");
        }
        // Keys: of kept segments only, by this instance's tag only.
        let key = hls
            .key(tag, period(newest))
            .expect("the newest segment's key");
        assert_eq!(hls.key(tag, period(newest)), Some(key));
        assert!(hls.key(tag, period(kept.start)).is_some());
        assert_eq!(
            hls.key(tag, period(newest) + 5),
            None,
            "a key of the future"
        );
        assert_eq!(hls.key(tag, 0), None, "a key no kept segment uses");
        assert_eq!(hls.key("ffff", period(newest)), None, "another instance's");
        assert_ne!(hls.key(tag, period(kept.start)), Some(key), "rotated");
        // Debug output (logs) shows no key material.
        let shown = format!("{hls:?}");
        assert!(shown.contains("KeySecret(..)"), "{shown}");
        // An unencrypted stream has no keys.
        let clear = HlsStream::new(
            "live/y",
            Some(HlsConfig::default()),
            true,
            Duration::from_secs(60),
        );
        clear.set_track(&avc());
        push(&clear, 0, 100);
        let clear_tag = clear.view().tag.clone();
        assert_eq!(clear.key(&clear_tag, 0), None);
    }

    #[test]
    fn the_tag_is_the_timelines_time_zero_and_neighbours_are_accepted() {
        let config = HlsConfig {
            target_duration_ms: 1000,
            ..HlsConfig::default()
        };
        let hls = HlsStream::new("live/x", Some(config), true, Duration::from_secs(60));
        hls.set_track(&avc());
        // The first frame is 100 s into the publisher's timeline: time 0 was 100 s ago.
        // (Segmenting from the first frame, the tag is that frame's measure: the
        // frames after it, pushed faster than real time, say earlier.)
        push(&hls, 2500, 2600);
        let view = hls.view();
        let epoch = view.epoch_s.expect("segmenting");
        let now = wall_clock_ms() / 1000;
        assert!((now - 100 - epoch).abs() <= 1, "{epoch} vs {now}");
        assert!(hls.epoch_s() <= epoch);
        assert_eq!(view.tag, format!("{epoch:x}"));
        let text = std::str::from_utf8(&view.ts.as_ref().expect("TS").playlist).unwrap();
        // Segments named by their start: the keyframe at frame 2525 (101 s).
        assert!(
            text.contains(&format!("x/{epoch:x}-{}.ts", 2525 * 3600)),
            "{text}"
        );
        assert!(view.accepts(&format!("{:x}", epoch + 1)));
        assert!(view.accepts(&format!("{:x}", epoch - 1)));
        assert!(!view.accepts(&format!("{:x}", epoch + 2)));
        assert!(!view.accepts("zz"));
        assert!(!HlsView::empty().accepts(&view.tag));
    }
}
