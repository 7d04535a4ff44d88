//! The HLS crate's integration tests.
//! One binary for all of them: each file under `tests/` used to link the
//! crate again; modules of one binary link it once.

mod common;

mod blocking_reload;
mod ll_hls_playlist;
mod named_segments;
mod random_calls;
mod ts_playlist;
