//! Settings: defaults for everything, a TOML file over them, command-line flags over both.
//!
//! Every flag is also a key of the file, with the same name in snake_case, so an
//! operator can move a tried flag into the file unchanged.

use clap::Parser;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The complete configuration. Field docs are printed by `--print-config`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub rtmp: String,
    pub rtsp: String,
    pub http: String,
    pub https: String,
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_self_signed: bool,
    pub workers: usize,
    pub log: String,
    pub merge_ms: u64,
    pub rtmp_chunk_size: u32,
    pub rtmp_max_message_len: usize,
    pub player_send_buffer: usize,
    pub ring_ms: u64,
    pub ring_bytes: usize,
    pub player_max_lag_ms: u64,
    pub player_max_skips: u32,
    pub publish_grace_ms: u64,
    pub play_wait_ms: u64,
    pub idle_timeout_ms: u64,
    pub hls: bool,
    pub hls_segment_ms: u32,
    pub hls_part_ms: u32,
    pub hls_window: usize,
    pub media_root: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rtmp: "0.0.0.0:1935".into(),
            rtsp: "0.0.0.0:8554".into(),
            http: "0.0.0.0:8080".into(),
            https: "0.0.0.0:8443".into(),
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_self_signed: false,
            workers: 0,
            log: "info".into(),
            merge_ms: 200,
            rtmp_chunk_size: 4096,
            rtmp_max_message_len: 8 << 20,
            player_send_buffer: 256 << 10,
            ring_ms: 10_000,
            ring_bytes: 64 << 20,
            player_max_lag_ms: 3_000,
            player_max_skips: 5,
            publish_grace_ms: 10_000,
            play_wait_ms: 3_000,
            idle_timeout_ms: 30_000,
            hls: true,
            hls_segment_ms: 2_000,
            hls_part_ms: 300,
            hls_window: 6,
            media_root: "./media".into(),
        }
    }
}

/// What each key means, in the order `--print-config` prints them.
const DOCS: &[(&str, &str)] = &[
    ("rtmp", "RTMP listener address, or \"off\"."),
    ("rtsp", "RTSP listener address (publish with ANNOUNCE/RECORD, play with DESCRIBE/PLAY; RTP interleaved on TCP), or \"off\"."),
    ("http", "HTTP listener address (HTTP-FLV, WebSocket-FLV, HLS), or \"off\"."),
    ("https", "HTTPS listener address (the same routes as HTTP), or \"off\"; it listens only with a certificate (tls_cert and tls_key) or tls_self_signed."),
    ("tls_cert", "PEM file with the HTTPS certificate chain."),
    ("tls_key", "PEM file with the HTTPS private key."),
    ("tls_self_signed", "Generate a self-signed certificate for localhost at start (development only)."),
    ("workers", "Worker threads, each with its own event loop and listeners; 0 = one per core."),
    ("log", "Log filter: error, warn, info, debug, trace, or a tracing directive such as \"sluice=debug\"."),
    ("merge_ms", "Merged writes: a player's socket is written at most once per this many ms, with every frame since; 0 writes each frame at once (lowest latency, more CPU)."),
    ("rtmp_chunk_size", "Outgoing RTMP chunk size; the same for every player so chunked bytes are shared."),
    ("rtmp_max_message_len", "Largest RTMP message accepted from a peer, in bytes."),
    ("player_send_buffer", "Kernel send buffer per player socket, in bytes; small so a slow player's lag shows in the ring, where the skip policy sees it, instead of parking megabytes in the kernel."),
    ("ring_ms", "How much recent media each stream keeps (the GOP cache and the slack for slow players), in ms; at least one GOP is always kept."),
    ("ring_bytes", "Upper bound of one stream's ring in bytes, whatever ring_ms says."),
    ("player_max_lag_ms", "A player this far behind the newest frame skips to the newest keyframe."),
    ("player_max_skips", "A player that had to skip more often than this is disconnected."),
    ("publish_grace_ms", "When a publisher drops, its players wait this long for it to come back, and continue with continuous timestamps if it does."),
    ("play_wait_ms", "A player of a stream that is not live waits this long for a publisher, then gets not-found (RTMP NetStream.Play.StreamNotFound, HTTP 404)."),
    ("idle_timeout_ms", "A connection that sends nothing this long while nothing is due to it (a publisher without media, a request never completed), or that takes nothing of a file download this long, is closed."),
    ("hls", "Segment every live stream for HLS in memory: MPEG-TS at /app/stream.m3u8, fMP4 with Low-Latency HLS at /app/stream/index.m3u8."),
    ("hls_segment_ms", "HLS target segment duration in ms; segments start at keyframes, so they last at least one GOP."),
    ("hls_part_ms", "Low-Latency HLS part duration in ms."),
    ("hls_window", "Segments listed in a live playlist; three more are kept for slow clients."),
    ("media_root", "Directory of files served on demand (/files/ downloads, /vod/ playback) and where recordings are written."),
];

