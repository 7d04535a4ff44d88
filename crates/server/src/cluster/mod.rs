//! A cluster of Sluice nodes around a directory in Redis (or Valkey): any node takes
//! any publisher and serves any stream, with no sticky sessions.
//!
//! - Each node registers its record (id, the URLs it is reached at per protocol, its
//!   load) with a TTL it refreshes every third of it ([`directory`]).
//! - A publisher is admitted only once its node has claimed the stream in the
//!   directory ([`Cluster::claim`]): atomic, so two nodes never both own a stream; the
//!   app's policy (`takeover`) decides between a second publisher and the first, as
//!   on one node. A stream whose publisher left (its grace window) may be claimed by
//!   another node, which is where a reconnecting publisher lands behind a load
//!   balancer.
//! - A node asked for a stream it does not have looks its owner up
//!   ([`Cluster::locate`]) and pulls it over RTMP with the edge's pull (one pull per
//!   stream per node, idle stop, and a new lookup after each failure: failover).
//! - The store is reached only from the directory's own thread, each operation
//!   bounded by `cluster.timeout_ms`. While it is unreachable, nodes serve what they
//!   have and admit publishers as a single server would; at its return they register
//!   again and a stream two nodes took meanwhile stays with the one the directory
//!   has, the other's publisher being disconnected.
//!
//! [`store::Store`] is the seam for another store (etcd).

mod directory;
pub mod load;
pub mod node;
mod redis_store;
pub mod store;

use crate::core::hub::Hub;
use crate::core::tap::{Attach, Tap};
use directory::Command;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
pub use store::{Claimed, NodeEntry, NodeRecord};
use tokio::sync::{mpsc, oneshot};

/// The `[cluster]` table. Its keys' defaults, flags and help are in the configuration's
/// settings table (`config.rs`), which also gives it its `Default`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    pub directory: String,
    pub node_id: String,
    pub advertise: String,
    pub ttl_ms: u64,
    pub timeout_ms: u64,
    pub prefix: String,
    pub tls_ca: String,
    pub max_connections: usize,
    pub max_egress_mbps: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster.directory: {0}")]
    Url(String),
    #[error("cluster.tls_ca {path}: {source}")]
    Ca {
        path: String,
        source: std::io::Error,
    },
    #[error("cluster: {0}")]
    Store(#[from] store::StoreError),
    #[error("cluster: cannot start the directory's thread: {0}")]
    Thread(std::io::Error),
    #[error("cluster: the directory's thread is gone")]
    Gone,
}

impl ClusterSettings {
    /// Whether this server is a node of a cluster.
    pub fn is_on(&self) -> bool {
        !self.directory.is_empty()
    }

    /// Checks what can be checked before the start: the URL's scheme, the TTL.
    pub fn check(&self) -> Result<(), ClusterError> {
        if !self.is_on() {
            return Ok(());
        }
        redis::parse_redis_url(&self.directory).ok_or_else(|| {
            ClusterError::Url("not a redis://, rediss://, valkey:// or unix:// URL".into())
        })?;
        if self.ttl_ms < 300 {
            return Err(ClusterError::Url(format!(
                "cluster.ttl_ms {} is below 300 ms",
                self.ttl_ms
            )));
        }
        Ok(())
    }
}

/// Directory operations, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Refresh,
    Claim,
    Release,
    Away,
    Locate,
    Nodes,
    Leave,
}

impl Op {
    pub const ALL: [Op; 7] = [
        Op::Refresh,
        Op::Claim,
        Op::Release,
        Op::Away,
        Op::Locate,
        Op::Nodes,
        Op::Leave,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Refresh => "refresh",
            Op::Claim => "claim",
            Op::Release => "release",
            Op::Away => "away",
            Op::Locate => "locate",
            Op::Nodes => "nodes",
            Op::Leave => "leave",
        }
    }
}

