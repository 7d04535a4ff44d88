//! The server's end-to-end tests: real clients (ffmpeg, Chromium, GStreamer, nginx...) against the built server.
//! One binary for all of them: each file under `tests/` used to link the
//! crate again; modules of one binary link it once.

mod common;

mod api;
mod auth;
mod auth_backends;
mod bad_input;
mod browser;
mod cluster;
mod config;
mod console;
mod edge;
mod fanout;
mod ffmpeg;
mod files;
mod hls;
mod hls_cdn;
mod hls_crypt;
mod http_fmp4;
mod http_ts;
mod limits;
mod load;
mod panic;
mod playback;
mod publishers;
mod range_play;
mod record;
mod retina;
mod rtmp_flv;
mod rtmps;
mod rtsp;
mod shutdown;
mod snapshot;
mod soak;
mod srt;
mod udp_ingest;
mod udp_out;
mod vod;
mod webdav;
mod webrtc;
