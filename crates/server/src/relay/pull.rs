//! One pull's life: origins in turn, backoff, failover, idle stop (see the module
//! above for the rules).

use super::client::{Media, Reader};
use super::error::RelayError;
use super::origin::Scheme;
use super::{Origin, PullInfo, Relays};
use crate::cluster::Located;
use crate::core::hub::{Hub, PublishError};
use crate::core::ingest::Publisher;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often a pull that receives nothing looks at its viewers.
pub const TICK: Duration = Duration::from_millis(500);
/// How long a connection must have lasted for its end to reset the backoff.
const GOOD_CONNECTION: Duration = Duration::from_secs(5);
/// The least time between two connections of one pull, whatever happened.
const MIN_GAP: Duration = Duration::from_millis(100);

/// How one connection to an origin ended.
enum Once {
    /// No viewers for `edge.idle_ms`.
    Idle,
    /// The stream got a publisher of its own here: the pull is not wanted.
    Superseded,
    /// The origin failed; `delivered` when it had sent media first.
    Failed { why: RelayError, delivered: bool },
}

/// Players and HLS viewers of `key` here.
fn viewers(hub: &Hub, key: &str) -> usize {
    hub.find(key).map_or(0, |s| s.viewers())
}

/// What the cluster's directory or the lookup URL says of stream `key`.
#[derive(PartialEq)]
enum Lookup {
    /// This origin has it.
    At(Origin),
    /// No origin has it.
    Nowhere,
    /// No lookup configured, or no usable answer: try the origins in turn.
    Unknown,
}

/// Asks the cluster's directory, then (when it cannot say) the lookup URL.
async fn lookup(relays: &Relays, key: &str) -> Lookup {
    if let Some(cluster) = relays.cluster() {
        match cluster.locate(key).await {
            Located::At(node) => {
                return match node.pull_url().map(Origin::parse) {
                    Some(Ok(o)) => Lookup::At(o),
                    _ => {
                        tracing::warn!(stream = %key, node = %node.id, "cluster: the stream's node has no usable rtmp URL");
                        Lookup::Nowhere
                    }
                };
            }
            Located::Nowhere => return Lookup::Nowhere,
            Located::Unknown => {}
        }
    }
    lookup_url(
        &relays.config.lookup_url,
        key,
        relays.config.connect_timeout,
    )
    .await
}

async fn lookup_url(url: &str, key: &str, timeout: Duration) -> Lookup {
    if url.is_empty() {
        return Lookup::Unknown;
    }
    let Ok(target) = crate::io::http_client::Target::parse(&url.replace("{key}", key)) else {
        return Lookup::Unknown;
    };
    match crate::io::http_client::get(&target, timeout).await {
        Ok(f) if f.status == 200 => {
            let text = String::from_utf8_lossy(&f.body);
            match Origin::parse(text.trim()) {
                Ok(o) => Lookup::At(o),
                Err(e) => {
                    tracing::warn!(stream = %key, "edge: lookup answered {e}");
                    Lookup::Unknown
                }
            }
        }
        Ok(f) if f.status == 404 => Lookup::Nowhere,
        Ok(f) => {
            tracing::warn!(stream = %key, status = f.status, "edge: lookup failed");
            Lookup::Unknown
        }
        Err(e) => {
            tracing::warn!(stream = %key, "edge: lookup failed: {e}");
            Lookup::Unknown
        }
    }
}

