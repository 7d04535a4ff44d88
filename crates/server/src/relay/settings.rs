//! What the pulls and pushes are made of: the `[edge]` table and the relay keys of the
//! `[[apps]]` entries, as the configuration assembles them (`Config::relay_config`).

use serde::{Deserialize, Serialize};

/// The `[edge]` table. Its keys' defaults, flags and help are in the configuration's
/// settings table (`config.rs`), which also gives it its `Default`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EdgeSettings {
    pub origins: Vec<String>,
    pub idle_ms: u64,
    pub retry_min_ms: u64,
    pub retry_max_ms: u64,
    pub max_failures: u32,
    pub connect_timeout_ms: u64,
    pub forward_publish: bool,
    pub tls_ca: String,
    pub lookup_url: String,
    pub max_pulls: usize,
}

/// What an `[[apps]]` entry says of the pulls and pushes of the streams its `name`
/// matches (a pattern as in `Pattern::app`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppRelayConfig {
    pub name: String,
    /// `origins`: instead of the edge's.
    pub origins: Option<Vec<String>>,
    /// `push`: URLs the streams are pushed to.
    pub push: Option<Vec<String>>,
    /// `pull`: the exact URL the streams are pulled from.
    pub pull: Option<String>,
    /// `pull_always`: pull from the start, watched or not.
    pub pull_always: Option<bool>,
    /// `pull_transport`: "tcp" or "udp", for an rtsp:// pull.
    pub pull_transport: Option<String>,
}

/// The settings of [`super::Relays`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RelayConfig {
    pub edge: EdgeSettings,
    pub apps: Vec<AppRelayConfig>,
}
