//! The stream hub: one live stream per `app/name`, found by publishers and players.
//!
//! Why a snapshot map: every play and HLS request looks a stream up, so lookups read an
//! immutable map through `ArcSwap` without a lock shared by all workers (a shared
//! mutex there is what capped other servers' HLS viewers). Publishing and expiry, far
//! rarer, copy the map under a writers' mutex. Per-frame state lives in each
//! [`Stream`], whose lock is taken once per frame by the publisher and once per merge
//! window by each worker.
//!
//! What a stream makes for its consumers, it makes only while they are there: the RTP
//! and TS forms while players claim them ([`Stream::want_form`]), the FLV family's forms while
//! they have players, its audio in the other codec while consumers take that
//! ([`Stream::want_transcoded`]). A consumer that arrives starts its output from the
//! packets already in the ring. Features (HLS, recording) are taps (`core::tap`),
//! made for each new stream by what the hub was given ([`Hub::with_taps`]).

use super::derive::{Derive, DeriveRun, DerivedOut};
use crate::core::format::{self, Format, FormatId, OrderedForm};
use crate::core::packet::{Packet, Payload, Shape};
use crate::core::protocol::Protocol;
use crate::core::ring::{Ring, RingLimits};
use crate::core::tap::{Attach, Backlog, Tap};
use crate::keys::PerStream;
use arc_swap::ArcSwap;
use sluice_media::{MediaKind, Track, TrackConfig};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// Settings of the hub, from the configuration.
#[derive(Debug, Clone)]
pub struct HubConfig {
    pub ring: RingLimits,
    pub publish_grace: Duration,
    /// The policy of each new stream, by its key.
    pub policy: PerStream<StreamPolicy>,
    /// Whether streams can make the RTP form of their frames (an RTSP listener is on).
    pub rtp: bool,
    /// The shape of the shared bytes (the RTMP chunk size).
    pub shape: Shape,
    /// What makes a stream's audio in the other codec for the consumers that need it
    /// (the server's transcoding), or `None`: they get no audio.
    pub derive: Option<Arc<dyn Derive>>,
}

/// What the core does for one stream, as its app entry (or the defaults) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPolicy {
    /// The merge window of the stream's players.
    pub merge: Duration,
    /// A second publisher takes the stream over instead of being refused.
    pub takeover: bool,
    /// Disconnect the publisher after this long without viewers.
    pub no_viewers: Option<Duration>,
}

impl Default for StreamPolicy {
    fn default() -> Self {
        StreamPolicy {
            merge: Duration::from_millis(40),
            takeover: false,
            no_viewers: None,
        }
    }
}

/// Why a publisher was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PublishError {
    #[error("stream {0} is already being published")]
    InUse(String),
    #[error("limit reached: {0}")]
    Limit(super::limits::Limit),
}

type Directory = HashMap<Arc<str>, Arc<Stream>>;

/// All live streams.
#[derive(Debug)]
pub struct Hub {
    /// Read without a lock; replaced whole under `writers`.
    streams: ArcSwap<Directory>,
    writers: Mutex<()>,
    /// Woken whenever a stream gets a publisher, for players waiting for one.
    published: Notify,
    next_id: AtomicU64,
    pub config: HubConfig,
    /// What makes the taps of each new stream (HLS, recording).
    attach: Vec<Arc<dyn Attach>>,
    /// Admission limits (connections, publishers per address, streams).
    pub limits: Arc<super::limits::Limits>,
}

/// A live stream: its ring, its current decoder configuration, and who is listening.
#[derive(Debug)]
pub struct Stream {
    pub key: String,
    pub id: u64,
    state: Mutex<StreamState>,
    /// Players across all workers.
    pub players: AtomicUsize,
    /// Players moved to a newer keyframe because they fell behind.
    pub skips: AtomicU64,
    /// Media bytes and frames received from publishers (for the API and `/metrics`).
    pub bytes_in: AtomicU64,
    pub frames_in: AtomicU64,
    /// The video has frames out of presentation order (B-frames): players that do
    /// not reorder (WebRTC's) stall or stutter on it. Set at the first such frame.
    pub b_frames: std::sync::atomic::AtomicBool,
    /// Bytes written to players by the fan-out, across all workers.
    pub bytes_out: AtomicU64,
    /// What features attached to it (HLS, recording), fed in stream order.
    taps: Box<[Arc<dyn Tap>]>,
    /// What the publisher feeds in stream order for consumers that come and go (RTP,
    /// TS, the transcoder, late taps): taken by the publisher once per packet, and by a
    /// consumer that arrives, which starts its output from the ring. Taken before the
    /// state lock or a tap's own lock, never after.
    forms: Mutex<Forms>,
    /// Players per output format, across all workers: which forms the publisher
    /// builds in advance.
    consumers: [AtomicUsize; format::COUNT],
    /// Players per protocol, across all workers: who watches how (the API, `/metrics`).
    by_protocol: [AtomicUsize; Protocol::COUNT],
    shape: Shape,
    /// The merge window of its players (per app: [`StreamPolicy`]).
    pub merge: Duration,
    /// What makes its derived audio (see [`HubConfig::derive`]).
    derive: Option<Arc<dyn Derive>>,
    /// A player lost the picture and asks for a keyframe (a WebRTC viewer's PLI): a
    /// publisher that can make one on demand (WHIP) is asked, rate-limited.
    pub keyframe_wanted: Notify,
    /// Woken at each start point pushed: players waiting for the first one.
    started: Notify,
    /// Fed ahead of real time by a pacer ([`Stream::private`]): see
    /// `format::OrderedForm::media_clock`.
    paced: bool,
}