pub(super) async fn run(relays: Arc<Relays>, info: Arc<PullInfo>, mut origins: Vec<Origin>) {
    let key = info.key.clone();
    let config = relays.config.clone();
    let hub = relays.hub.clone();
    // Only servers are looked up: a source named per stream is the stream's URL.
    let looked_up = !origins.iter().any(|o| o.exact);
    if looked_up {
        match lookup(&relays, &key).await {
            Lookup::At(o) => {
                origins.retain(|x| *x != o);
                origins.insert(0, o);
            }
            Lookup::Nowhere => {
                tracing::info!(stream = %key, "edge: no origin has it (lookup)");
                relays.finished(&info);
                return;
            }
            Lookup::Unknown => {}
        }
    }
    if origins.is_empty() {
        relays.finished(&info);
        return;
    }
    let id = hub.next_id();
    let (mut at, mut failures, mut attempts) = (0usize, 0u32, 0u64);
    let mut wait = config.retry_min;
    // When viewers were last seen (the first is on its way when a pull starts).
    let mut watched = Instant::now();
    tracing::info!(stream = %key, origin = %origins[0].display_of(&key), "edge: pull");
    loop {
        let origin = origins[at].clone();
        info.set_origin(origin.display_of(&key));
        if attempts > 0 {
            info.reconnects.fetch_add(1, Ordering::Relaxed);
            relays.counters.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        attempts += 1;
        let started = Instant::now();
        match once(&relays, &info, &origin, id, &mut watched).await {
            Once::Idle => {
                tracing::info!(stream = %key, "edge: no viewers, pull stopped");
                break;
            }
            Once::Superseded if info.always && !info.stopped() => {
                // An always-on pull waits for the stream's own publisher to go.
                tokio::time::sleep(config.retry_max).await;
            }
            Once::Superseded => {
                tracing::info!(stream = %key, "edge: published here or removed, pull stopped");
                break;
            }
            // The API or the shutdown ended its connection: the pull ends with it.
            Once::Failed {
                why: RelayError::Kicked,
                ..
            } => {
                tracing::info!(stream = %key, "edge: pull ended by the server");
                break;
            }
            Once::Failed { why, delivered } => {
                tracing::warn!(stream = %key, origin = %origin.display_of(&key), "edge: {why}");
                // Only a connection that lasted counts as good: one that drops right
                // after its first media must not be redialled without backoff.
                if delivered && started.elapsed() >= GOOD_CONNECTION {
                    failures = 0;
                    wait = config.retry_min;
                } else {
                    failures += 1;
                }
                let now = Instant::now();
                if viewers(&hub, &key) > 0 {
                    watched = now;
                }
                let unwatched = now.duration_since(watched);
                let give_up = unwatched >= config.idle
                    || (failures >= config.max_failures && unwatched > Duration::ZERO);
                if (give_up && !info.always) || info.stopped() {
                    tracing::info!(stream = %key, failures, "edge: pull given up");
                    break;
                }
                // In a cluster the stream may have moved (its publisher went to another
                // node, or its node died): ask again before the next attempt.
                if looked_up && relays.cluster().is_some() {
                    if let Lookup::At(o) = lookup(&relays, &key).await {
                        if o != origin {
                            tracing::info!(stream = %key, origin = %o.display_of(&key), "cluster: the stream moved");
                            origins.retain(|x| *x != o);
                            origins.insert(0, o);
                            at = 0;
                            info.failovers.fetch_add(1, Ordering::Relaxed);
                            relays.counters.failovers.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(MIN_GAP.saturating_sub(started.elapsed())).await;
                            continue;
                        }
                    }
                    // Not moved (yet): its owner's entry lapses within the TTL, or its
                    // publisher comes back; a lookup is cheap, so no long backoff.
                    wait = config.retry_min;
                }
                let next = (at + 1) % origins.len();
                if next != at {
                    info.failovers.fetch_add(1, Ordering::Relaxed);
                    relays.counters.failovers.fetch_add(1, Ordering::Relaxed);
                }
                at = next;
                let mut pause = MIN_GAP.saturating_sub(started.elapsed());
                // Every origin failed in turn without media: back off.
                if at == 0 && failures > 0 {
                    pause = pause.max(wait);
                    wait = (wait * 2).min(config.retry_max);
                }
                tokio::time::sleep(pause).await;
            }
        }
    }
    relays.finished(&info);
    // Nobody waits for a stream without viewers: it ends now, not after the grace window.
    if let Some(stream) = hub.find(&key) {
        let orphan = stream.lock().publisher.is_none();
        if orphan && viewers(&hub, &key) == 0 && hub.end(&stream) {
            tracing::info!(stream = %key, "stream ended");
        }
    }
}

/// One connection to `origin`, publishing what it sends into the hub: in the
/// connection driver for the origins it runs clients of (RTMP, RTMPS, HTTP-FLV,
/// RTSP), through a [`Reader`] for the others (SRT, HLS).
async fn once(
    relays: &Arc<Relays>,
    info: &PullInfo,
    origin: &Origin,
    id: u64,
    watched: &mut Instant,
) -> Once {
    let mut sink = PullSink {
        relays,
        info,
        origin,
        id,
        watched,
        publisher: None,
        delivered: false,
    };
    let stop = match origin.scheme {
        Scheme::Rtmp | Scheme::Rtmps | Scheme::Flv { .. } | Scheme::Rtsp { .. } => {
            match super::link::current() {
                Ok(link) => link.pull(&mut sink).await,
                Err(why) => Stop::Failed(why),
            }
        }
        _ => read(&mut sink).await,
    };
    match stop {
        Stop::Idle => Once::Idle,
        Stop::Superseded => Once::Superseded,
        Stop::Failed(why) => Once::Failed {
            why,
            delivered: sink.delivered,
        },
    }
}

/// Reads the origin through a [`Reader`] until the pull stops.
async fn read(sink: &mut PullSink<'_>) -> Stop {
    let timeout = sink.connect_timeout();
    let opened = tokio::time::timeout(timeout, Reader::open(sink.origin, sink.key())).await;
    let mut reader = match opened {
        Ok(Ok(r)) => r,
        Ok(Err(why)) => return Stop::Failed(why),
        Err(_) => return Stop::Failed(RelayError::NoStream(timeout)),
    };
    loop {
        let next = reader.next(TICK).await;
        sink.count_bytes(reader.take_bytes());
        match next {
            Err(why) => return Stop::Failed(why),
            Ok(Some(media)) => {
                if let Err(stop) = sink.media(media) {
                    return stop;
                }
            }
            Ok(None) => {}
        }
        if let Err(stop) = sink.tick() {
            return stop;
        }
    }
}

/// Why a pull's connection ends.
pub enum Stop {
    /// No viewers for `edge.idle_ms`.
    Idle,
    /// The stream got a publisher of its own here, or the pull was removed.
    Superseded,
    /// The origin failed.
    Failed(RelayError),
}

impl From<RelayError> for Stop {
    fn from(why: RelayError) -> Stop {
        Stop::Failed(why)
    }
}

/// What one connection of a pull does with the origin's media (publish it into the
/// hub, admitted on its first piece), and when it stops: the same for every origin,
/// whether the driver or a [`Reader`] runs the connection.
pub struct PullSink<'a> {
    relays: &'a Arc<Relays>,
    info: &'a PullInfo,
    origin: &'a Origin,
    id: u64,
    /// When viewers were last seen.
    watched: &'a mut Instant,
    publisher: Option<Publisher>,
    /// Media went into the hub.
    delivered: bool,
}

