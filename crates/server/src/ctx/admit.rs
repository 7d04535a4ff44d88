//! One admission for every protocol: a client asks to publish or to play a stream
//! (an [`Ask`]: what every protocol knows of it) and gets a [`Publisher`] or a
//! [`Source`], or a [`Refusal`] that its protocol turns into its own answer (RTMP
//! status codes, RTSP 401/403/404/455, SRT rejection codes, HTTP 401/403/404).
//!
//! Why one: authorization, the limits, a takeover, an edge's pulls and the relay
//! pushes a new publisher starts were decided by each protocol in turn, so a fix in
//! one did not reach the others. An edge's pull publishes through [`pulled`], the same
//! door without what only a peer has (credentials, a per-address limit, a takeover).

use super::Ctx;
use crate::auth::{Action, Credentials, Denial, Request};
use crate::cluster::Decision;
use crate::core::hub::{PublishError, Stream};
use crate::core::ingest::Publisher;
use crate::core::limits::Limit;
use crate::record::Recorder;
use crate::relay::Relays;
use crate::vod::recorded::{Opener, RecordedError, Timeline};
use crate::vod::{Speed, VodFile, VodPlay};
use sluice_archive::range::{split_key, TimeRange};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long a publisher taking a stream over waits for the one it displaces to go.
const TAKEOVER_WAIT: Duration = Duration::from_secs(3);

/// What a client asks for, as every protocol has it.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    /// The protocol that carried it (`rtmp`, `rtsp`, `srt`, `http`, `hls`, `webrtc`...).
    pub protocol: &'static str,
    /// The stream key (`app/name`), or the file path, asked for.
    pub key: &'a str,
    /// The connection's id (0 for requests outside a connection's life, such as HLS).
    pub id: u64,
    pub peer: IpAddr,
    /// The query the request came with (for the auth hook), without the `?`.
    pub query: &'a str,
    pub proof: Proof,
    /// What the authorization judges when it is not the key (RTMP: a file's path).
    judged: Option<&'a str>,
}

/// What vouches for a client.
#[derive(Debug, Clone)]
pub enum Proof {
    /// The credentials it showed (possibly none).
    Shown(Credentials),
    /// Authorized already: by the protocol's own users (RTSP), by the request that
    /// started the session (WHIP's offer, HTTP's route check), or by the router.
    Checked,
}

impl<'a> Ask<'a> {
    /// An ask with no credentials and no query.
    pub fn new(protocol: &'static str, key: &'a str, id: u64, peer: IpAddr) -> Ask<'a> {
        Ask {
            protocol,
            key,
            id,
            peer,
            query: "",
            proof: Proof::Shown(Credentials::default()),
            judged: None,
        }
    }

    /// With the query it came with, and the credentials in it.
    pub fn query(self, query: &'a str) -> Ask<'a> {
        self.credentials(Credentials::from_query(query))
            .query_only(query)
    }

    /// With HTTP's credentials: an `Authorization` header, else the query.
    pub fn http(self, authorization: Option<&str>, query: &'a str) -> Ask<'a> {
        self.credentials(Credentials::from_http(authorization, query))
            .query_only(query)
    }

    /// With these credentials.
    pub fn credentials(mut self, credentials: Credentials) -> Ask<'a> {
        self.proof = Proof::Shown(credentials);
        self
    }

    /// Authorized already (see [`Proof::Checked`]).
    pub fn checked(mut self) -> Ask<'a> {
        self.proof = Proof::Checked;
        self
    }

    /// Authorized on `path` instead of the key.
    pub fn judged_on(mut self, path: &'a str) -> Ask<'a> {
        self.judged = Some(path);
        self
    }

    fn query_only(mut self, query: &'a str) -> Ask<'a> {
        self.query = query;
        self
    }

    /// The request the authorization judges, for `action`; `None` when the ask was
    /// authorized already.
    pub fn request(&self, action: Action) -> Option<Request<'_>> {
        let Proof::Shown(credentials) = &self.proof else {
            return None;
        };
        Some(Request {
            action,
            path: self.judged.unwrap_or(self.key),
            protocol: self.protocol,
            id: self.id,
            credentials,
            peer: self.peer,
            query: self.query,
        })
    }
}

/// Why an ask was refused; each protocol answers it its own way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No credentials, or wrong ones: a client may try (other) credentials.
    #[error("{}", .0.reason())]
    Unauthorized(Denial),
    /// Credentials that do not permit it, an address not allowed, the hook's no.
    #[error("{}", .0.reason())]
    Forbidden(Denial),
    /// Neither a live stream nor a file by that name.
    #[error("{0} is not live")]
    NotFound(String),
    /// The stream has a publisher.
    #[error("stream {0} is already being published")]
    InUse(String),
    #[error("limit reached: {0}")]
    Limit(Limit),
    /// A recorded range (`app/name@FROM..TO`) that is malformed (HTTP 400, RTSP 457)
    /// or holds nothing (404).
    #[error("{0}")]
    Range(#[from] RecordedError),
}