/// See [`Stream::forms`].
#[derive(Debug)]
pub struct Forms {
    /// The makers of the forms made in stream order (RTP, TS), by format: each made at
    /// its format's first claim and kept (see `format::OrderedForm`).
    ordered: [Option<Box<dyn OrderedForm>>; format::COUNT],
    /// Claims on each format's form now: it is made while there are any.
    claims: [usize; format::COUNT],
    /// Whether the RTP form may be made (an RTSP or WebRTC listener is on).
    rtp_on: bool,
    /// The run making the stream's audio in the other codec (`core::derive`), while
    /// consumers take what it makes: claims, and taps (HLS's TS variant takes AAC made
    /// from Opus).
    transcoder: Option<Box<dyn DeriveRun>>,
    transcoded_users: usize,
    taps_transcoded: bool,
    /// Counts transcoding threads started and stopped: a stopped one's late output
    /// is dropped, so that a new run's never follows it in the ring.
    transcoder_run: u64,
    /// The stream's own audio is Opus: RTMP, FLV and MPEG-TS take the AAC made from it.
    opus_audio: bool,
}

#[derive(Debug)]
pub struct StreamState {
    pub ring: Ring,
    pub metadata: Option<Arc<Packet>>,
    pub video_config: Option<Arc<Packet>>,
    pub audio_config: Option<Arc<Packet>>,
    /// The decoder configuration of the audio the server makes from the stream's own
    /// (AAC from Opus), while it does: what consumers of transcoded audio start with.
    pub derived_audio_config: Option<Arc<Packet>>,
    pub has_video: bool,
    /// The session publishing now, if any.
    pub publisher: Option<u64>,
    /// Counts publisher arrivals, so a grace timer knows whether its publisher came back.
    pub generation: u64,
    /// Decode time (ms) of the newest packet and the gap before it, to continue the
    /// timeline when a publisher comes back.
    pub last_ts_ms: Option<i64>,
    pub last_delta_ms: i64,
    /// Ring positions where a returning publisher's media begins (newest last), so
    /// that HLS started later still marks those discontinuities.
    pub restarts: VecDeque<u64>,
    /// Its newest SCTE-35 cues (see `core::cue`).
    pub cues: super::cue::Cues,
    pub closed: bool,
    /// One per worker that has players of this stream; notified once per packet.
    subscribers: Vec<Arc<Notify>>,
}

impl Hub {
    pub fn new(config: HubConfig) -> Self {
        Hub {
            streams: ArcSwap::from_pointee(HashMap::new()),
            writers: Mutex::new(()),
            published: Notify::new(),
            next_id: AtomicU64::new(1),
            config,
            attach: Vec::new(),
            limits: super::limits::Limits::new(Default::default()),
        }
    }

    /// Admits connections, publishers and streams within `limits`.
    pub fn with_limits(mut self, limits: std::sync::Arc<super::limits::Limits>) -> Self {
        self.limits = limits;
        self
    }

    /// Each new stream gets the taps `attach` makes for it (HLS, recording).
    pub fn with_taps(mut self, attach: Vec<Arc<dyn Attach>>) -> Self {
        self.attach = attach;
        self
    }

    /// What was handed to [`Hub::with_taps`] of type `T` (the recorder, for its
    /// figures).
    pub fn attached<T: Attach>(&self) -> Option<&T> {
        self.attach
            .iter()
            .find_map(|a| (&**a as &dyn std::any::Any).downcast_ref::<T>())
    }

    /// Changes the directory: `change` edits a copy, which then replaces it. Writers
    /// take turns; readers keep the map they loaded.
    fn change<R>(&self, change: impl FnOnce(&mut Directory) -> R) -> R {
        let _turn = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        let mut map = Directory::clone(&self.streams.load());
        let result = change(&mut map);
        self.streams.store(Arc::new(map));
        result
    }

    /// A fresh session id.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes `publisher` the publisher of `key`: a new stream, or one whose publisher
    /// dropped within the grace window (its players continue).
    pub fn publish(&self, key: &str, publisher: u64) -> Result<Arc<Stream>, PublishError> {
        let turn = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        let stream = if let Some(stream) = self.streams.load().get(key) {
            let mut state = stream.lock();
            if state.publisher.is_some() || state.closed {
                return Err(PublishError::InUse(key.to_string()));
            }
            state.publisher = Some(publisher);
            state.generation += 1;
            drop(state);
            stream.clone()
        } else {
            let max = self.limits.settings().streams;
            if max > 0 && self.streams.load().len() >= max {
                let limit = super::limits::Limit::Streams;
                return Err(PublishError::Limit(self.limits.hit(limit, None)));
            }
            let id = self.next_id();
            let policy = self.config.policy.of(key);
            let taps = self
                .attach
                .iter()
                .filter_map(|a| a.attach(key, id))
                .collect();
            let stream = Arc::new(Stream::new(key, id, &self.config, &policy, taps));
            stream.lock().publisher = Some(publisher);
            let mut map = Directory::clone(&self.streams.load());
            map.insert(Arc::from(key), stream.clone());
            self.streams.store(Arc::new(map));
            stream
        };
        drop(turn);
        self.published.notify_waiters();
        Ok(stream)
    }

    /// The publisher left. Returns the generation a grace timer should pass to
    /// [`Hub::expire`].
    pub fn unpublish(&self, stream: &Stream, publisher: u64) -> Option<u64> {
        let mut state = stream.lock();
        if state.publisher != Some(publisher) {
            return None;
        }
        state.publisher = None;
        Some(state.generation)
    }

    /// Ends the stream if no publisher came back since `generation`.
    pub fn expire(&self, stream: &Arc<Stream>, generation: u64) -> bool {
        let ended = self.change(|streams| {
            {
                let mut state = stream.lock();
                if state.publisher.is_some() || state.generation != generation || state.closed {
                    return false;
                }
                state.close();
            }
            if streams
                .get(stream.key.as_str())
                .is_some_and(|s| Arc::ptr_eq(s, stream))
            {
                streams.remove(stream.key.as_str());
            }
            true
        });
        if ended {
            for tap in &stream.taps {
                tap.end(&stream.key);
            }
        }
        ended
    }

