//! Sluice, the live streaming media server: configuration, workers, the stream hub and
//! its fan-out, and one folder per protocol.
//!
//! The map (see `docs/architecture.md` for the path of one frame):
//! - `core`: the data path — `hub` (streams) → `ring` (recent packets) → `packet`
//!   (shared output bytes) → `fanout` (per-worker players); `ingest` (publishers).
//! - `io`: sockets and files — the player transport seam (`sock`), TLS, `sendmmsg`,
//!   memfds, shared file mappings.
//! - protocols: `rtmp`, `rtsp`, `http` (HTTP/1.1, WebSocket, HTTP/2, HLS routes).
//! - features: `hls` (live segmenting), `vod` (files on demand), `record`, `auth`,
//!   `relay` (edge pulls and pushes), `hooks` (notifications); below `config`, which
//!   assembles their settings.
//! - `driver`: the one connection driver every protocol's session runs in.
//! - `server` starts the workers; `ctx` is what a connection of a worker can reach;
//!   `delay` measures how late each worker runs its tasks.
#![warn(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod auth;
pub mod config;
mod core;
mod ctx;
mod delay;
mod driver;
mod hls;
mod hooks;
mod http;
mod io;
mod keys;
mod ops;
mod record;
mod relay;
mod rtmp;
mod rtsp;
mod server;
mod srt;
#[cfg(test)]
mod test_alloc;
mod vod;
mod webrtc;

/// What the fuzz targets (`crates/server/fuzz`) reach; not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::auth::jwt::Jwt;
    pub use crate::auth::{Action, Credentials};
    pub use crate::io::http_client::Target;
}

pub use config::{Cli, Config};
pub use core::hub;
pub use ops::count_panics;
pub use server::Server;