/// What the metrics show of the directory.
#[derive(Debug, Default)]
pub struct Counters {
    /// The last operation reached the store.
    pub up: AtomicBool,
    /// This node drains: its record says so from its next refresh.
    pub draining: AtomicBool,
    /// Media sent to players, bit/s, as of the last refresh.
    pub egress_bps: AtomicU64,
    /// Players and publishers sent to another node (HTTP 307).
    pub redirects: AtomicU64,
    /// Per [`Op`]: operations that succeeded, and that failed.
    ops: [[AtomicU64; 2]; 7],
    /// Claims that took a stream from another node.
    pub takeovers: AtomicU64,
    /// Claims refused: another node owns the stream.
    pub refused: AtomicU64,
    /// Streams another node took from this one.
    pub lost: AtomicU64,
    /// Lookups that found the stream's node, and that found none.
    pub located: AtomicU64,
    pub not_located: AtomicU64,
}

impl Counters {
    fn count(&self, op: Op, ok: bool) {
        self.ops[op as usize][usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
    }

    /// Operations of `op` that succeeded and that failed.
    pub fn ops(&self, op: Op) -> (u64, u64) {
        let [ok, failed] = &self.ops[op as usize];
        (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed))
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum Located {
    /// Another node owns the stream.
    At(NodeRecord),
    /// No node has it (or this one does: nothing to pull).
    Nowhere,
    /// The directory did not answer.
    Unknown,
}

/// What a claim decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// This node owns the stream.
    Own,
    /// Node `.0` owns it.
    Refused(String),
    /// The directory did not answer: admitted as on one server, registered later.
    Unknown,
}

/// How long a claim waits for the owner's port to refuse a connection.
const DEATH_PROBE: Duration = Duration::from_millis(300);

/// This node's side of the cluster, shared by every worker.
#[derive(Debug, Clone)]
pub struct Cluster {
    id: Arc<str>,
    tx: mpsc::UnboundedSender<Command>,
    /// A worker waits this long for an answer, a little more than the directory's
    /// own bound on the store.
    wait: Duration,
    pub counters: Arc<Counters>,
    /// Past these, new sessions are sent elsewhere where the protocol allows it.
    max_connections: usize,
    max_egress_bps: u64,
    /// The other nodes as last listed, and when (see [`Cluster::elsewhere`]).
    others: Arc<std::sync::Mutex<(Option<std::time::Instant>, Vec<NodeRecord>)>>,
    /// How long a listing of the nodes is used for placement.
    listing_life: Duration,
}

impl Cluster {
    /// Starts this node's directory on its own thread. `urls`: where each protocol of
    /// this node is reached; `lost` is called (on that thread) with each stream another
    /// node took over, whose publisher here must go.
    pub fn start(
        settings: &ClusterSettings,
        urls: BTreeMap<String, String>,
        hub: Arc<std::sync::OnceLock<Arc<Hub>>>,
        lost: impl Fn(String) + Send + 'static,
    ) -> Result<Cluster, ClusterError> {
        settings.check()?;
        let id: Arc<str> = if settings.node_id.is_empty() {
            node::default_id().into()
        } else {
            settings.node_id.as_str().into()
        };
        let ca = match settings.tls_ca.as_str() {
            "" => None,
            path => Some(std::fs::read(path).map_err(|source| ClusterError::Ca {
                path: path.to_string(),
                source,
            })?),
        };
        let timeout = Duration::from_millis(settings.timeout_ms.max(1));
        let ttl = Duration::from_millis(settings.ttl_ms);
        let (tx, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        let url = settings.directory.clone();
        let (prefix, me_id, thread_counters) =
            (settings.prefix.clone(), id.to_string(), counters.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("sluice-cluster".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(ClusterError::Thread(e)));
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, async move {
                    let store = match redis_store::RedisStore::open(&url, ca, &prefix, timeout) {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.into()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let me = directory::Me {
                        id: me_id,
                        urls,
                        started: SystemTime::now(),
                        ttl,
                        timeout,
                        hub,
                        lost: Box::new(lost),
                    };
                    directory::run(store, me, rx, thread_counters).await;
                });
            })
            .map_err(ClusterError::Thread)?;
        ready_rx.recv().map_err(|_| ClusterError::Gone)??;
        tracing::info!(node = %id, directory = %redacted(&settings.directory), ttl_ms = settings.ttl_ms, "cluster: node");
        Ok(Cluster {
            id,
            tx,
            wait: timeout + Duration::from_millis(100),
            counters,
            max_connections: settings.max_connections,
            max_egress_bps: settings.max_egress_mbps.saturating_mul(1_000_000),
            others: Default::default(),
            listing_life: ttl / 3,
        })
    }

