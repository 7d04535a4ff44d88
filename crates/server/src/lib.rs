//! Sluice, the live streaming media server: configuration, workers, the stream hub and
//! its fan-out, and one module per protocol.
//!
//! Read in this order: `hub` (streams) → `ring` (recent packets) → `packet` (shared
//! output bytes) → `fanout` (per-worker players) → `ingest` (publishers) → `rtmp`, `rtsp`, `http` (protocol drivers).
#![warn(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod config;
mod fanout;
mod filemap;
mod hls;
mod http;
pub mod hub;
mod ingest;
mod memfile;
mod packet;
mod play;
mod record;
mod ring;
mod rtmp;
mod rtsp;
mod sock;
mod tls;
mod udp;
mod udp_send;
mod viewers;
mod vod;
mod worker;

pub use config::{Cli, Config};
pub use worker::Server;
