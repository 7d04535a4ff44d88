//! Settings: defaults for everything, a TOML file over them, command-line flags over both.
//!
//! Every flag is also a key of the file, with the same name in snake_case, so an
//! operator can move a tried flag into the file unchanged.

use crate::record;
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
    pub rtp_ports: String,
    pub rtsp_users: Vec<String>,
    pub rtsp_auth: String,
    pub rtsp_batch: bool,
    pub rtsp_session_timeout_s: u64,
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
    pub record: Vec<String>,
    pub record_dir: String,
    pub record_format: String,
    pub record_rotate_s: u64,
    pub record_fragment_ms: u64,
    pub record_queue_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rtmp: "0.0.0.0:1935".into(),
            rtsp: "0.0.0.0:8554".into(),
            rtp_ports: "30000-30199".into(),
            rtsp_users: Vec::new(),
            rtsp_auth: "publish".into(),
            rtsp_batch: true,
            rtsp_session_timeout_s: 60,
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
            record: Vec::new(),
            record_dir: "recordings".into(),
            record_format: "fmp4".into(),
            record_rotate_s: 3600,
            record_fragment_ms: 1000,
            record_queue_bytes: 64 << 20,
        }
    }
}

/// What each key means, in the order `--print-config` prints them.
const DOCS: &[(&str, &str)] = &[
    ("rtmp", "RTMP listener address, or \"off\"."),
    ("rtsp", "RTSP listener address (publish with ANNOUNCE/RECORD, play with DESCRIBE/PLAY; RTP interleaved on TCP or over UDP), or \"off\"."),
    ("rtp_ports", "UDP ports for RTSP's RTP over UDP, as \"A-B\": each worker binds one pair (RTP on an even port, RTCP on the next) shared by all its UDP sessions; \"0\" lets the kernel choose; \"off\" offers TCP only."),
    ("rtsp_users", "RTSP users as \"name:password\"; empty (the default) asks nobody for credentials. Clients get Digest and Basic challenges (401)."),
    ("rtsp_auth", "Which RTSP requests need credentials when rtsp_users is set: \"publish\" (ANNOUNCE/RECORD) or \"all\" (every request but OPTIONS)."),
    ("rtsp_batch", "Send all RTP packets of a frame (of a merge window) with one call: a vectored write on TCP, sendmmsg on UDP. false sends each packet with its own call, only to measure what batching saves."),
    ("rtsp_session_timeout_s", "An RTSP session with no request (and, playing over UDP, no RTCP receiver report) for this long is closed; announced to clients, which send keep-alives."),
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
    ("record", "Streams to record, as patterns: \"live/*\" (every stream of app live), \"live/cam1\" (one stream), \"*/cam*\", \"*\" (every stream); none by default."),
    ("record_dir", "Where recordings go, relative to media_root (or absolute): <record_dir>/<app>/<stream>/<stream>-<UTC YYYYmmdd-HHMMSS>.mp4."),
    ("record_format", "Container of recordings: \"fmp4\" (fragmented MP4, played by /vod/) or \"ts\" (MPEG-TS)."),
    ("record_rotate_s", "A recording starts a new file at the first keyframe after this many seconds."),
    ("record_fragment_ms", "A recording writes a fragment at the first keyframe after this many ms (audio-only: every this many ms; without keyframes: after 4 times this), which bounds what a crash loses."),
    ("record_queue_bytes", "Bytes of frames waiting for the recording thread; past this (a stalled disk) a recording drops frames until its next keyframe."),
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
    /// An RTSP user "name:password" (repeat for more); none asks nobody.
    #[arg(long = "rtsp-user", value_name = "NAME:PASSWORD")]
    pub rtsp_users: Vec<String>,
    /// Send each frame's RTP packets with one call (true) or one call per packet [default: true].
    #[arg(long, value_name = "BOOL")]
    pub rtsp_batch: Option<bool>,
    /// Which RTSP requests need credentials: publish or all [default: publish].
    #[arg(long, value_name = "WHICH")]
    pub rtsp_auth: Option<String>,
    /// UDP port range for RTSP RTP/RTCP over UDP ("A-B", "0" or "off") [default: 30000-30199].
    #[arg(long, value_name = "A-B")]
    pub rtp_ports: Option<String>,
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
    /// Record streams matching PATTERN ("live/*", "live/cam1", "*"); repeat or comma-separate.
    #[arg(long, value_name = "PATTERN", value_delimiter = ',')]
    pub record: Vec<String>,
    /// Directory of recordings, relative to the media root [default: recordings].
    #[arg(long, value_name = "DIR")]
    pub record_dir: Option<String>,
    /// Container of recordings: fmp4 or ts [default: fmp4].
    #[arg(long, value_name = "FORMAT")]
    pub record_format: Option<String>,
    /// A recording starts a new file at the first keyframe after this long [default: 3600].
    #[arg(long, value_name = "S")]
    pub record_rotate_s: Option<u64>,
    /// A recording writes a fragment at the first keyframe after this long [default: 1000].
    #[arg(long, value_name = "MS")]
    pub record_fragment_ms: Option<u64>,
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
        if !cli.rtsp_users.is_empty() {
            config.rtsp_users = cli.rtsp_users.clone();
        }
        if cli.tls_self_signed {
            config.tls_self_signed = true;
        }
        flag!(
            rtmp,
            rtsp,
            rtp_ports,
            rtsp_auth,
            rtsp_batch,
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
            media_root,
            record_dir,
            record_format,
            record_rotate_s,
            record_fragment_ms
        );
        if !cli.record.is_empty() {
            config.record = cli.record.clone();
        }
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
        if !matches!(self.rtsp_auth.as_str(), "publish" | "all") {
            return Err(ConfigError::Invalid {
                key: "rtsp_auth",
                why: format!("{:?} is neither \"publish\" nor \"all\"", self.rtsp_auth),
            });
        }
        if let Some(bad) = self.rtsp_users.iter().find(|u| !u.contains(':')) {
            return Err(ConfigError::Invalid {
                key: "rtsp_users",
                why: format!("{bad:?} is not \"name:password\""),
            });
        }
        if let Err(why) = self.rtp_port_range() {
            return Err(ConfigError::Invalid {
                key: "rtp_ports",
                why,
            });
        }
        if !(128..=(16 << 20)).contains(&self.rtmp_chunk_size) {
            return Err(ConfigError::Invalid {
                key: "rtmp_chunk_size",
                why: "must be between 128 and 16777216".into(),
            });
        }
        for pattern in &self.record {
            if let Err(why) = record::Pattern::parse(pattern) {
                return Err(ConfigError::Invalid { key: "record", why });
            }
        }
        if record::Format::parse(&self.record_format).is_none() {
            return Err(ConfigError::Invalid {
                key: "record_format",
                why: format!("{:?} is neither \"fmp4\" nor \"ts\"", self.record_format),
            });
        }
        if self.record_rotate_s == 0 {
            return Err(ConfigError::Invalid {
                key: "record_rotate_s",
                why: "must be at least 1".into(),
            });
        }
        if !(100..=60_000).contains(&self.record_fragment_ms) {
            return Err(ConfigError::Invalid {
                key: "record_fragment_ms",
                why: "must be between 100 and 60000".into(),
            });
        }
        if self.record_queue_bytes < (1 << 20) {
            return Err(ConfigError::Invalid {
                key: "record_queue_bytes",
                why: "must be at least 1 MiB".into(),
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

    /// The UDP ports RTSP may bind for RTP/RTCP: `Ok(None)` when off, `Ok(Some((0, 0)))`
    /// for kernel-chosen ports.
    pub fn rtp_port_range(&self) -> Result<Option<(u16, u16)>, String> {
        match self.rtp_ports.trim() {
            "off" => Ok(None),
            "0" => Ok(Some((0, 0))),
            range => {
                let bad = || format!("{range:?} is not \"A-B\" (A even, B > A), \"0\" or \"off\"");
                let (a, b) = range.split_once('-').ok_or_else(bad)?;
                let a: u16 = a.trim().parse().map_err(|_| bad())?;
                let b: u16 = b.trim().parse().map_err(|_| bad())?;
                if a & 1 != 0 || b <= a || a == 0 {
                    return Err(bad());
                }
                Ok(Some((a, b)))
            }
        }
    }

    /// The RTSP session settings, with the users and policy of the configuration.
    pub fn rtsp_session(&self) -> sluice_rtsp::ServerConfig {
        let users: std::collections::HashMap<String, String> = self
            .rtsp_users
            .iter()
            .filter_map(|u| u.split_once(':'))
            .map(|(n, p)| (n.to_string(), p.to_string()))
            .collect();
        sluice_rtsp::ServerConfig {
            auth: (!users.is_empty()).then(|| sluice_rtsp::AuthConfig::new("sluice", users)),
            session_timeout: std::time::Duration::from_secs(self.rtsp_session_timeout_s.max(1)),
            auth_policy: match self.rtsp_auth.as_str() {
                "all" => sluice_rtsp::AuthPolicy::All,
                _ => sluice_rtsp::AuthPolicy::Publish,
            },
            ..sluice_rtsp::ServerConfig::default()
        }
    }

    /// A listener address, or `None` when it is "off".
    pub fn listener(value: &str) -> Option<SocketAddr> {
        value.parse().ok()
    }

    /// The recorder's settings, or `None` when no stream is to be recorded.
    pub fn record_config(&self) -> Option<record::RecordConfig> {
        let patterns: Vec<record::Pattern> = self
            .record
            .iter()
            .filter_map(|p| record::Pattern::parse(p).ok())
            .collect();
        if patterns.is_empty() {
            return None;
        }
        let ticks_per_ms = i64::from(sluice_media::CLOCK_HZ / 1000);
        Some(record::RecordConfig {
            patterns,
            dir: PathBuf::from(&self.media_root).join(&self.record_dir),
            fragmenter: record::FragmenterConfig {
                format: record::Format::parse(&self.record_format).unwrap_or(record::Format::Fmp4),
                fragment_ticks: i64::try_from(self.record_fragment_ms)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(ticks_per_ms),
                rotate_ticks: i64::try_from(self.record_rotate_s)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(1000 * ticks_per_ms),
            },
            queue_bytes: self.record_queue_bytes,
        })
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
    fn record_patterns_from_file_and_flags() {
        let config =
            Config::from_toml("record = [\"live/*\", \"*\"]\nrecord_rotate_s = 60\n").unwrap();
        assert_eq!(config.record, ["live/*", "*"]);
        assert!(config.validate().is_ok());
        let cli = Cli::parse_from(["sluice", "--record", "live/*,app/cam", "--record", "x/y"]);
        assert_eq!(
            Config::load(&cli).unwrap().record,
            ["live/*", "app/cam", "x/y"]
        );
        let cli = Cli::parse_from(["sluice", "--record", "live"]);
        assert!(matches!(
            Config::load(&cli),
            Err(ConfigError::Invalid { key: "record", .. })
        ));
        let cli = Cli::parse_from(["sluice", "--record-format", "avi"]);
        assert!(matches!(
            Config::load(&cli),
            Err(ConfigError::Invalid {
                key: "record_format",
                ..
            })
        ));
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

    #[test]
    fn rtp_port_ranges() {
        let with = |v: &str| Config {
            rtp_ports: v.into(),
            ..Config::default()
        };
        assert_eq!(
            with("30000-30199").rtp_port_range(),
            Ok(Some((30000, 30199)))
        );
        assert_eq!(with("0").rtp_port_range(), Ok(Some((0, 0))));
        assert_eq!(with("off").rtp_port_range(), Ok(None));
        for bad in ["30001-30100", "30000-30000", "x-y", "30000", "0-10"] {
            assert!(with(bad).rtp_port_range().is_err(), "{bad}");
        }
    }
}