    /// This node's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, store::StoreError>>) -> Command,
    ) -> Result<T, ClusterError> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(make(reply)).map_err(|_| ClusterError::Gone)?;
        match tokio::time::timeout(self.wait, answer).await {
            Ok(Ok(result)) => Ok(result?),
            Ok(Err(_)) => Err(ClusterError::Gone),
            Err(_) => Err(store::StoreError::Timeout(self.wait).into()),
        }
    }

    /// Claims stream `key` for a publisher here (see [`Decision`]).
    pub async fn claim(&self, key: &str, takeover: bool) -> Decision {
        let result = self
            .ask(|reply| Command::Claim {
                key: key.to_string(),
                takeover,
                reply,
            })
            .await;
        match result {
            Ok(Claimed::Owned { from }) => {
                if let Some(from) = from {
                    tracing::info!(stream = %key, from = %from, "cluster: stream taken over from another node");
                }
                Decision::Own
            }
            Ok(Claimed::Held(owner)) if !takeover && self.is_dead(key, &owner).await => {
                // Its node died (a crash, SIGKILL): its entries would hold the stream
                // until their TTL, and the publisher reconnecting here waits for nothing.
                tracing::info!(stream = %key, node = %owner, "cluster: the stream's node refuses connections: taken over");
                Box::pin(self.claim(key, true)).await
            }
            Ok(Claimed::Held(owner)) => Decision::Refused(owner),
            Err(_) => Decision::Unknown,
        }
    }

    /// Whether node `owner` of `key` is gone: its RTMP port refuses connections (a
    /// reset, not a silence: a node that cannot be reached may still be alive).
    async fn is_dead(&self, key: &str, owner: &str) -> bool {
        // The directory's record, not a player's lookup: not counted as one.
        let Ok(Some(record)) = self.owner(key).await else {
            return false;
        };
        let Some(addr) = record.pull_url().and_then(|u| u.strip_prefix("rtmp://")) else {
            return false;
        };
        if record.id != owner {
            return false;
        }
        // A name is resolved within the same bound.
        let connect = tokio::net::TcpStream::connect(addr);
        matches!(
            tokio::time::timeout(DEATH_PROBE, connect).await,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
        )
    }

    /// The record of the node that owns stream `key`, as the directory has it.
    async fn owner(&self, key: &str) -> Result<Option<NodeRecord>, ClusterError> {
        self.ask(|reply| Command::Locate {
            key: key.to_string(),
            reply,
        })
        .await
    }

    /// Which node to pull stream `key` from.
    pub async fn locate(&self, key: &str) -> Located {
        let found = match self.owner(key).await {
            Ok(Some(record)) if record.id != *self.id => Located::At(record),
            Ok(_) => Located::Nowhere,
            Err(e) => {
                tracing::debug!(stream = %key, "cluster: lookup: {e}");
                return Located::Unknown;
            }
        };
        let counter = match found {
            Located::At(_) => &self.counters.located,
            _ => &self.counters.not_located,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Every live node with its streams, as the directory has them.
    pub async fn nodes(&self) -> Result<Vec<NodeEntry>, ClusterError> {
        self.ask(|reply| Command::Nodes { reply }).await
    }

    /// Whether new sessions should go to another node: this one drains, or has more
    /// connections (`connections`: now) or egress than `cluster.max_connections` and
    /// `cluster.max_egress_mbps` allow.
    fn overloaded(&self, connections: usize) -> bool {
        self.counters.draining.load(Ordering::Relaxed)
            || (self.max_connections > 0 && connections > self.max_connections)
            || (self.max_egress_bps > 0
                && self.counters.egress_bps.load(Ordering::Relaxed) > self.max_egress_bps)
    }

    /// The base URL (`scheme`: `http`, `rtsp`...) of the least loaded other node that
    /// does not drain, from a listing at most a third of the TTL old.
    async fn elsewhere(&self, scheme: &str) -> Option<String> {
        let fresh = {
            let others = self.others.lock().unwrap_or_else(|e| e.into_inner());
            others.0.is_some_and(|at| at.elapsed() < self.listing_life)
        };
        if !fresh {
            let nodes = self.nodes().await.ok()?;
            let records = nodes
                .into_iter()
                .map(|n| n.record)
                .filter(|r| r.id != *self.id)
                .collect();
            *self.others.lock().unwrap_or_else(|e| e.into_inner()) =
                (Some(std::time::Instant::now()), records);
        }
        let others = self.others.lock().unwrap_or_else(|e| e.into_inner());
        let best = others
            .1
            .iter()
            .filter(|r| !r.draining && r.urls.contains_key(scheme))
            .min_by_key(|r| (r.load.connections, r.load.egress_bps))?;
        best.urls.get(scheme).cloned()
    }

    /// Where a new session of `scheme` (`http`, `rtsp`) for `path` and `query` goes
    /// instead of here, when this node drains or is over its load (`connections`: now):
    /// the least loaded other node's URL with the same path and query. Counted.
    pub async fn redirect(
        &self,
        scheme: &str,
        connections: usize,
        path: &str,
        query: &str,
    ) -> Option<String> {
        if !self.overloaded(connections) {
            return None;
        }
        let base = self.elsewhere(scheme).await?;
        self.counters.redirects.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(path, to = %base, "cluster: sent elsewhere");
        let mut to = format!("{base}{path}");
        if !query.is_empty() {
            to.push('?');
            to.push_str(query);
        }
        Some(to)
    }

    /// This node drains: other nodes and placement see it in its record.
    pub fn drain(&self) {
        self.counters.draining.store(true, Ordering::Relaxed);
    }

    /// Leaves the directory, from a thread outside any runtime (the server's stop).
    pub fn leave_blocking(&self) {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Command::Leave { reply }).is_ok() {
            let _ = answer.blocking_recv();
        }
    }

    fn release(&self, key: &str) {
        let _ = self.tx.send(Command::Release {
            key: key.to_string(),
        });
    }

    fn orphan(&self, key: &str) {
        let _ = self.tx.send(Command::Orphan {
            key: key.to_string(),
        });
    }
}