    /// Every stream, live or in its grace window, by key.
    pub fn streams(&self) -> Vec<Arc<Stream>> {
        let mut all: Vec<_> = self.streams.load().values().cloned().collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }

    /// Ends `stream` now, publisher or not (the API closed it): its players get what
    /// is left and finish. `false` when it had ended already.
    pub fn end(&self, stream: &Arc<Stream>) -> bool {
        let generation = {
            let mut state = stream.lock();
            state.publisher = None;
            state.generation
        };
        self.expire(stream, generation)
    }

    /// The stream of `key` if it is live or waiting for its publisher to return.
    pub fn find(&self, key: &str) -> Option<Arc<Stream>> {
        self.streams.load().get(key).cloned()
    }

    /// Like [`Hub::find`], but waits up to `wait` for a publisher to appear.
    pub async fn find_or_wait(&self, key: &str, wait: Duration) -> Option<Arc<Stream>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.published.notified();
            if let Some(stream) = self.find(key) {
                return Some(stream);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}

/// A player's claim on a form the publisher makes in stream order (see
/// [`Stream::want_form`]).
#[derive(Debug)]
pub struct FormUse {
    stream: Arc<Stream>,
    id: FormatId,
}

impl Drop for FormUse {
    fn drop(&mut self) {
        let mut forms = self.stream.forms();
        let claims = &mut forms.claims[self.id.index()];
        *claims = claims.saturating_sub(1);
    }
}

/// A consumer's claim on its stream's audio in the other codec (see
/// [`Stream::want_transcoded`]).
#[derive(Debug)]
pub struct TranscodeUse(Arc<Stream>);

impl Drop for TranscodeUse {
    fn drop(&mut self) {
        let mut forms = self.0.forms();
        forms.transcoded_users = forms.transcoded_users.saturating_sub(1);
        if forms.transcoded_users == 0 && !forms.taps_transcoded {
            forms.stop_transcoder();
        }
    }
}

impl Forms {
    /// Makes the forms claimed now that take `packet` (in stream order).
    fn make_ordered(&mut self, packet: &Packet, frame: &sluice_media::Frame) {
        let Forms {
            ordered, claims, ..
        } = self;
        for (maker, claims) in ordered.iter_mut().zip(claims.iter()) {
            if let Some(maker) = maker.as_mut().filter(|_| *claims > 0) {
                if maker.takes(packet) {
                    maker.make(packet, frame);
                }
            }
        }
    }

    /// Stops the transcoding thread: what it still makes is dropped
    /// ([`Stream::push_derived`] takes only the current run's).
    fn stop_transcoder(&mut self) {
        if self.transcoder.take().is_some() {
            self.transcoder_run += 1;
        }
    }
}

/// The track a configuration packet carries.
fn track_of(config: &Option<Arc<Packet>>) -> Option<Arc<Track>> {
    match config.as_deref().map(|p| &p.payload) {
        Some(Payload::Config(track)) => Some(track.clone()),
        _ => None,
    }
}

impl StreamState {
    /// The metadata and decoder configurations now: what a reader placed at the ring's
    /// start gets first (see `cursor::Cursor::jump`).
    pub fn configs(&self) -> impl Iterator<Item = &Arc<Packet>> {
        [
            &self.metadata,
            &self.video_config,
            &self.audio_config,
            &self.derived_audio_config,
        ]
        .into_iter()
        .flatten()
    }

    /// The current decoder configurations, video then audio.
    pub fn tracks(&self) -> [Option<Arc<Track>>; 2] {
        [&self.video_config, &self.audio_config].map(track_of)
    }

    /// The track of the audio the server makes from the stream's own, while it does.
    fn derived_audio_track(&self) -> Option<Arc<Track>> {
        track_of(&self.derived_audio_config)
    }

    /// A returning publisher's media begins at the next position: HLS marks a
    /// discontinuity there, now or when it starts later from the ring. The last few
    /// such positions the ring still holds are kept.
    pub fn mark_restart(&mut self) {
        let (first, next) = (self.ring.first(), self.ring.next());
        self.restarts.retain(|&p| p >= first);
        if self.restarts.len() >= 8 {
            self.restarts.pop_front();
        }
        self.restarts.push_back(next);
    }

    /// Marks the stream ended and wakes its workers, whose players then finish.
    fn close(&mut self) {
        self.closed = true;
        for s in &self.subscribers {
            s.notify_one();
        }
    }
}

impl Stream {
    /// A stream outside the registry, with one session's media (a file played on
    /// demand): no publisher to wait for, no taps; the merge window its key's policy
    /// gives.
    /// Its ring keeps at most `keep_ms` of media (and `limits.ring_ms`): a pacer pushes
    /// only a little ahead of its one player, so the live streams' ring, which holds
    /// many players' spread, would hold a copy of seconds of media per player.
    pub fn private(key: &str, id: u64, config: &HubConfig, keep_ms: i64) -> Arc<Stream> {
        let policy = config.policy.of(key);
        let mut stream = Stream::new(key, id, config, &policy, Box::new([]));
        stream.paced = true;
        let limits = RingLimits {
            max_ms: keep_ms.min(config.ring.max_ms),
            ..config.ring
        };
        stream
            .state
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .ring = Ring::new(limits);
        Arc::new(stream)
    }

    /// Ends a private stream: its players get what is left and finish.
    pub fn close(&self) {
        self.lock().close();
    }

