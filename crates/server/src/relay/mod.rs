//! Edge pulls: a stream asked for here and published nowhere here is pulled from an
//! origin and published into the hub like any publisher's, so every protocol plays
//! it from this server.
//!
//! - [`Relays`]: the server's pulls, one per stream key whatever the number of viewers
//!   (and of workers): the first request starts it, the others find it running.
//! - [`pull`]: one pull's life. It tries the origins in order; one that fails (refused,
//!   unreachable, or its stream ended) gives way to the next at once. Its publisher
//!   handle drops meanwhile, which leaves the stream to its players for the grace
//!   window (`limits.publish_grace_ms`): the next origin's media continues the same
//!   stream with timestamps moved to follow on (`core::ingest`), and HLS marks one
//!   discontinuity. After a full round of failures it waits, doubling from
//!   `edge.retry_min_ms` to `edge.retry_max_ms`; with no viewers it gives up after
//!   `edge.max_failures` failures in a row, and it stops `edge.idle_ms` after the
//!   last viewer left.
//! - [`origin`]: origin URLs. [`link`]: the way to the connection driver, which runs
//!   the sans-IO clients of RTMP, RTMPS, HTTP-FLV and RTSP origins (`sluice-rtmp`,
//!   `sluice-http`, `sluice-rtsp`) and of every push; [`client`]: the media a pull
//!   gives the hub, and the readers of the other sources (SRT, HLS).
//!
//! - [`push`]: a stream published here sent on to other servers (`[[apps]]` `push`
//!   URLs; on an edge with `edge.forward_publish`, its first RTMP origin); to a
//!   `udp://` or `rtp://` target as paced MPEG-TS ([`udp_push`]).
//!
//! An edge's origins may be edges themselves: a pull is a play request there, which
//! starts that edge's own pull.

pub mod client;
pub mod error;
mod hls_pull;
pub mod link;
pub mod origin;
pub mod pull;
pub mod push;
pub mod rtsp_pull;
mod settings;
mod srt_pull;
pub mod udp_push;

pub use error::{CaError, RuleError};
pub use origin::Origin;
pub use settings::{AppRelayConfig, EdgeSettings, RelayConfig};

use crate::core::hub::{Hub, PublishError};
use crate::core::ingest::Publisher;
use crate::keys::Pattern;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How long a stream that moved to another node waits for its kicked publisher here
/// to leave before its viewers follow it, and how often it looks.
const FOLLOW_WAIT: Duration = Duration::from_secs(3);
const FOLLOW_POLL: Duration = Duration::from_millis(20);

/// The edge's settings, as the pulls use them.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// `edge.lookup_url`, `{key}` not yet replaced; empty for none.
    pub lookup_url: String,
    /// Pulls at once (0: no limit): any viewer can make an edge dial its origins.
    pub max_pulls: usize,
    pub idle: Duration,
    pub retry_min: Duration,
    pub retry_max: Duration,
    pub max_failures: u32,
    pub connect_timeout: Duration,
}