impl PullSink<'_> {
    /// The stream pulled.
    pub fn key(&self) -> &str {
        &self.info.key
    }

    pub fn origin(&self) -> &Origin {
        self.origin
    }

    /// TLS towards origins (the web PKI's roots and `edge.tls_ca`'s).
    pub fn tls(&self) -> &Arc<rustls::ClientConfig> {
        &self.relays.tls
    }

    /// How long an origin has to start sending the stream.
    pub fn connect_timeout(&self) -> Duration {
        self.relays.config.connect_timeout
    }

    /// Counts `n` bytes read from the origin.
    pub fn count_bytes(&self, n: u64) {
        self.info.bytes.fetch_add(n, Ordering::Relaxed);
        self.relays.counters.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Publishes one piece of the stream (the first admits the pull's publisher).
    pub fn media(&mut self, media: Media) -> Result<(), Stop> {
        let (relays, key) = (self.relays, self.info.key.as_str());
        let p = match &mut self.publisher {
            Some(p) => p,
            None => match relays.admit(key, self.id) {
                Ok(p) => {
                    tracing::info!(stream = %key, origin = %self.origin.display_of(key), "edge: pulling");
                    self.publisher.insert(p)
                }
                Err(PublishError::InUse(_)) => return Err(Stop::Superseded),
                Err(e) => return Err(Stop::Failed(e.into())),
            },
        };
        self.delivered = true;
        match media {
            Media::Video(ts, body) => p.video(ts, &body).map_err(RelayError::BadMedia)?,
            Media::Audio(ts, body) => p.audio(ts, &body).map_err(RelayError::BadMedia)?,
            Media::Metadata(body) => p.metadata(body),
            Media::Track(at, track) => p.set_track(at, track),
            Media::Frame(frame) => p.frame(frame),
            Media::Cue(cue) => p.cue(&cue),
        }
        Ok(())
    }

    /// Whether the pull goes on: it stops when removed, or after `edge.idle_ms`
    /// without viewers. Called after each piece, and every [`TICK`] without one.
    pub fn tick(&mut self) -> Result<(), Stop> {
        if self.info.stopped() {
            return Err(Stop::Superseded);
        }
        let now = Instant::now();
        // The stream in hand, once publishing: no lookup per media message.
        let watching = match &self.publisher {
            Some(p) => p.stream.viewers(),
            None => viewers(&self.relays.hub, &self.info.key),
        };
        if watching > 0 || self.info.always {
            *self.watched = now;
        } else if now.duration_since(*self.watched) >= self.relays.config.idle {
            return Err(Stop::Idle);
        }
        Ok(())
    }
}