/// The URL as the logs may show it: no password.
fn redacted(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://***{}", &url[at..]),
        _ => url.to_string(),
    }
}

/// Each stream's tap: tells the directory when a stream's publisher left (another
/// node may take it during the grace window) and when it ended (its entry goes).
/// Streams this node did not claim (pulled ones) are ignored by the directory.
impl Attach for Cluster {
    fn attach(&self, key: &str, _id: u64) -> Option<Arc<dyn Tap>> {
        Some(Arc::new(StreamEntry {
            key: key.to_string(),
            cluster: self.clone(),
        }))
    }
}

#[derive(Debug)]
struct StreamEntry {
    key: String,
    cluster: Cluster,
}

impl Tap for StreamEntry {
    fn publisher_left(&self) {
        self.cluster.orphan(&self.key);
    }

    fn end(&self, _stream: &str) {
        self.cluster.release(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_the_logs() {
        assert_eq!(
            redacted("redis://user:secret@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(redacted("redis://10.0.0.1"), "redis://10.0.0.1");
    }

    #[test]
    fn directory_urls_are_checked() {
        let mut s = ClusterSettings {
            directory: "http://x".into(),
            node_id: String::new(),
            advertise: String::new(),
            ttl_ms: 5000,
            timeout_ms: 1000,
            prefix: "sluice".into(),
            tls_ca: String::new(),
            max_connections: 0,
            max_egress_mbps: 0,
        };
        assert!(s.check().is_err());
        s.directory = "redis://127.0.0.1:6379/0".into();
        assert!(s.check().is_ok());
        s.directory = "valkey://127.0.0.1".into();
        assert!(s.check().is_ok());
        s.ttl_ms = 10;
        assert!(s.check().is_err());
    }
}
