//! What a cluster directory stores, and the small trait a store implements (Redis and
//! Valkey now; etcd can follow with the same five operations).
//!
//! Every entry has a time to live that its node refreshes: a node that dies leaves
//! nothing behind for longer than the TTL, and nobody has to clean up after it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// A node as the directory holds it: who it is, where each protocol reaches it, and
/// how loaded it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub id: String,
    /// The server's version.
    pub version: String,
    /// When the process started (Unix ms).
    pub started_ms: u64,
    /// Per protocol (`rtmp`, `rtmps`, `rtsp`, `http`, `https`, `srt`, `api`), the URL
    /// other nodes and redirected clients reach it at.
    pub urls: BTreeMap<String, String>,
    pub load: NodeLoad,
    /// Leaving: takes no new sessions.
    #[serde(default)]
    pub draining: bool,
}

impl NodeRecord {
    /// Where another node pulls a stream from this one: its RTMP listener (see
    /// `docs/cluster.md` for why RTMP).
    pub fn pull_url(&self) -> Option<&str> {
        self.urls.get("rtmp").map(String::as_str)
    }
}

/// A node's load when it last refreshed its record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeLoad {
    /// Connections open (every protocol's).
    pub connections: u64,
    /// Streams with a publisher (or pull) here.
    pub streams: u64,
    /// Media sent to players, bits per second over the last refresh period.
    pub egress_bps: u64,
    /// CPU used by the process, in cores, over the last refresh period.
    pub cpu: f64,
}

/// A node with the streams it owns, as `/api/v1/cluster` lists them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeEntry {
    #[serde(flatten)]
    pub record: NodeRecord,
    pub streams: Vec<String>,
}

/// What a claim on a stream found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// The node owns the stream now; `from` is the node it was taken from (a takeover).
    Owned { from: Option<String> },
    /// Another node owns it.
    Held(String),
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("directory: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("directory: no answer within {0:?}")]
    Timeout(Duration),
    #[error("directory: a record that does not parse: {0}")]
    Record(#[from] serde_json::Error),
    #[error("directory: {0}")]
    Parse(#[from] redis::ParsingError),
    #[error("directory: an answer of an unexpected shape")]
    Shape,
}

/// A cluster directory. Every write carries the TTL after which it lapses unless
/// refreshed.
#[allow(async_fn_in_trait)]
pub trait Store: Clone + 'static {
    /// Writes `node`'s record and ownership of each of `owned` (re-registering those the
    /// store forgot), each marked away when its flag is set (see [`Store::away`]);
    /// returns the streams another node holds now.
    async fn refresh(
        &self,
        node: &NodeRecord,
        owned: &[(String, bool)],
        ttl: Duration,
    ) -> Result<Vec<String>, StoreError>;

    /// Makes `node` the owner of stream `key` unless another node owns it (and its
    /// publisher is not away); with `takeover`, whoever owns it. Atomic: two nodes
    /// cannot both win.
    async fn claim(
        &self,
        node: &str,
        key: &str,
        takeover: bool,
        ttl: Duration,
    ) -> Result<Claimed, StoreError>;

    /// Stream `key`'s publisher left `node` (its grace window): another node may claim
    /// it without a takeover, and `node` is still where it is found until then.
    async fn away(&self, node: &str, key: &str, ttl: Duration) -> Result<(), StoreError>;

    /// Stream `key` is no longer `node`'s (nothing if another owns it now).
    async fn release(&self, node: &str, key: &str) -> Result<(), StoreError>;

    /// The record of the node that owns stream `key`.
    async fn owner(&self, key: &str) -> Result<Option<NodeRecord>, StoreError>;

    /// Every live node and the streams it owns.
    async fn nodes(&self) -> Result<Vec<NodeEntry>, StoreError>;

    /// `node` leaves: its record and its streams go now, not at their TTL.
    async fn leave(&self, node: &str, owned: &[String]) -> Result<(), StoreError>;
}