impl From<Denial> for Refusal {
    fn from(denial: Denial) -> Refusal {
        match denial {
            Denial::NoCredentials | Denial::BadCredentials => Refusal::Unauthorized(denial),
            _ => Refusal::Forbidden(denial),
        }
    }
}

impl From<PublishError> for Refusal {
    fn from(e: PublishError) -> Refusal {
        match e {
            PublishError::InUse(key) => Refusal::InUse(key),
            PublishError::Limit(limit) => Refusal::Limit(limit),
        }
    }
}

/// What a player gets.
#[derive(Debug)]
pub enum Source {
    /// A stream published here.
    Live(Arc<Stream>),
    /// A stream this edge pulls from an origin.
    Pulled(Arc<Stream>),
    /// A file below the media root, opened, not playing yet.
    File(Arc<VodFile>),
    /// Recordings of stream `key` in `range`, opened, not playing yet.
    Recorded {
        key: String,
        range: TimeRange,
        timeline: Arc<Timeline>,
    },
}

impl Source {
    /// The stream to play: the live one, or the file's own from its start (kept going
    /// by the returned [`VodPlay`], which the player holds).
    pub fn start(self, ctx: &Ctx, id: u64) -> (Arc<Stream>, Option<VodPlay>) {
        match self {
            Source::Live(stream) | Source::Pulled(stream) => (stream, None),
            Source::File(file) => {
                tracing::info!(
                    file = %file.path,
                    open = ctx.vods().open_files(),
                    mapped = ctx.files().mapped(),
                    "vod: play"
                );
                let play = VodPlay::start(file, &ctx.hub().config, id, 0);
                (play.stream.clone(), Some(play))
            }
            Source::Recorded { key, timeline, .. } => {
                tracing::info!(stream = %key, pieces = timeline.pieces.len(), "range play");
                let name = format!("{key}@");
                let config = &ctx.hub().config;
                let play = VodPlay::play(&name, timeline, config, id, 0, Speed::NORMAL);
                (play.stream.clone(), Some(play))
            }
        }
    }
}

impl Ctx {
    /// Whether the ask may do `action`; a denial is logged with its reason (and
    /// counted by `Auth`).
    pub async fn check(&self, ask: &Ask<'_>, action: Action) -> Result<(), Refusal> {
        let Some(req) = ask.request(action) else {
            return Ok(());
        };
        let auth = self.auth().load_full();
        let Err(denial) = auth.authorize(&req).await else {
            return Ok(());
        };
        tracing::info!(
            action = action.name(),
            path = %req.path,
            protocol = req.protocol,
            peer = %req.peer,
            user = req.credentials.user.as_deref().unwrap_or(""),
            reason = denial.reason(),
            "denied"
        );
        Err(denial.into())
    }

