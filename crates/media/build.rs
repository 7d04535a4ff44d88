//! Tells the tests that cross-check with ffmpeg and ffprobe whether they are installed
//! (`cfg(have_ffmpeg)`), and warns how many tests are skipped when they are not. See
//! `scripts/e2e_tools.rs`.

#[path = "../../scripts/e2e_tools.rs"]
mod e2e_tools;

fn main() {
    e2e_tools::probe(&[e2e_tools::FFMPEG]);
}
