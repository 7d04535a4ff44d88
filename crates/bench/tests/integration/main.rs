//! The bench tool's tests: its clients against the server.
//! One binary for all of them: each file under `tests/` used to link the
//! crate again; modules of one binary link it once.

mod common;

mod hls_smoke;
mod rtsp;
mod rtsp_publish;
mod smoke;
mod srt;
mod tls;
mod whep;
