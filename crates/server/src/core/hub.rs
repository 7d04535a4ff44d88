//! The stream hub: one live stream per `app/name`, found by publishers and players.
//!
//! Why a plain mutex: the registry is touched when a session publishes, plays or
//! leaves, never per frame. Per-frame state lives in each [`Stream`], whose lock is
//! taken once per frame by the publisher and once per merge window by each worker.

use crate::config::{Apps, StreamSettings};
use crate::core::packet::{Packet, RtpSource};
use crate::core::ring::{Ring, RingLimits};
use crate::hls::HlsStream;
use crate::record::{Recorder, Tap};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// Settings of the hub, from the configuration.
#[derive(Debug, Clone)]
pub struct HubConfig {
    pub ring: RingLimits,
    pub publish_grace: Duration,
    /// What each new stream gets (HLS, recording, merge window), by its key.
    pub apps: Arc<Apps>,
    /// Whether streams make the RTP form of their frames (an RTSP listener is on).
    pub rtp: bool,
}

/// Why a publisher was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PublishError {
    #[error("stream {0} is already being published")]
    InUse(String),
}

/// All live streams.
#[derive(Debug)]
pub struct Hub {
    streams: Mutex<HashMap<String, Arc<Stream>>>,
    /// Woken whenever a stream gets a publisher, for players waiting for one.
    published: Notify,
    next_id: AtomicU64,
    pub config: HubConfig,
    /// Makes the recording tap of each new stream that is to be recorded.
    recorder: Option<Recorder>,
}

/// A live stream: its ring, its current decoder configuration, and who is listening.
#[derive(Debug)]
pub struct Stream {
    pub key: String,
    pub id: u64,
    state: Mutex<StreamState>,
    /// Players across all workers.
    pub players: AtomicUsize,
    /// HLS viewers, as the workers last counted them (see `viewers`).
    pub hls_viewers: AtomicUsize,
    /// Players moved to a newer keyframe because they fell behind.
    pub skips: AtomicU64,
    /// The stream's HLS segments and playlists.
    pub hls: HlsStream,
    /// The stream's RTP packetizers, when RTSP is on. Only its publisher takes this
    /// lock (once per frame, before the state lock, never both at once).
    pub rtp: Option<Mutex<RtpSource>>,
    /// The stream's line to the recording thread, when it is recorded.
    pub record: Option<Tap>,
    /// The merge window of its players (per app, see `config::StreamSettings`).
    pub merge: Duration,
}

#[derive(Debug)]
pub struct StreamState {
    pub ring: Ring,
    pub metadata: Option<Arc<Packet>>,
    pub video_config: Option<Arc<Packet>>,
    pub audio_config: Option<Arc<Packet>>,
    pub has_video: bool,
    /// The session publishing now, if any.
    pub publisher: Option<u64>,
    /// Counts publisher arrivals, so a grace timer knows whether its publisher came back.
    pub generation: u64,
    /// Decode time (ms) of the newest packet and the gap before it, to continue the
    /// timeline when a publisher comes back.
    pub last_ts_ms: Option<i64>,
    pub last_delta_ms: i64,
    pub closed: bool,
    /// One per worker that has players of this stream; notified once per packet.
    subscribers: Vec<Arc<Notify>>,
}

impl Hub {
    pub fn new(config: HubConfig) -> Self {
        Hub {
            streams: Mutex::new(HashMap::new()),
            published: Notify::new(),
            next_id: AtomicU64::new(1),
            config,
            recorder: None,
        }
    }

    /// Records the streams that `recorder`'s patterns (or their app entries) say.
    pub fn with_recorder(mut self, recorder: Option<Recorder>) -> Self {
        self.recorder = recorder;
        self
    }

    fn streams(&self) -> MutexGuard<'_, HashMap<String, Arc<Stream>>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh session id.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes `publisher` the publisher of `key`: a new stream, or one whose publisher
    /// dropped within the grace window (its players continue).
    pub fn publish(&self, key: &str, publisher: u64) -> Result<Arc<Stream>, PublishError> {
        let stream = {
            let mut streams = self.streams();
            if let Some(stream) = streams.get(key) {
                let mut state = stream.lock();
                if state.publisher.is_some() || state.closed {
                    return Err(PublishError::InUse(key.to_string()));
                }
                state.publisher = Some(publisher);
                state.generation += 1;
                drop(state);
                stream.clone()
            } else {
                let id = self.next_id();
                let settings = self.config.apps.for_stream(key);
                let record = self
                    .recorder
                    .as_ref()
                    .and_then(|r| r.tap(key, id, settings.record));
                let stream = Arc::new(Stream::new(key, id, &self.config, &settings, record));
                stream.lock().publisher = Some(publisher);
                streams.insert(key.to_string(), stream.clone());
                stream
            }
        };
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
        let mut streams = self.streams();
        {
            let mut state = stream.lock();
            if state.publisher.is_some() || state.generation != generation || state.closed {
                return false;
            }
            state.close();
        }
        stream.hls.end(&stream.key);
        if let Some(tap) = &stream.record {
            tap.close();
        }
        if streams
            .get(&stream.key)
            .is_some_and(|s| Arc::ptr_eq(s, stream))
        {
            streams.remove(&stream.key);
        }
        true
    }

    /// The stream of `key` if it is live or waiting for its publisher to return.
    pub fn find(&self, key: &str) -> Option<Arc<Stream>> {
        self.streams().get(key).cloned()
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

impl StreamState {
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
    /// demand): no publisher to wait for, no HLS, no recording; the merge window its
    /// key's app entry gives.
    pub fn private(key: &str, id: u64, config: &HubConfig) -> Arc<Stream> {
        let settings = StreamSettings {
            hls: None,
            record: Some(false),
            ..config.apps.for_stream(key)
        };
        Arc::new(Stream::new(key, id, config, &settings, None))
    }

    /// Ends a private stream: its players get what is left and finish.
    pub fn close(&self) {
        self.lock().close();
    }

    fn new(
        key: &str,
        id: u64,
        config: &HubConfig,
        settings: &StreamSettings,
        record: Option<Tap>,
    ) -> Self {
        let limits = config.ring;
        Stream {
            hls: HlsStream::new(key, id, settings.hls),
            key: key.to_string(),
            id,
            state: Mutex::new(StreamState {
                ring: Ring::new(limits),
                metadata: None,
                video_config: None,
                audio_config: None,
                has_video: false,
                publisher: None,
                generation: 0,
                last_ts_ms: None,
                last_delta_ms: 0,
                closed: false,
                subscribers: Vec::new(),
            }),
            players: AtomicUsize::new(0),
            hls_viewers: AtomicUsize::new(0),
            skips: AtomicU64::new(0),
            rtp: config.rtp.then(|| Mutex::new(RtpSource::new())),
            record,
            merge: settings.merge,
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
        state.ring.push(packet);
        for s in &state.subscribers {
            s.notify_one();
        }
    }

    /// Registers a worker's notifier.
    pub fn subscribe(&self, notify: Arc<Notify>) {
        self.lock().subscribers.push(notify);
    }

    pub fn unsubscribe(&self, notify: &Arc<Notify>) {
        self.lock().subscribers.retain(|n| !Arc::ptr_eq(n, notify));
    }
}