    fn new(
        key: &str,
        id: u64,
        config: &HubConfig,
        policy: &StreamPolicy,
        taps: Box<[Arc<dyn Tap>]>,
    ) -> Self {
        let limits = config.ring;
        Stream {
            taps,
            key: key.to_string(),
            id,
            state: Mutex::new(StreamState {
                ring: Ring::new(limits),
                metadata: None,
                video_config: None,
                audio_config: None,
                derived_audio_config: None,
                has_video: false,
                publisher: None,
                generation: 0,
                last_ts_ms: None,
                last_delta_ms: 0,
                restarts: VecDeque::new(),
                cues: Default::default(),
                closed: false,
                subscribers: Vec::new(),
            }),
            players: AtomicUsize::new(0),
            skips: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            frames_in: AtomicU64::new(0),
            b_frames: std::sync::atomic::AtomicBool::new(false),
            bytes_out: AtomicU64::new(0),
            forms: Mutex::new(Forms {
                ordered: std::array::from_fn(|_| None),
                claims: [0; format::COUNT],
                rtp_on: config.rtp,
                transcoder: None,
                transcoded_users: 0,
                taps_transcoded: false,
                transcoder_run: 0,
                opus_audio: false,
            }),
            consumers: std::array::from_fn(|_| AtomicUsize::new(0)),
            by_protocol: std::array::from_fn(|_| AtomicUsize::new(0)),
            shape: config.shape,
            derive: config.derive.clone(),
            merge: policy.merge,
            keyframe_wanted: Notify::new(),
            started: Notify::new(),
            paced: false,
        }
    }