    /// Makes the asker the publisher of its key, once authorized. A stream that has
    /// one refuses it, unless its app lets a second publisher take over: then the first
    /// is disconnected (on whichever worker it is) and this one waits for it to let go.
    /// When the app says so, the publisher is disconnected after a time without viewers.
    /// An address publishing `limits.max_publishers_per_ip` streams already is refused.
    pub async fn admit_publish(&self, ask: &Ask<'_>) -> Result<Publisher, Refusal> {
        self.check(ask, Action::Publish).await?;
        let (key, id, hub) = (ask.key, ask.id, self.hub());
        crate::ops::inject_panic(key);
        hub.limits.not_draining().map_err(Refusal::Limit)?;
        let slot = hub.limits.publisher(ask.peer).map_err(Refusal::Limit)?;
        let settings = hub.config.policy.of(key);
        // In a cluster, the directory decides first, with the same policy.
        let mut pulled_here = false;
        if let Some(relays) = self.relays() {
            if let Some(cluster) = relays.cluster() {
                if let Decision::Refused(node) = cluster.claim(key, settings.takeover).await {
                    tracing::info!(stream = %key, node = %node, "cluster: published on another node");
                    return Err(Refusal::InUse(key.to_string()));
                }
                // This node pulled the stream from its old node: the pull gives way.
                pulled_here = relays.give_way(key);
            }
        }
        let mut publisher = Publisher::new(hub, key, id);
        let in_use = matches!(publisher, Err(PublishError::InUse(_)));
        if in_use && (settings.takeover || pulled_here) {
            if settings.takeover {
                let kicked = self.ops().kick_publishers(key).await;
                tracing::info!(stream = %key, kicked, "a second publisher takes the stream over");
            }
            let deadline = tokio::time::Instant::now() + TAKEOVER_WAIT;
            while matches!(publisher, Err(PublishError::InUse(_)))
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
                publisher = Publisher::new(hub, key, id);
            }
        }
        let mut publisher = publisher?;
        publisher.hold(slot);
        started(self.relays(), &publisher);
        if let Some(after) = settings.no_viewers {
            let task = tokio::task::spawn_local(crate::ops::disconnect_without_viewers(
                publisher.stream.clone(),
                self.clients().clone(),
                id,
                after,
            ));
            publisher.watch(task.abort_handle());
        }
        Ok(publisher)
    }

    /// What the asker plays, once authorized: the file `file` names (below the media
    /// root), the recordings of a key `app/name@FROM..TO` (authorized on `app/name`, as
    /// HLS of a range is; an `@` in the stream name is always a range), or else the live
    /// stream of its key, waiting up to `players.wait_ms` for it (on an edge, pulling
    /// it from an origin).
    pub async fn admit_play(&self, ask: &Ask<'_>, file: Option<&str>) -> Result<Source, Refusal> {
        let recorded = file.is_none().then(|| split_key(ask.key)).flatten();
        match recorded {
            Some((key, _)) => {
                let judged = ask.clone().judged_on(key);
                self.check(&judged, Action::Read).await?;
            }
            None => self.check(ask, Action::Read).await?,
        }
        self.hub().limits.not_draining().map_err(Refusal::Limit)?;
        if let Some((key, text)) = recorded {
            return self.recorded(key, text).await;
        }
        let not_found = || Refusal::NotFound(ask.key.to_string());
        match file {
            Some(path) => {
                let root = Path::new(&self.config().media_root);
                match self.vods().open(self.files(), root, path).await {
                    Ok(file) => Ok(Source::File(file)),
                    Err(e) => {
                        tracing::info!(file = %path, "vod: {e}");
                        Err(not_found())
                    }
                }
            }
            None => self.live(ask.key).await.ok_or_else(not_found),
        }
    }

    /// The recordings of `key` in range `text` (`FROM..TO`, maybe percent-encoded).
    async fn recorded(&self, key: &str, text: &str) -> Result<Source, Refusal> {
        let decoded = sluice_http::percent_decode_utf8(text).unwrap_or_default();
        let range = Opener::parse(&decoded)?;
        let timeline = self.timeline(key, range).await?;
        Ok(Source::Recorded {
            key: key.to_string(),
            range,
            timeline: Arc::new(timeline),
        })
    }

    /// The recordings of `key` in `range`, opened.
    pub async fn timeline(&self, key: &str, range: TimeRange) -> Result<Timeline, Refusal> {
        let Some(recorder) = self.hub().attached::<Recorder>() else {
            return Err(RecordedError::Nothing("recording is off".into()).into());
        };
        let opener = Opener {
            recorder,
            vods: self.vods(),
            maps: self.files(),
            media_root: Path::new(&self.config().media_root),
        };
        Ok(opener.timeline(key, range).await?)
    }

    /// The live stream `key`, waiting up to `players.wait_ms` for its publisher; on
    /// an edge, a stream not published here is pulled from an origin, and waited for
    /// as long as an origin may take to start sending it.
    pub async fn find_live(&self, key: &str) -> Option<Arc<Stream>> {
        match self.live(key).await? {
            Source::Live(s) | Source::Pulled(s) => Some(s),
            Source::File(_) | Source::Recorded { .. } => None,
        }
    }

    async fn live(&self, key: &str) -> Option<Source> {
        let hub = self.hub();
        let wait = Duration::from_millis(self.config().players.wait_ms);
        let Some(relays) = self.relays().filter(|r| r.ensure(key)) else {
            return hub.find_or_wait(key, wait).await.map(Source::Live);
        };
        // A pull that ends without the stream (no origin has it) ends the wait too.
        let deadline = tokio::time::Instant::now() + wait.max(relays.config.connect_timeout);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let step = left.min(Duration::from_millis(100));
            if let Some(s) = hub.find_or_wait(key, step).await {
                return Some(Source::Pulled(s));
            }
            if left.is_zero() || relays.pull_of(key).is_none() {
                return hub.find(key).map(Source::Pulled);
            }
        }
    }

    /// Whether `key` (`vod/<path>` for a file, `app/name@FROM..TO` for recordings) can
    /// be played now.
    pub async fn exists(&self, key: &str) -> bool {
        if let Some((key, text)) = split_key(key) {
            return self.recorded(key, text).await.is_ok();
        }
        match key.strip_prefix("vod/") {
            Some(path) => {
                let root = Path::new(&self.config().media_root);
                self.vods().open(self.files(), root, path).await.is_ok()
            }
            // An edge pulls what it does not have, and says yes once the pull delivers.
            None => {
                self.hub().find(key).is_some()
                    || (self.relays().is_some_and(|r| r.pulls_here(key))
                        && self.find_live(key).await.is_some())
            }
        }
    }
}

/// The publisher of a stream an edge pulls from an origin (the relay's door into the
/// admission, given to it as a [`crate::relay::Admit`]): no credentials to check, no
/// per-address limit, no takeover (a pull gives way to a publisher), and no watchdog
/// (a pull stops itself without viewers).
pub fn pulled(relays: &Arc<Relays>, key: &str, id: u64) -> Result<Publisher, PublishError> {
    let publisher = Publisher::new(relays.hub(), key, id)?;
    started(Some(relays), &publisher);
    Ok(publisher)
}

/// What a new publisher sets off: the relay pushes its stream matches (a pulled
/// stream is pushed as a published one is: a camera sent on to a platform).
fn started(relays: Option<&Arc<Relays>>, publisher: &Publisher) {
    if let Some(relays) = relays {
        relays.on_publish(&publisher.stream);
    }
}
