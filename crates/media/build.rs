//! Tells the tests that cross-check with ffmpeg and ffprobe, and with GStreamer's VP8
//! and VP9 RTP elements, whether they are installed (`cfg(have_ffmpeg)`,
//! `cfg(have_gst_vpx)`), and warns how many tests are skipped when they are not. See
//! `scripts/e2e_tools.rs`.

#[path = "../../scripts/e2e_tools.rs"]
mod e2e_tools;

fn main() {
    e2e_tools::probe(&[e2e_tools::FFMPEG, e2e_tools::GST_VPX]);
}