/// The TLS client configuration of pulls and pushes: the web PKI's roots, and those
/// of the PEM file `ca` when one is named.
pub fn client_tls(ca: &str) -> Result<Arc<rustls::ClientConfig>, CaError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    if ca.is_empty() {
        return Ok(crate::io::http_client::tls_config());
    }
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
        .and_then(|i| i.collect())
        .map_err(|source| CaError::Pem {
            ca: ca.to_string(),
            source,
        })?;
    if certs.is_empty() {
        return Err(CaError::Empty(ca.to_string()));
    }
    let rustls = |source| CaError::Rustls {
        ca: ca.to_string(),
        source,
    };
    for c in certs {
        roots.add(c).map_err(rustls)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(rustls)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// What the metrics count of all pulls.
#[derive(Debug, Default)]
pub struct RelayCounters {
    /// Pulls started.
    pub pulls: AtomicU64,
    /// Bytes read from origins.
    pub bytes: AtomicU64,
    /// Connections to an origin after the first of a pull (any cause).
    pub reconnects: AtomicU64,
    /// Moves to another origin after one failed.
    pub failovers: AtomicU64,
    /// Pushes started.
    pub pushes: AtomicU64,
    /// Tag bytes sent by pushes.
    pub push_bytes: AtomicU64,
    /// Connections of a push after its first.
    pub push_reconnects: AtomicU64,
}

/// One running pull, as the API shows it.
#[derive(Debug)]
pub struct PullInfo {
    pub key: String,
    /// The URL being pulled now (or tried last).
    origin: Mutex<String>,
    pub since: SystemTime,
    pub bytes: AtomicU64,
    pub reconnects: AtomicU64,
    pub failovers: AtomicU64,
    /// Pulled whether watched or not, and never given up.
    pub always: bool,
    /// Set when the API removed the pull's rule: the pull ends at its next look.
    stopped: std::sync::atomic::AtomicBool,
}

impl PullInfo {
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    pub fn origin(&self) -> String {
        self.origin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_origin(&self, url: String) {
        *self.origin.lock().unwrap_or_else(|e| e.into_inner()) = url;
    }
}

/// The server's pulls, shared by every worker.
#[derive(Debug)]
pub struct Relays {
    hub: Arc<Hub>,
    pub config: EdgeConfig,
    /// Every stream's origins unless an app names its own.
    origins: Vec<Origin>,
    /// `[[apps]]` entries with `origins`, in order: the first match wins.
    apps: Vec<(Pattern, Vec<Origin>)>,
    /// `[[apps]]` entries with a `pull` URL (exact sources), before `apps`; and the
    /// stream keys pulled always.
    sources: Vec<(Pattern, Origin)>,
    always: Vec<String>,
    pulls: Mutex<HashMap<String, Arc<PullInfo>>>,
    /// TLS towards origins and push targets.
    tls: Arc<rustls::ClientConfig>,
    /// `[[apps]]` entries with `push` URLs, in order: every match pushes.
    push_rules: Vec<(Pattern, Vec<push::PushTarget>)>,
    /// Publishes here go on to the stream's first RTMP(S) origin.
    forward_publish: bool,
    /// Pushes running: (stream id, target).
    pushes: Mutex<std::collections::HashSet<(u64, String)>>,
    /// UDP pushes running, with their counters.
    udp_pushes: Mutex<Vec<Arc<udp_push::UdpPushInfo>>>,
    /// Rules the API added (and may remove).
    dynamic: Mutex<Dynamic>,
    pub counters: RelayCounters,
    /// How a pull's stream gets its publisher: the server's one admission.
    admit: Admit,
    /// The cluster's directory, which says which node to pull a stream from.
    cluster: Option<crate::cluster::Cluster>,
}

/// The door a pull publishes through (the server's admission, which sits above the
/// relays): the publisher of stream `key` for pull `id`, with what a new publisher
/// sets off.
pub type Admit = fn(&Arc<Relays>, &str, u64) -> Result<Publisher, PublishError>;

/// A pull the API configured: stream `key` from `source`.
#[derive(Debug, Clone)]
pub struct PullRule {
    pub key: String,
    pub source: Origin,
    pub always: bool,
}

/// A push the API configured: streams matching `streams` to `target`.
#[derive(Debug, Clone)]
pub struct PushRule {
    pub id: u64,
    pub streams: String,
    pattern: Pattern,
    pub target: push::PushTarget,
}

#[derive(Debug, Default)]
struct Dynamic {
    pulls: Vec<PullRule>,
    pushes: Vec<PushRule>,
    next_push: u64,
}

impl Relays {
    /// The server's pulls and pushes: those configured (URLs checked with the
    /// configuration), and room for the API's.
    pub fn new(
        config: &RelayConfig,
        hub: Arc<Hub>,
        admit: Admit,
        cluster: Option<crate::cluster::Cluster>,
    ) -> Arc<Relays> {
        let parse = |urls: &[String]| -> Vec<Origin> {
            urls.iter().filter_map(|u| Origin::parse(u).ok()).collect()
        };
        let origins = parse(&config.edge.origins);
        let apps: Vec<_> = config
            .apps
            .iter()
            .filter_map(|a| {
                let urls = a.origins.as_ref()?;
                let pattern = Pattern::app(&a.name).ok()?;
                Some((pattern, parse(urls)))
            })
            .collect();
        let sources: Vec<_> = config
            .apps
            .iter()
            .filter_map(|a| {
                let mut source = Origin::parse_exact(a.pull.as_ref()?).ok()?;
                if let origin::Scheme::Rtsp { udp } = &mut source.scheme {
                    *udp = a.pull_transport.as_deref() == Some("udp");
                }
                Some((Pattern::app(&a.name).ok()?, source))
            })
            .collect();
        let always: Vec<String> = config
            .apps
            .iter()
            .filter(|a| a.pull_always == Some(true) && a.pull.is_some())
            .map(|a| a.name.clone())
            .collect();
        let push_rules: Vec<_> = config
            .apps
            .iter()
            .filter_map(|a| {
                let urls = a.push.as_ref()?;
                let pattern = Pattern::app(&a.name).ok()?;
                let targets: Vec<_> = urls
                    .iter()
                    .filter_map(|u| push::PushTarget::parse(u).ok())
                    .collect();
                Some((pattern, targets))
            })
            .collect();
        let e = &config.edge;
        Arc::new(Relays {
            hub,
            config: EdgeConfig {
                lookup_url: e.lookup_url.clone(),
                max_pulls: e.max_pulls,
                idle: Duration::from_millis(e.idle_ms),
                retry_min: Duration::from_millis(e.retry_min_ms),
                retry_max: Duration::from_millis(e.retry_max_ms),
                max_failures: e.max_failures.max(1),
                connect_timeout: Duration::from_millis(e.connect_timeout_ms),
            },
            origins,
            apps,
            sources,
            always,
            pulls: Mutex::new(HashMap::new()),
            // Checked with the configuration; the web PKI's alone if it went since.
            tls: client_tls(&e.tls_ca).unwrap_or_else(|_| crate::io::http_client::tls_config()),
            push_rules,
            forward_publish: e.forward_publish,
            pushes: Mutex::new(std::collections::HashSet::new()),
            udp_pushes: Mutex::new(Vec::new()),
            dynamic: Mutex::new(Dynamic::default()),
            counters: RelayCounters::default(),
            admit,
            cluster,
        })
    }

    /// The cluster this node is part of, if any.
    pub fn cluster(&self) -> Option<&crate::cluster::Cluster> {
        self.cluster.as_ref()
    }

    /// Whether streams are looked up before (or instead of) trying the origins.
    fn looks_up(&self) -> bool {
        !self.config.lookup_url.is_empty() || self.cluster.is_some()
    }

    /// A publisher of `key` arrived here while a pull of it runs (its node's publisher
    /// moved here): the pull stops at its next look and leaves the stream to it.
    /// Whether a pull was running.
    pub fn give_way(&self, key: &str) -> bool {
        let pull = self.pull_of(key);
        if let Some(p) = &pull {
            p.stopped.store(true, Ordering::Relaxed);
        }
        pull.is_some()
    }

    fn dynamic(&self) -> std::sync::MutexGuard<'_, Dynamic> {
        self.dynamic.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a play request for `key` may be answered by a pull (so it is worth
    /// waiting for).
    pub fn pulls_here(&self, key: &str) -> bool {
        self.looks_up() || !self.origins_for(key).is_empty()
    }

    /// The pull rules the API added.
    pub fn pull_rules(&self) -> Vec<PullRule> {
        self.dynamic().pulls.clone()
    }

    /// The push rules the API added.
    pub fn push_rules(&self) -> Vec<PushRule> {
        self.dynamic().pushes.clone()
    }

    /// Adds (or replaces) the API's pull of `key` from `url`; an always-on pull starts
    /// now.
    pub fn add_pull(
        self: &Arc<Self>,
        key: &str,
        url: &str,
        always: bool,
        udp: bool,
    ) -> Result<(), RuleError> {
        let mut source = Origin::parse_exact(url)?;
        if let origin::Scheme::Rtsp { udp: u } = &mut source.scheme {
            *u = udp;
        }
        {
            let mut d = self.dynamic();
            d.pulls.retain(|r| r.key != key);
            d.pulls.push(PullRule {
                key: key.to_string(),
                source,
                always,
            });
        }
        // A running pull goes on from the old rule's source: it makes way.
        if let Some(p) = self.pull_of(key) {
            p.stopped.store(true, Ordering::Relaxed);
        }
        if always {
            self.start(key, true);
        }
        Ok(())
    }

    /// Removes the API's pull of `key` and stops it if it runs; whether there was one.
    pub fn remove_pull(&self, key: &str) -> bool {
        let removed = {
            let mut d = self.dynamic();
            let before = d.pulls.len();
            d.pulls.retain(|r| r.key != key);
            d.pulls.len() < before
        };
        if removed {
            if let Some(p) = self.pull_of(key) {
                p.stopped.store(true, Ordering::Relaxed);
            }
        }
        removed
    }

    /// Adds the API's push of the streams matching `streams` to `url`; streams live now
    /// start at once. Returns the rule's id.
    pub fn add_push(
        self: &Arc<Self>,
        streams: &str,
        url: &str,
        live: &[Arc<crate::core::hub::Stream>],
    ) -> Result<u64, RuleError> {
        let pattern = Pattern::app(streams)?;
        let target = push::PushTarget::parse(url)?;
        let id = {
            let mut d = self.dynamic();
            d.next_push += 1;
            let id = d.next_push;
            d.pushes.push(PushRule {
                id,
                streams: streams.to_string(),
                pattern,
                target,
            });
            id
        };
        for s in live {
            if s.lock().publisher.is_some() {
                self.on_publish(s);
            }
        }
        Ok(id)
    }

    /// Removes the API's push rule `id`; its pushes end at their next look.
    pub fn remove_push(&self, id: u64) -> bool {
        let mut d = self.dynamic();
        let before = d.pushes.len();
        d.pushes.retain(|r| r.id != id);
        d.pushes.len() < before
    }

    /// Whether `target` is still wanted for stream `key` (a rule still names it).
    fn push_wanted(&self, key: &str, target: &push::PushTarget) -> bool {
        self.push_targets(key).iter().any(|t| t == target)
    }

    /// Every push target of stream `key`: the configured rules', the API's, and its
    /// origin's when publishes are forwarded.
    fn push_targets(&self, key: &str) -> Vec<push::PushTarget> {
        let mut targets: Vec<push::PushTarget> = self
            .push_rules
            .iter()
            .filter(|(p, _)| p.matches(key))
            .flat_map(|(_, t)| t.iter().map(|t| t.for_stream(key)))
            .collect();
        targets.extend(
            self.dynamic()
                .pushes
                .iter()
                .filter(|r| r.pattern.matches(key))
                .map(|r| r.target.for_stream(key)),
        );
        if self.forward_publish {
            let origins = self.origins_for(key);
            let origin = origins
                .iter()
                .find(|o| matches!(o.scheme, origin::Scheme::Rtmp | origin::Scheme::Rtmps));
            if let Some(t) = origin.and_then(|o| push::PushTarget::parse(&o.url_of(key)).ok()) {
                targets.push(t);
            }
        }
        targets
    }

    /// Where stream `key` is pulled from: the API's pull of it, its `pull` URL, else its
    /// app's origins, else the global ones.
    pub fn origins_for(&self, key: &str) -> Vec<Origin> {
        if let Some(rule) = self.dynamic().pulls.iter().find(|r| r.key == key) {
            return vec![rule.source.for_stream(key)];
        }
        if let Some((_, source)) = self.sources.iter().find(|(p, _)| p.matches(key)) {
            return vec![source.for_stream(key)];
        }
        self.apps
            .iter()
            .find(|(p, _)| p.matches(key))
            .map_or(&self.origins, |(_, o)| o)
            .clone()
    }

    /// Starts the always-on pulls (once, at the server's start).
    pub fn start_always(self: &Arc<Self>) {
        for key in self.always.clone() {
            self.start(&key, true);
        }
    }

    /// The hub pulled streams are published to.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The publisher of pulled stream `key` (see [`Admit`]).
    pub fn admit(self: &Arc<Self>, key: &str, id: u64) -> Result<Publisher, PublishError> {
        (self.admit)(self, key, id)
    }

    /// Starts pulling `key` on this worker unless it is pulled already, published
    /// here, or has no origin; whether a pull is running now.
    pub fn ensure(self: &Arc<Self>, key: &str) -> bool {
        self.start(key, false)
    }

    /// Stream `key` went to another node of the cluster (its publisher reconnected
    /// there, or was taken over): once the publisher here has left (a kicked one takes
    /// a moment), its viewers here follow it with a pull, within the grace window.
    pub async fn follow(self: Arc<Self>, key: Arc<str>) {
        let deadline = tokio::time::Instant::now() + FOLLOW_WAIT;
        loop {
            let Some(stream) = self.hub.find(&key) else {
                return;
            };
            if stream.viewers() == 0 {
                return;
            }
            if stream.lock().publisher.is_none() {
                if self.ensure(&key) {
                    tracing::info!(stream = %key, "cluster: the stream moved to another node; its viewers here follow it");
                }
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    }

    fn start(self: &Arc<Self>, key: &str, always: bool) -> bool {
        let origins = self.origins_for(key);
        if (origins.is_empty() && !self.looks_up()) || key.starts_with("vod/") {
            return false;
        }
        let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
        // A stopped pull is on its way out: a new one takes its place.
        if pulls.get(key).is_some_and(|p| !p.stopped()) {
            return true;
        }
        let max = self.config.max_pulls;
        if !always && max > 0 && pulls.len() >= max {
            tracing::warn!(stream = %key, max, "edge: too many pulls, not pulling");
            return false;
        }
        // Published here: no pull (an always-on one waits for the publisher to go).
        if !always
            && self
                .hub
                .find(key)
                .is_some_and(|s| s.lock().publisher.is_some())
        {
            return false;
        }
        let info = Arc::new(PullInfo {
            key: key.to_string(),
            origin: Mutex::new(
                origins
                    .first()
                    .map_or_else(String::new, |o| o.display_of(key)),
            ),
            since: SystemTime::now(),
            bytes: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            failovers: AtomicU64::new(0),
            always,
            stopped: std::sync::atomic::AtomicBool::new(false),
        });
        pulls.insert(key.to_string(), info.clone());
        drop(pulls);
        self.counters.pulls.fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_local(pull::run(self.clone(), info, origins));
        true
    }

    /// The pull of `key`, if one runs.
    pub fn pull_of(&self, key: &str) -> Option<Arc<PullInfo>> {
        self.pulls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Every running pull.
    pub fn pulls(&self) -> Vec<Arc<PullInfo>> {
        let mut all: Vec<_> = self
            .pulls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }

    /// A publisher started publishing `stream` here: its pushes start, unless they
    /// run already (a publisher back within the grace window).
    pub fn on_publish(self: &Arc<Self>, stream: &Arc<crate::core::hub::Stream>) {
        let targets = self.push_targets(&stream.key);
        for target in targets {
            let key = target.key();
            {
                let mut pushes = self.pushes.lock().unwrap_or_else(|e| e.into_inner());
                // A UDP target takes one stream at a time: the first one holds it.
                let held = target.exclusive()
                    && pushes.iter().any(|(id, k)| *k == key && *id != stream.id);
                if held {
                    tracing::warn!(stream = %stream.key, target = %target.display(),
                        "push: another stream of the rule sends to this address; not pushed");
                    continue;
                }
                if !pushes.insert((stream.id, key)) {
                    continue;
                }
            }
            self.counters.pushes.fetch_add(1, Ordering::Relaxed);
            tokio::task::spawn_local(push::run(self.clone(), stream.clone(), target));
        }
    }

    /// The UDP pushes running now.
    pub fn udp_pushes(&self) -> Vec<Arc<udp_push::UdpPushInfo>> {
        self.udp_pushes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn udp_push_started(&self, info: &Arc<udp_push::UdpPushInfo>) {
        self.udp_pushes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(info.clone());
    }

    fn udp_push_ended(&self, info: &Arc<udp_push::UdpPushInfo>) {
        self.udp_pushes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|i| !Arc::ptr_eq(i, info));
    }

    fn push_ended(&self, stream: u64, target: &push::PushTarget) {
        self.pushes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(stream, target.key()));
    }

    /// Pull `info` ended: it leaves the map unless another took its place.
    fn finished(&self, info: &Arc<PullInfo>) {
        let mut pulls = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
        if pulls.get(&info.key).is_some_and(|p| Arc::ptr_eq(p, info)) {
            pulls.remove(&info.key);
        }
    }
}