    /// See [`Stream::forms`]: the publisher holds it from a packet's taps to its push.
    pub fn forms(&self) -> MutexGuard<'_, Forms> {
        self.forms.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its tap of type `T`, if a feature attached one (HLS's segmenters, say).
    pub fn tap<T: Tap>(&self) -> Option<&T> {
        self.taps
            .iter()
            .find_map(|t| (&**t as &dyn std::any::Any).downcast_ref::<T>())
    }

    /// Bytes of media its taps hold, for the logs.
    pub fn taps_memory(&self) -> usize {
        self.taps.iter().map(|t| t.memory()).sum()
    }

    /// An SCTE-35 cue of the publisher's: the taps and the forms made in stream order
    /// (TS) get it in stream order (under the forms lock, between the frames around
    /// it), and the stream keeps it for late taps and the API.
    pub fn publish_cue(&self, cue: super::cue::StreamCue) {
        let cue = Arc::new(cue);
        let mut forms = self.forms();
        for tap in &self.taps {
            tap.cue(&self.key, &cue);
        }
        for maker in forms.ordered.iter_mut().flatten() {
            maker.cue(&cue);
        }
        self.lock().cues.push(cue);
        drop(forms);
    }

    /// A returning publisher's media follows: the taps mark it.
    pub fn discontinuity(&self) {
        for tap in &self.taps {
            tap.discontinuity();
        }
    }

    /// The publisher left (it may come back within the grace window).
    pub fn publisher_left(&self) {
        for tap in &self.taps {
            tap.publisher_left();
        }
    }

    /// Players of `format` now, across all workers.
    pub fn consumers(&self, format: FormatId) -> usize {
        self.consumers[format.index()].load(Ordering::Relaxed)
    }

    /// Its players (every protocol, every worker) and the viewers its taps count (HLS's)
    /// now: whether anyone watches (a publisher without viewers may be let go, a pull
    /// stopped).
    pub fn viewers(&self) -> usize {
        self.players.load(Ordering::Relaxed) + self.tap_viewers()
    }

    /// Viewers its taps count, not players of the hub: HLS's, by the segments they
    /// fetch (see `crate::hls`).
    pub fn tap_viewers(&self) -> usize {
        self.taps.iter().map(|t| t.viewers()).sum()
    }

    /// Viewers watching over `protocol` now, across all workers (HLS: as its tap
    /// counts them).
    pub fn viewers_of(&self, protocol: Protocol) -> usize {
        match protocol {
            Protocol::Hls => self.tap_viewers(),
            _ => self.by_protocol[protocol.index()].load(Ordering::Relaxed),
        }
    }

    /// A player of `format` over `protocol` came (`true`) or went.
    pub fn count_player(&self, format: FormatId, protocol: Protocol, came: bool) {
        for n in [
            &self.consumers[format.index()],
            &self.by_protocol[protocol.index()],
        ] {
            if came {
                n.fetch_add(1, Ordering::Relaxed);
            } else {
                n.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Builds the forms of `packet` that players wait for, before it is pushed: the
    /// publisher's thread does it once, workers only read. A form derived from another
    /// (RTMP and WebSocket-FLV from FLV) builds that one on the way.
    pub fn prepare(&self, packet: &Packet) {
        packet.prepare(
            FormatId::all().filter(|f| self.consumers[f.index()].load(Ordering::Relaxed) > 0),
            &self.shape,
        );
    }

    /// A player of format `id` needs its form until the returned guard is dropped: the
    /// forms made in stream order (RTP, TS: `format::OrderedForm`) are made while
    /// claimed; the others are built on demand and need no claim (`None`, as for RTP
    /// when no RTSP or WebRTC listener is on). `Playing::start` takes it, so no player
    /// can forget it; a protocol that reads the form before it plays (RTSP's RTP-Info)
    /// takes its own first. The first claim makes the form from the start keyframe on:
    /// packets from there that lack it get it now, in stream order, and the publisher
    /// makes it for every packet after them.
    pub fn want_form(self: &Arc<Self>, id: FormatId) -> Option<FormUse> {
        let mut forms = self.forms();
        if id == FormatId::RTP && !forms.rtp_on {
            return None;
        }
        let i = id.index();
        if forms.ordered[i].is_none() {
            let mut maker = id.format().ordered()?;
            if self.paced {
                maker.media_clock();
            }
            let state = self.lock();
            let [video, audio] = state.tracks();
            for track in [video, audio].iter().flatten() {
                maker.track(track, false);
            }
            if let Some(track) = state.derived_audio_track() {
                maker.track(&track, true);
            }
            forms.ordered[i] = Some(maker);
        }
        forms.claims[i] += 1;
        if forms.claims[i] == 1 {
            let mut packets = VecDeque::new();
            {
                let state = self.lock();
                let ring = &state.ring;
                ring.copy_since(ring.start().unwrap_or(ring.next()), &mut packets);
            }
            if let Some(maker) = forms.ordered[i].as_mut() {
                for packet in &packets {
                    if let Payload::Media { frame, .. } = &packet.payload {
                        if maker.takes(packet) && !maker.made(packet) {
                            maker.make(packet, frame);
                        }
                    }
                }
            }
        }
        Some(FormUse {
            stream: self.clone(),
            id,
        })
    }

    /// An RTSP or WebRTC player needs the RTP form: [`Stream::want_form`].
    pub fn want_rtp(self: &Arc<Self>) -> Option<FormUse> {
        self.want_form(FormatId::RTP)
    }

    /// A consumer takes the stream's audio in the other codec (Opus made from AAC for a
    /// WebRTC player, AAC made from Opus for RTMP, FLV and MPEG-TS) until the returned
    /// guard is dropped (`None`: this build does not transcode). The first one starts
    /// the stream's transcoding run; see `core::derive`.
    pub fn want_transcoded(self: &Arc<Self>) -> Option<TranscodeUse> {
        let mut forms = self.forms();
        self.start_transcoder(&mut forms)?;
        forms.transcoded_users += 1;
        Some(TranscodeUse(self.clone()))
    }

    /// Starts the transcoding thread unless it runs; `None` when it cannot. A new one
    /// gets the ring's audio from the start keyframe on (at most
    /// [`Derive::backfill`] frames), so that what a new player gets of the GOP
    /// cache has audio too; the AAC made from Opus has its configuration at once.
    fn start_transcoder(self: &Arc<Self>, forms: &mut Forms) -> Option<()> {
        if forms.transcoder.is_some() {
            return Some(());
        }
        let derive = self.derive.clone()?;
        let mut packets = VecDeque::new();
        let audio = {
            let state = self.lock();
            let ring = &state.ring;
            ring.copy_since(ring.start().unwrap_or(ring.next()), &mut packets);
            let [_, audio] = state.tracks();
            audio
        };
        let derived = audio.as_deref().and_then(|a| derive.derived_track(a));
        forms.transcoder_run += 1;
        let out = DerivedOut::new(self, forms.transcoder_run);
        let mut transcoder = derive.start(out, audio, derived.clone())?;
        let own_audio = packets.iter().filter(|p| {
            !p.derived && matches!(&p.payload, Payload::Media { frame, .. } if frame.kind == MediaKind::Audio)
        });
        let count = own_audio.clone().count();
        let backfill = own_audio.skip(count.saturating_sub(derive.backfill()));
        if let Some(track) = &derived {
            // Timed as the first frame made: players take its time as the track's.
            let first = backfill.clone().next().map(|p| p.ts_ms);
            self.set_derived_track(forms, track, first);
        }
        for packet in backfill {
            if let Payload::Media { frame, .. } = &packet.payload {
                transcoder.frame(frame);
            }
        }
        forms.transcoder = Some(transcoder);
        Some(())
    }

    /// Whether the stream's audio can be made in the other codec (this server
    /// transcodes).
    pub fn derives(&self) -> bool {
        self.derive.is_some()
    }

    /// Whether the stream's audio is being transcoded now.
    pub fn transcoding(&self) -> bool {
        self.forms().transcoder.is_some()
    }

    /// What a player of format `id` takes: every track, except that formats which
    /// carry no Opus (all but RTP and fMP4) take the AAC made from an Opus stream's
    /// audio instead of it, when this build transcodes. See [`Stream::want_transcoded`].
    pub fn format_for(&self, id: FormatId) -> Format {
        let opus = self.forms().opus_audio;
        let carries_opus = [FormatId::RTP, FormatId::FMP4, FormatId::WS_FMP4].contains(&id);
        if opus && !carries_opus && self.derive.is_some() {
            Format {
                audio: false,
                transcoded: true,
                ..Format::all(id)
            }
        } else {
            Format::all(id)
        }
    }

    /// Starts a tap late (HLS at its first request): `start` gets what the ring kept
    /// from its oldest keyframe on, under the forms lock, so that the publisher feeds
    /// the tap only what follows. With `derived`, an Opus stream's transcoding starts
    /// first (the tap takes the AAC made from it, from its first frame on) and runs
    /// while a tap [wants it](Tap::wants_derived).
    pub fn catch_up<R>(self: &Arc<Self>, derived: bool, start: impl FnOnce(&Backlog) -> R) -> R {
        let mut forms = self.forms();
        if derived && forms.opus_audio && self.start_transcoder(&mut forms).is_some() {
            forms.taps_transcoded = true;
        }
        let backlog = {
            let state = self.lock();
            let ring = &state.ring;
            let mut packets = VecDeque::new();
            let first = ring.copy_since(ring.oldest_key().unwrap_or(ring.next()), &mut packets);
            Backlog {
                first,
                packets,
                tracks: state.tracks(),
                restarts: state.restarts.clone(),
                derived_track: state.derived_audio_track(),
                cues: state.cues.iter().cloned().collect(),
            }
        };
        let result = start(&backlog);
        drop(forms);
        result
    }

    /// Waits until the stream has a keyframe to start players at (its tracks are known
    /// by then), up to `deadline`; whether it has one.
    pub async fn wait_start(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            // Made before the look, so a start pushed in between still wakes it.
            let started = self.started.notified();
            if self.lock().ring.start().is_some() {
                return true;
            }
            if tokio::time::timeout_at(deadline, started).await.is_err() {
                return false;
            }
        }
    }

    /// Never held across I/O or an await.
    pub fn lock(&self) -> MutexGuard<'_, StreamState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a packet and wakes every subscribed worker once.
    pub fn push(&self, packet: Arc<Packet>) {
        let mut state = self.lock();
        if let Some(last) = state.last_ts_ms {
            let delta = packet.ts_ms - last;
            if delta > 0 {
                state.last_delta_ms = delta;
            }
        }
        state.last_ts_ms = Some(
            state
                .last_ts_ms
                .map_or(packet.ts_ms, |l| l.max(packet.ts_ms)),
        );
        let start = packet.key;
        state.ring.push(packet);
        for s in &state.subscribers {
            s.notify_one();
        }
        drop(state);
        if start {
            self.started.notify_waiters();
        }
    }

    /// Appends a packet the server made from the stream's own ([`Packet::derived`]):
    /// the stream's timeline is the publisher's, so it is not moved. AAC made from
    /// Opus also goes to the consumers fed in stream order that take it: HLS's TS
    /// variant, and SRT's TS form.
    /// `run` is the transcoding thread's (see `Forms::transcoder_run`): a stopped
    /// one's packets are dropped.
    pub fn push_derived(&self, run: u64, packet: Arc<Packet>) {
        let mut forms = self.forms();
        if run != forms.transcoder_run {
            return;
        }
        if let Payload::Media { frame, .. } = &packet.payload {
            if format::aac_from_opus(&packet, forms.opus_audio) {
                for tap in &self.taps {
                    tap.derived_frame(&self.key, frame);
                }
            }
            forms.make_ordered(&packet, frame);
        }
        let mut state = self.lock();
        state.ring.push(packet);
        for s in &state.subscribers {
            s.notify_one();
        }
        drop(state);
        drop(forms);
    }

    /// The decoder configuration of the AAC the server makes from the stream's Opus:
    /// consumers of transcoded audio get it first (a new player, HLS's TS variant,
    /// SRT's TS muxer), and it goes in the ring as a derived packet.
    /// Its time is `ts_ms`, else the newest packet's.
    fn set_derived_track(&self, forms: &mut Forms, track: &Arc<Track>, ts_ms: Option<i64>) {
        for tap in &self.taps {
            tap.derived_track(track);
        }
        for maker in forms.ordered.iter_mut().flatten() {
            maker.track(track, true);
        }
        let mut state = self.lock();
        let ts = ts_ms.or(state.last_ts_ms).unwrap_or(0);
        let packet = Packet::derived(Payload::Config(track.clone()), ts, None);
        state.derived_audio_config = Some(packet.clone());
        state.ring.push(packet);
        for s in &state.subscribers {
            s.notify_one();
        }
    }

    /// Feeds a new media packet to the taps and forms, builds the forms players wait
    /// for, and pushes it: the publisher's path for every frame. The taps get the frame
    /// (HLS, recording), RTP gets made (while RTSP players play).
    pub fn publish_media(self: &Arc<Self>, packet: Arc<Packet>) {
        let mut forms = self.forms();
        // A tap may take AAC made from Opus (HLS's TS variant, while it segments).
        let wanted = forms.opus_audio
            && self.derive.is_some()
            && self.taps.iter().any(|t| t.wants_derived());
        if wanted && !forms.taps_transcoded {
            forms.taps_transcoded = self.start_transcoder(&mut forms).is_some();
        } else if forms.taps_transcoded && !wanted {
            forms.taps_transcoded = false;
            if forms.transcoded_users == 0 {
                forms.stop_transcoder();
            }
        }
        if let Payload::Media { frame, .. } = &packet.payload {
            for tap in &self.taps {
                tap.frame(&self.key, frame, packet.key);
            }
            if let Some(t) = forms.transcoder.as_mut().filter(|_| !packet.is_video()) {
                t.frame(frame);
            }
            // An Opus stream's TS takes the AAC made from it instead (`push_derived`).
            forms.make_ordered(&packet, frame);
        }
        self.prepare(&packet);
        self.push(packet);
        drop(forms);
    }

    /// A new decoder configuration: the taps and forms get it, then the packet is
    /// pushed.
    pub fn publish_track(&self, track: &Arc<Track>, packet: Arc<Packet>) {
        let mut forms = self.forms();
        if !self.taps.is_empty() {
            let [video, audio] = self.lock().tracks();
            let tracks = match track.kind() {
                MediaKind::Video => [Some(track), audio.as_ref()],
                MediaKind::Audio => [video.as_ref(), Some(track)],
            };
            for tap in &self.taps {
                tap.track(&self.key, track, tracks);
            }
        }
        // Before the derived track: a maker learns here whether the audio is Opus.
        for maker in forms.ordered.iter_mut().flatten() {
            maker.track(track, false);
        }
        let mut derived = None;
        if track.kind() == MediaKind::Audio {
            forms.opus_audio = matches!(track.config, TrackConfig::Opus(_));
            derived = (self.derive.as_ref())
                .and_then(|d| d.derived_track(track))
                .filter(|_| forms.transcoder.is_some());
            if let Some(derived) = &derived {
                self.set_derived_track(&mut forms, derived, Some(packet.ts_ms));
            }
        }
        if let Some(t) = forms
            .transcoder
            .as_mut()
            .filter(|_| track.kind() == MediaKind::Audio)
        {
            t.track(track, derived);
        }
        {
            let mut state = self.lock();
            match track.kind() {
                sluice_media::MediaKind::Video => {
                    state.has_video = true;
                    state.video_config = Some(packet.clone());
                    state.ring.reset_start();
                }
                sluice_media::MediaKind::Audio => state.audio_config = Some(packet.clone()),
            }
        }
        self.prepare(&packet);
        self.push(packet);
        drop(forms);
    }

    /// Registers a worker's notifier.
    pub fn subscribe(&self, notify: Arc<Notify>) {
        self.lock().subscribers.push(notify);
    }

    pub fn unsubscribe(&self, notify: &Arc<Notify>) {
        self.lock().subscribers.retain(|n| !Arc::ptr_eq(n, notify));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ingest::Ingest;
    use bytes::Bytes;
    use sluice_media::codec::AvcConfig;
    use sluice_media::{Frame, MediaKind, TrackConfig};

    fn hub() -> Hub {
        Hub::new(HubConfig {
            ring: RingLimits {
                max_ms: 10_000,
                max_bytes: 64 << 20,
            },
            publish_grace: Duration::from_secs(1),
            policy: PerStream::fixed(StreamPolicy::default()),
            rtp: true,
            shape: Shape {
                rtmp_chunk_size: 4096,
            },
            derive: None,
        })
    }

    #[tokio::test]
    async fn streams_past_the_limit_are_refused() {
        let limits = crate::core::limits::Limits::new(crate::core::limits::LimitSettings {
            streams: 1,
            ..Default::default()
        });
        let hub = hub().with_limits(limits.clone());
        let a = hub.publish("live/a", 1).expect("the first stream");
        assert_eq!(
            hub.publish("live/b", 2).unwrap_err(),
            PublishError::Limit(crate::core::limits::Limit::Streams)
        );
        // A stream that exists takes its publisher back within the limit.
        hub.unpublish(&a, 1);
        assert!(hub.publish("live/a", 3).is_ok());
        assert_eq!(limits.hits()[2], ("streams", 1));
    }

    fn avc() -> Track {
        let sps = Bytes::from_static(&[0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47]);
        let pps = Bytes::from_static(&[0x68, 0xce, 0x3c, 0x80]);
        Track::new(TrackConfig::H264(
            AvcConfig::from_parameter_sets(&[sps], &[pps]).expect("avcC"),
        ))
    }

    /// Video frames `from..to` at 25 fps, a keyframe each second.
    fn push(ingest: &mut Ingest, from: i64, to: i64) {
        for n in from..to {
            let t = n * 3600;
            ingest.frame(Frame {
                kind: MediaKind::Video,
                dts: t,
                pts: t,
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
    }

    fn packets(stream: &Stream) -> Vec<Arc<Packet>> {
        let state = stream.lock();
        (state.ring.first()..state.ring.next())
            .filter_map(|p| state.ring.get(p).cloned())
            .collect()
    }

    #[test]
    fn a_returning_publisher_continues_the_timeline_from_its_first_frame() {
        let hub = hub();
        let stream = hub.publish("live/a", 1).unwrap();
        let mut first = Ingest::new(stream.clone());
        first.set_track(0, avc());
        push(&mut first, 0, 50);
        drop(first);
        hub.unpublish(&stream, 1);
        let stream = hub.publish("live/a", 2).unwrap();
        let mut second = Ingest::new(stream.clone());
        // An origin sends its configuration at time 0 and then frames on its own
        // clock, 100 s into its stream: they follow the last frame (1960 ms).
        second.set_track(0, avc());
        push(&mut second, 2500, 2510);
        let times: Vec<i64> = packets(&stream).iter().map(|p| p.ts_ms).collect();
        let mut want = vec![1960];
        want.extend((0..10).map(|n| 2000 + n * 40));
        assert_eq!(times[times.len().saturating_sub(11)..], want);
    }

    #[test]
    fn the_rtp_form_is_made_only_while_rtsp_players_play() {
        let hub = hub();
        let stream = hub.publish("live/a", 1).unwrap();
        let mut ingest = Ingest::new(stream.clone());
        ingest.set_track(0, avc());
        push(&mut ingest, 0, 60);
        assert!(packets(&stream).iter().all(|p| p.rtp().is_none()));

        // The first player: from the start keyframe on, every frame gets its form, in
        // order, with consecutive sequence numbers; older ones are left alone.
        let start = stream.lock().ring.start().unwrap();
        let first = stream.want_rtp().expect("RTSP is on");
        push(&mut ingest, 60, 70);
        let seqs: Vec<u16> = {
            let state = stream.lock();
            assert!(state.ring.get(start - 1).unwrap().rtp().is_none());
            (start..state.ring.next())
                .map(|p| {
                    state
                        .ring
                        .get(p)
                        .unwrap()
                        .rtp()
                        .expect("an RTP form")
                        .first_seq
                })
                .collect()
        };
        assert_eq!(seqs.len(), 20);
        // One packet per frame, a keyframe perhaps with its parameter sets before it.
        for w in seqs.windows(2) {
            assert!((1..=3).contains(&w[1].wrapping_sub(w[0])), "{seqs:?}");
        }

        // A second player changes nothing; when the last one goes, the forms stop.
        let second = stream.want_rtp().unwrap();
        drop(first);
        push(&mut ingest, 70, 71);
        assert!(packets(&stream).last().unwrap().rtp().is_some());
        drop(second);
        push(&mut ingest, 71, 72);
        assert!(packets(&stream).last().unwrap().rtp().is_none());
    }

    /// A tap that notes what it is fed.
    #[derive(Debug, Default)]
    struct Notes(Mutex<Vec<String>>);

    impl Tap for Notes {
        fn track(&self, _: &str, track: &Arc<Track>, tracks: [Option<&Arc<Track>>; 2]) {
            let both = tracks.iter().flatten().count();
            self.note(format!("track {:?} of {both}", track.kind()));
        }
        fn frame(&self, _: &str, frame: &Frame, start: bool) {
            self.note(format!("frame {} {start}", frame.dts / 3600));
        }
        fn discontinuity(&self) {
            self.note("discontinuity".into());
        }
        fn publisher_left(&self) {
            self.note("left".into());
        }
        fn end(&self, stream: &str) {
            self.note(format!("end {stream}"));
        }
    }

    impl Notes {
        fn note(&self, what: String) {
            self.0.lock().unwrap().push(what);
        }
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    #[derive(Debug)]
    struct AttachNotes;

    impl Attach for AttachNotes {
        fn attach(&self, key: &str, _: u64) -> Option<Arc<dyn Tap>> {
            (key != "live/untapped").then(|| Arc::new(Notes::default()) as Arc<dyn Tap>)
        }
    }

    #[tokio::test]
    async fn taps_are_fed_in_stream_order_and_told_of_restarts_and_the_end() {
        let hub = Arc::new(hub().with_taps(vec![Arc::new(AttachNotes)]));
        assert!(hub
            .publish("live/untapped", 9)
            .unwrap()
            .tap::<Notes>()
            .is_none());
        let stream = hub.publish("live/tapped", 1).unwrap();
        let notes = stream.tap::<Notes>().expect("attached");
        let mut ingest = Ingest::new(stream.clone());
        ingest.set_track(0, avc());
        push(&mut ingest, 0, 3);
        assert_eq!(
            notes.take(),
            [
                "track Video of 1",
                "frame 0 true",
                "frame 1 false",
                "frame 2 false"
            ]
        );
        drop(ingest);
        stream.publisher_left();
        hub.unpublish(&stream, 1);
        let stream = hub.publish("live/tapped", 2).unwrap();
        let mut ingest = Ingest::new(stream.clone());
        ingest.set_track(0, avc());
        push(&mut ingest, 25, 26);
        // The returning publisher's timeline follows the last frame.
        assert_eq!(
            notes.take(),
            ["left", "discontinuity", "track Video of 1", "frame 3 true"]
        );
        assert!(hub.end(&stream));
        assert_eq!(notes.take(), ["end live/tapped"]);
    }

    #[test]
    fn a_late_tap_catches_up_from_the_oldest_keyframe_the_ring_kept() {
        let hub = hub();
        let stream = hub.publish("live/b", 1).unwrap();
        let mut ingest = Ingest::new(stream.clone());
        ingest.set_track(0, avc());
        push(&mut ingest, 0, 60);
        let (first, frames, tracks) = stream.catch_up(false, |b| {
            let frames = b.packets.iter().filter(|p| p.is_video()).count();
            (b.first, frames, b.tracks.clone())
        });
        // The ring holds everything: the configuration at 0, the first keyframe at 1.
        assert_eq!((first, frames), (1, 60));
        assert!(tracks[0].is_some() && tracks[1].is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_player_waiting_for_a_start_point_wakes_at_the_keyframe() {
        let hub = hub();
        let stream = hub.publish("live/w", 1).unwrap();
        let t0 = tokio::time::Instant::now();
        let deadline = t0 + Duration::from_secs(5);
        let waiting = tokio::spawn({
            let stream = stream.clone();
            async move {
                (
                    stream.wait_start(deadline).await,
                    tokio::time::Instant::now(),
                )
            }
        });
        tokio::time::sleep(Duration::from_millis(7)).await;
        let mut ingest = Ingest::new(stream.clone());
        ingest.set_track(0, avc());
        push(&mut ingest, 0, 1);
        // Woken by the keyframe itself (the clock is paused: no polling step passes).
        let (started, at) = waiting.await.unwrap();
        assert!(started);
        assert_eq!(at - t0, Duration::from_millis(7));
        // Without one, it gives up at the deadline.
        let other = hub.publish("live/none", 2).unwrap();
        assert!(!other.wait_start(deadline).await);
        assert_eq!(tokio::time::Instant::now(), deadline);
    }

    #[test]
    fn the_ts_form_is_made_while_claimed_and_other_formats_need_no_claim() {
        let hub = hub();
        let stream = hub.publish("live/ts", 1).unwrap();
        let mut ingest = Ingest::new(stream.clone());
        ingest.set_track(0, avc());
        push(&mut ingest, 0, 30);
        assert!(stream.want_form(FormatId::FLV).is_none());
        let claim = stream
            .want_form(FormatId::TS)
            .expect("TS is made in stream order");
        // From the start keyframe (frame 25) on, the ring's packets have their TS form.
        let has_ts = |p: &Arc<Packet>| p.built(FormatId::TS);
        let kept = packets(&stream);
        assert!(kept.iter().rev().take(5).all(has_ts));
        assert!(
            !kept.iter().rev().nth(5).is_some_and(has_ts),
            "before the start"
        );
        push(&mut ingest, 30, 31);
        assert!(has_ts(packets(&stream).last().unwrap()));
        drop(claim);
        push(&mut ingest, 31, 32);
        assert!(!packets(&stream).last().unwrap().built(FormatId::TS));
    }

    #[test]
    fn forms_with_players_are_built_before_the_push() {
        let hub = hub();
        let stream = hub.publish("live/c", 1).unwrap();
        let mut ingest = Ingest::new(stream.clone());
        ingest.set_track(0, avc());
        push(&mut ingest, 0, 1);
        assert!(!packets(&stream)[1].built(FormatId::FLV));
        stream.count_player(FormatId::RTMP, Protocol::Rtmp, true);
        push(&mut ingest, 1, 2);
        let last = packets(&stream).pop().unwrap();
        assert!(last.built(FormatId::RTMP) && last.built(FormatId::FLV));
        assert!(!last.built(FormatId::WS_FLV));
        stream.count_player(FormatId::RTMP, Protocol::Rtmp, false);
        push(&mut ingest, 2, 3);
        assert!(!packets(&stream).pop().unwrap().built(FormatId::FLV));
    }

    #[test]
    fn players_are_counted_by_protocol_as_well_as_by_format() {
        let hub = hub();
        let stream = hub.publish("live/d", 1).unwrap();
        // A WHEP viewer takes the RTP form that RTSP players take too.
        stream.count_player(FormatId::RTP, Protocol::Webrtc, true);
        assert_eq!(stream.consumers(FormatId::RTP), 1);
        assert_eq!(stream.viewers_of(Protocol::Webrtc), 1);
        assert_eq!(stream.viewers_of(Protocol::Rtsp), 0);
        stream.count_player(FormatId::RTP, Protocol::Rtsp, true);
        stream.count_player(FormatId::RTP, Protocol::Webrtc, false);
        assert_eq!(stream.consumers(FormatId::RTP), 1);
        assert_eq!(stream.viewers_of(Protocol::Webrtc), 0);
        assert_eq!(stream.viewers_of(Protocol::Rtsp), 1);
        // HLS viewers are counted by its tap (`crate::hls`): none here.
        assert_eq!(stream.viewers_of(Protocol::Hls), 0);
    }
}