/// Command-line flags; each overrides the key of the same name.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: a live streaming media server (RTMP and RTSP in and out, HTTP-FLV, WebSocket-FLV, HLS)."
)]
pub struct Cli {
    /// TOML configuration file; flags override its keys.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the complete default configuration, commented, and exit.
    #[arg(long)]
    pub print_config: bool,
    /// RTMP listener address, or "off" [default: 0.0.0.0:1935].
    #[arg(long, value_name = "ADDR")]
    pub rtmp: Option<String>,
    /// RTSP listener address, or "off" [default: 0.0.0.0:8554].
    #[arg(long, value_name = "ADDR")]
    pub rtsp: Option<String>,
    /// HTTP listener address, or "off" [default: 0.0.0.0:8080].
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// HTTPS listener address, or "off"; needs --tls-cert/--tls-key or --tls-self-signed [default: 0.0.0.0:8443].
    #[arg(long, value_name = "ADDR")]
    pub https: Option<String>,
    /// PEM certificate chain for HTTPS.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<String>,
    /// PEM private key for HTTPS.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<String>,
    /// Generate a self-signed certificate for HTTPS (development).
    #[arg(long)]
    pub tls_self_signed: bool,
    /// Worker threads; 0 = one per core [default: 0].
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Log filter (error, warn, info, debug, trace) [default: info].
    #[arg(long, value_name = "LEVEL")]
    pub log: Option<String>,
    /// Merge window for player writes in ms; 0 writes every frame at once [default: 200].
    #[arg(long, value_name = "N")]
    pub merge_ms: Option<u64>,
    /// Kernel send buffer per player socket in bytes [default: 262144].
    #[arg(long, value_name = "BYTES")]
    pub player_send_buffer: Option<usize>,
    /// Recent media kept per stream in ms [default: 10000].
    #[arg(long, value_name = "MS")]
    pub ring_ms: Option<u64>,
    /// A player this far behind skips to the newest keyframe [default: 3000].
    #[arg(long, value_name = "MS")]
    pub player_max_lag_ms: Option<u64>,
    /// Skips after which a slow player is disconnected [default: 5].
    #[arg(long, value_name = "N")]
    pub player_max_skips: Option<u32>,
    /// How long players wait for a dropped publisher to return [default: 10000].
    #[arg(long, value_name = "MS")]
    pub publish_grace_ms: Option<u64>,
    /// How long a player waits for a stream that is not live [default: 3000].
    #[arg(long, value_name = "MS")]
    pub play_wait_ms: Option<u64>,
    /// HLS segmenting of every live stream (true or false) [default: true].
    #[arg(long, value_name = "BOOL")]
    pub hls: Option<bool>,
    /// HLS target segment duration in ms [default: 2000].
    #[arg(long, value_name = "MS")]
    pub hls_segment_ms: Option<u32>,
    /// Low-Latency HLS part duration in ms [default: 300].
    #[arg(long, value_name = "MS")]
    pub hls_part_ms: Option<u32>,
    /// Directory served by /files/ and /vod/, where recordings go [default: ./media].
    #[arg(long, value_name = "DIR")]
    pub media_root: Option<String>,
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("{key}: {why}")]
    Invalid { key: &'static str, why: String },
}

