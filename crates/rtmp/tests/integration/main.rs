//! The RTMP crate's integration tests.
//! One binary for all of them: each file under `tests/` used to link the
//! crate again; modules of one binary link it once.

mod bad_input;
mod pair;