impl Config {
    /// Defaults, then the file named by `--config`, then the flags.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let mut config = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                Config::from_toml(&text).map_err(|source| ConfigError::Parse {
                    path: path.clone(),
                    source,
                })?
            }
            None => Config::default(),
        };
        macro_rules! flag {
            ($($name:ident),*) => { $( if let Some(v) = &cli.$name { config.$name = v.clone(); } )* };
        }
        if cli.tls_self_signed {
            config.tls_self_signed = true;
        }
        flag!(
            rtmp,
            rtsp,
            http,
            https,
            tls_cert,
            tls_key,
            workers,
            log,
            merge_ms,
            player_send_buffer,
            ring_ms,
            player_max_lag_ms,
            player_max_skips,
            publish_grace_ms,
            play_wait_ms,
            hls,
            hls_segment_ms,
            hls_part_ms,
            media_root
        );
        config.validate()?;
        Ok(config)
    }

    /// Parses a TOML document; missing keys keep their defaults, unknown keys are errors.
    pub fn from_toml(text: &str) -> Result<Config, toml::de::Error> {
        toml::from_str(text)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("rtmp", &self.rtmp),
            ("rtsp", &self.rtsp),
            ("http", &self.http),
            ("https", &self.https),
        ] {
            if value != "off" && value.parse::<SocketAddr>().is_err() {
                return Err(ConfigError::Invalid {
                    key,
                    why: format!("{value:?} is neither an address like 0.0.0.0:1935 nor \"off\""),
                });
            }
        }
        if !(128..=(16 << 20)).contains(&self.rtmp_chunk_size) {
            return Err(ConfigError::Invalid {
                key: "rtmp_chunk_size",
                why: "must be between 128 and 16777216".into(),
            });
        }
        if self.ring_bytes < (1 << 20) {
            return Err(ConfigError::Invalid {
                key: "ring_bytes",
                why: "must be at least 1 MiB".into(),
            });
        }
        Ok(())
    }

    /// A listener address, or `None` when it is "off".
    pub fn listener(value: &str) -> Option<SocketAddr> {
        value.parse().ok()
    }

    /// The HLS settings of a stream, or `None` when HLS is off.
    pub fn hls_config(&self) -> Option<sluice_hls::HlsConfig> {
        self.hls.then_some(sluice_hls::HlsConfig {
            target_duration_ms: self.hls_segment_ms,
            part_duration_ms: self.hls_part_ms,
            window: self.hls_window,
            keep_extra: 3,
            low_latency: true,
        })
    }

    /// Worker threads to start.
    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// The default configuration as a commented TOML document.
    pub fn commented_defaults() -> String {
        let table = toml::Table::try_from(Config::default()).expect("defaults serialize");
        let mut out = String::from(
            "# Sluice configuration. Every key is optional; shown here with its default.\n\n",
        );
        for (key, doc) in DOCS {
            out.push_str(&format!("# {doc}\n"));
            if let Some(value) = table.get(*key) {
                out.push_str(&format!("{key} = {value}\n\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_defaults_parse_back_to_defaults() {
        let text = Config::commented_defaults();
        assert_eq!(Config::from_toml(&text).unwrap(), Config::default());
    }

    #[test]
    fn every_key_is_documented() {
        let table = toml::Table::try_from(Config::default()).unwrap();
        for key in table.keys() {
            assert!(DOCS.iter().any(|(k, _)| k == key), "{key} has no doc");
        }
        assert_eq!(table.len(), DOCS.len());
    }

    #[test]
    fn flags_override_file() {
        let dir = std::env::temp_dir().join(format!("sluice-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.toml");
        std::fs::write(&path, "merge_ms = 50\nhttp = \"off\"\n").unwrap();
        let cli = Cli::parse_from([
            "sluice",
            "--config",
            path.to_str().unwrap(),
            "--merge-ms",
            "0",
        ]);
        let config = Config::load(&cli).unwrap();
        assert_eq!(config.merge_ms, 0);
        assert_eq!(config.http, "off");
        assert_eq!(config.rtmp, "0.0.0.0:1935");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn unknown_keys_and_bad_addresses_are_errors() {
        assert!(Config::from_toml("rtmpp = \"x\"").is_err());
        let cli = Cli::parse_from(["sluice", "--rtmp", "nowhere"]);
        assert!(matches!(
            Config::load(&cli),
            Err(ConfigError::Invalid { key: "rtmp", .. })
        ));
    }
}
